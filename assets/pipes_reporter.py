"""The training process's reporter when Dagster launches it: events through Dagster Pipes.

The training asset sets RETRAIN_REPORTER=assets.pipes_reporter:PipesReporter in the
subprocess's environment; `training.reporting.make_reporter` builds it. It lives here, with the
orchestration, so `training/` needs no Dagster package at all.
"""

from __future__ import annotations

import json
from typing import Any

from training.grpo_result import FINAL_EVENT
from training.reporting import json_safe

SPEC = "assets.pipes_reporter:PipesReporter"


class PipesReporter:
    """The same events through an open Dagster Pipes context."""

    def __init__(self) -> None:
        from dagster_pipes import open_dagster_pipes

        self._context = open_dagster_pipes()
        self._context.__enter__()

    def log(self, message: str, **fields: Any) -> None:
        suffix = f" {json.dumps(json_safe(fields), sort_keys=True)}" if fields else ""
        self._context.log.info(message + suffix)

    def progress(self, step: int, total: int, **fields: Any) -> None:
        shown = " ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(fields.items()))
        self._context.log.info(f"grpo step {step}/{total} {shown}".rstrip())  # visible in the run's log
        self._context.report_custom_message(json_safe({"kind": "progress", "step": step, "total": total, **fields}))

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self._context.report_custom_message(json_safe({"kind": "metrics", "step": step, "values": values}))

    def final(self, summary: dict[str, Any]) -> None:
        """The run's result as a custom message (what the launching asset reads, whole), and its
        scalars as the asset's materialization metadata (what the UI shows)."""
        flat = {k: v for k, v in json_safe(summary).items() if isinstance(v, (int, float, str, bool))}
        if "metrics" in summary:
            flat.update(
                {f"metric/{k}": v for k, v in json_safe(summary["metrics"]).items() if isinstance(v, (int, float, str))}
            )
        self._context.report_custom_message(json_safe({"kind": FINAL_EVENT, **summary}))
        if self._context.asset_keys:
            self._context.report_asset_materialization(metadata=flat)

    def close(self) -> None:
        self._context.__exit__(None, None, None)
