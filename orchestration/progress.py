"""A terse Dagster logger for terminals: one line per step start/finish and per progress message.

`retrain run` and `retrain demo` use it instead of Dagster's debug-level console logger, so a
person watching a CPU run sees where it is (ingest, SFT, GRPO step k of n, evaluation) without
the event firehose. The Dagster UI keeps the full event log either way.
"""
from __future__ import annotations

import logging
import sys
import time

import dagster as dg

_SHOWN_EVENTS = {"STEP_START": "started", "STEP_SUCCESS": "done", "STEP_FAILURE": "FAILED",
                 "ASSET_CHECK_EVALUATION": None, "PIPELINE_FAILURE": "RUN FAILED"}


class _ProgressHandler(logging.Handler):
    def __init__(self, stream=None):
        super().__init__(level=logging.INFO)
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        self.step_started: dict[str, float] = {}

    def _print(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"  [{elapsed:6.0f}s] {text}", file=self.stream, flush=True)

    def emit(self, record: logging.LogRecord) -> None:
        meta = getattr(record, "dagster_meta", None) or {}
        event = meta.get("dagster_event")
        step = meta.get("step_key") or ""
        if event is None:
            message = str(meta.get("orig_message") or record.getMessage())
            if record.levelno >= logging.INFO and not message.startswith(("Writing file", "Loading file")):
                self._print(f"{step}: {message[:160]}")
            return
        kind = event.event_type_value
        if kind == "STEP_START":
            self.step_started[step] = time.monotonic()
            self._print(f"{step} started")
        elif kind == "STEP_SUCCESS":
            took = time.monotonic() - self.step_started.get(step, time.monotonic())
            self._print(f"{step} done in {took:.0f}s")
        elif kind == "STEP_FAILURE":
            self._print(f"{step} FAILED: {str(meta.get('orig_message') or '')[:200]}")
        elif kind == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data.evaluation
            if not data.passed:
                self._print(f"check {data.check_name} on {data.asset_key.to_user_string()}: failed")


@dg.logger(description="Terse progress lines on stdout (one per step and progress message).")
def progress_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("agent-retrain-progress", level=logging.INFO)
    logger.addHandler(_ProgressHandler())
    return logger


QUIET_LOGGING = {"loggers": {"progress": {}}}
