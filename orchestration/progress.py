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


def _root_cause(event) -> str:
    """The innermost error message of a failed step (what a person needs to act on)."""
    error = getattr(event.event_specific_data, "error", None)
    while error is not None and error.cause is not None:
        error = error.cause
    return (error.message.strip().splitlines() or [""])[-1][:300] if error is not None else ""


class _ProgressHandler(logging.Handler):
    def __init__(self, stream=None):
        super().__init__(level=logging.DEBUG)  # step events arrive at DEBUG; plain messages filtered below
        self.stream = stream or sys.stdout
        self.started = time.monotonic()
        self.step_started: dict[str, float] = {}

    def _print(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        print(f"  [{elapsed:6.0f}s] {text}", file=self.stream, flush=True)

    def emit(self, record: logging.LogRecord) -> None:
        # A display problem must never fail the step that logged: the standard logging contract
        # (handleError reports it on stderr) rather than an exception into Dagster's step.
        try:
            self._show(record)
        except Exception:
            self.handleError(record)

    def _show(self, record: logging.LogRecord) -> None:
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
            self._print(f"{step} FAILED: {_root_cause(event)}")
        elif kind == "ASSET_CHECK_EVALUATION":
            data = event.event_specific_data
            if not data.passed:
                self._print(f"check {data.check_name} on {data.asset_key.to_user_string()}: failed")


@dg.logger(description="Terse progress lines on stdout (one per step and progress message).")
def progress_logger(init_context: dg.InitLoggerContext) -> logging.Logger:
    logger = logging.Logger("agent-retrain-progress", level=logging.DEBUG)
    logger.addHandler(_ProgressHandler())
    return logger


QUIET_LOGGING = {"loggers": {"progress": {}}}
