"""Progress and metrics from the training process to whoever launched it.

Run by hand, the process prints one JSON object per line on stdout (easy to tail and to parse).
A launcher that wants the events elsewhere names its own reporter class in $RETRAIN_REPORTER:
Dagster's training asset injects `assets.pipes_reporter:PipesReporter`, which streams them
through Dagster Pipes. The learner itself never imports an orchestrator.
"""

from __future__ import annotations

import importlib
import json
import math
import os
import sys
import time
from typing import Any, Protocol, TextIO

REPORTER_ENV = "RETRAIN_REPORTER"


def json_safe(value: Any) -> Any:
    """JSON-safe: non-finite floats become strings so a NaN loss is reported, not dropped."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
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
        record = {"event": event, "time": round(time.time(), 3), **json_safe(payload)}
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


def make_reporter() -> Reporter:
    """The reporter named by $RETRAIN_REPORTER (`module:Class`), JSON lines on stdout otherwise.

    The launcher injects its own bridge this way (Dagster's training asset names
    `assets.pipes_reporter:PipesReporter`), so the learner never imports the orchestrator.
    """
    spec = os.environ.get(REPORTER_ENV)
    if not spec:
        return JsonLinesReporter()
    module_name, _, class_name = spec.partition(":")
    if not module_name or not class_name:
        raise ValueError(f"{REPORTER_ENV}={spec!r} must name a reporter as 'module:Class'")
    return getattr(importlib.import_module(module_name), class_name)()
