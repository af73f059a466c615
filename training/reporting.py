"""Progress and metrics from the training process to whoever launched it.

Run by hand, the process prints one JSON object per line on stdout (easy to tail and to parse).
Launched by Dagster Pipes (the `DAGSTER_PIPES_CONTEXT` variable is set), the same events go
through the dependency-free `dagster_pipes` client: log lines, custom messages for progress and
metrics, and one asset materialisation with the final summary. `dagster_pipes` is imported only in
that branch, so `training/` stays free of Dagster for every other caller.
"""
from __future__ import annotations

import json
import math
import os
import sys
import time
from typing import Any, Protocol, TextIO

PIPES_ENV = "DAGSTER_PIPES_CONTEXT"


def _clean(value: Any) -> Any:
    """JSON-safe: non-finite floats become strings so a NaN loss is reported, not dropped."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


class Reporter(Protocol):
    def log(self, message: str, **fields: Any) -> None: ...
    def progress(self, step: int, total: int, **fields: Any) -> None: ...
    def metrics(self, step: int, values: dict[str, float]) -> None: ...
    def final(self, summary: dict[str, Any]) -> None: ...
    def close(self) -> None: ...


class JsonLinesReporter:
    """One JSON object per event on a stream (stdout by default)."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stdout

    def _emit(self, event: str, **payload: Any) -> None:
        record = {"event": event, "time": round(time.time(), 3), **_clean(payload)}
        self.stream.write(json.dumps(record, sort_keys=True) + "\n")
        self.stream.flush()

    def log(self, message: str, **fields: Any) -> None:
        self._emit("log", message=message, **fields)

    def progress(self, step: int, total: int, **fields: Any) -> None:
        self._emit("progress", step=step, total=total, **fields)

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self._emit("metrics", step=step, values=values)

    def final(self, summary: dict[str, Any]) -> None:
        self._emit("final", **summary)

    def close(self) -> None:
        self.stream.flush()


class PipesReporter:
    """The same events through an open Dagster Pipes context."""

    def __init__(self) -> None:
        from dagster_pipes import open_dagster_pipes

        self._context = open_dagster_pipes()
        self._context.__enter__()

    def log(self, message: str, **fields: Any) -> None:
        suffix = f" {json.dumps(_clean(fields), sort_keys=True)}" if fields else ""
        self._context.log.info(message + suffix)

    def progress(self, step: int, total: int, **fields: Any) -> None:
        self._context.report_custom_message(_clean({"kind": "progress", "step": step, "total": total, **fields}))

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self._context.report_custom_message(_clean({"kind": "metrics", "step": step, "values": values}))

    def final(self, summary: dict[str, Any]) -> None:
        flat = {k: v for k, v in _clean(summary).items() if isinstance(v, (int, float, str, bool))}
        if "metrics" in summary:
            flat.update({f"metric/{k}": v for k, v in _clean(summary["metrics"]).items()
                         if isinstance(v, (int, float, str))})
        self._context.report_custom_message(_clean({"kind": "final", **summary}))
        if self._context.asset_keys:
            self._context.report_asset_materialization(metadata=flat)

    def close(self) -> None:
        self._context.__exit__(None, None, None)


def make_reporter() -> Reporter:
    """Pipes when launched by Dagster, JSON lines on stdout otherwise."""
    return PipesReporter() if PIPES_ENV in os.environ else JsonLinesReporter()
