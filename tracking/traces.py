"""Conversations as MLflow traces: evaluation trials and review samples, one trace per conversation.

A trace's root span is the conversation; under it, in order, one span per customer turn (what the
customer said: their messages, and their answers to the agent's customer-message tool), one per
assistant turn, and under each assistant turn one span per tool call it made (the arguments as
inputs, the result as outputs, and an ERROR status naming the result when the call failed).
Tags say which conversation it is (week, policy and its version, split, task id, interaction id,
intent, outcome, failure mode), so the MLflow UI's trace list filters by any of them; the judge's
numbers (verified success, the proxy reward and each weighted reward term) are feedback
assessments whose source is CODE, beside which a reviewer's own `task_success` (source HUMAN)
reads naturally.

Every text a trace carries is masked as the week's run artifacts are (`tracking.run_log.masked`):
scrubbed at any depth, and refused (PIILeakError) if anything still reads as PII.

Logging is MLflow's own asynchronous trace export (`MLFLOW_ENABLE_ASYNC_TRACE_LOGGING`, on by
default; its queue and batch sizes are MLflow's `MLFLOW_ASYNC_TRACE_LOGGING_*` settings): building
a trace costs the caller a few milliseconds, the store writes happen on MLflow's worker threads
while the next rollouts run, and `tracing_to` flushes them before it returns. MLflow's tracer
exports to the process-wide tracking URI, not to a client's, so `tracing_to` points it at the
store for the block and restores the previous setting after the flush.

mlflow is imported inside the functions that use it (about a second to import), as in
`tracking.registry`.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from dataplane.settings import setting
from evaluation.failure_modes import primary_failure_mode
from evaluation.rollout import Trial
from tracking.registry import mlflow_client, mlflow_step
from tracking.run_log import masked
from training.rewards import outcome_of
from training.sandbox.episode import MESSAGE_TOOL

# Which kind of conversation a trace holds: a week's evaluation trial, or a review sample's record.
KIND_TAG, EVALUATION_KIND, REVIEW_KIND = "retrain_trace", "evaluation", "review"
CUSTOMER_SPAN, ASSISTANT_SPAN, TOOL_SPAN, CONVERSATION_SPAN = "CUSTOMER", "CHAT_MODEL", "TOOL", "AGENT"
CODE_SOURCE_ID = "agent-retrain evaluation"  # the CODE source of the judge's assessments
PREVIEW_CHARS = 300
SPLITS = ("calibration", "shadow")  # the evaluation sets whose trials are traced


@dataclass(frozen=True)
class TraceSettings:
    """Which evaluation trials become MLflow traces; the evaluation assets' config is built from these fields."""

    log_traces: bool = setting(
        True,
        "log candidate and baseline conversations as MLflow traces linked to the week's run "
        "(the failed trials, and a seeded sample of the successes)",
    )
    trace_successes: int = setting(
        2,
        "successful trials traced per policy and evaluation set, a seeded sample (the same "
        "conversations for candidate and baseline where both succeeded); 0: failures only",
    )
    max_traces: int = setting(
        10,
        "the most trials traced per policy and evaluation set, successes included: every failed "
        "trial while they fit, else a seeded sample of them (the rest are counted in the asset's "
        "`traces` metadata); -1: no cap, every failed trial. A trace costs MLflow's sqlite store "
        "about 50 ms of CPU and, written after the last rollout, about 250 ms of waiting, when the "
        "tiny agent spends about 80 ms on a whole conversation: the default keeps a demo week's "
        "evaluation within 10% (bench/traces.py); with a model that takes seconds a conversation, "
        "raise it",
    )


@dataclass
class SpanDoc:
    """One span as plain data, before it is masked and sent: a name, a span type, inputs,
    outputs, an error (sets the span's status to ERROR) and the spans under it."""

    name: str
    span_type: str
    inputs: Any = None
    outputs: Any = None
    error: str | None = None
    children: list[SpanDoc] = field(default_factory=list)


@dataclass
class ConversationTrace:
    """One conversation as a trace: the root span's name, inputs and outputs, the turns under it,
    the trace's tags, and the CODE feedback (name -> value) put on it."""

    name: str
    inputs: dict[str, Any]
    outputs: dict[str, Any]
    spans: list[SpanDoc]
    tags: dict[str, str]
    feedback: dict[str, Any] = field(default_factory=dict)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def conversation_spans(messages: Sequence[Mapping[str, Any]]) -> list[SpanDoc]:
    """The turns of a chat transcript (the rollout's format, which is the record contract's): a
    span per customer turn and per assistant turn, the assistant's tool calls under its turn.

    A tool message answers the earliest unanswered call of the latest assistant turn with that
    tool's name (the environment answers calls in order). The system prompt is left out: it is
    the same in every conversation. An answer to the customer-message tool is the customer
    speaking, so it is also a customer turn, after the assistant turn that asked.
    """
    spans: list[SpanDoc] = []
    pending: list[SpanDoc] = []
    assistant_turns = customer_turns = 0
    for message in messages:
        role = message.get("role")
        content = message.get("content")
        if role == "user":
            customer_turns += 1
            spans.append(
                SpanDoc(f"customer {customer_turns}", CUSTOMER_SPAN, outputs={"content": _text(content or "")})
            )
        elif role == "assistant":
            assistant_turns += 1
            calls = list(message.get("tool_calls") or ())
            turn = SpanDoc(
                f"assistant {assistant_turns}",
                ASSISTANT_SPAN,
                inputs={"turn": assistant_turns},
                outputs={
                    "content": _text(content or ""),
                    "tool_calls": [{"name": c.get("name"), "arguments": c.get("arguments")} for c in calls],
                },
            )
            pending = [SpanDoc(str(c.get("name")), TOOL_SPAN, inputs=c.get("arguments")) for c in calls]
            turn.children = list(pending)
            spans.append(turn)
        elif role == "tool":
            name = str(message.get("name"))
            result = _text(content or "")
            call = next((c for c in pending if c.name == name), None)
            if call is None:  # a result no call asked for: kept, as the transcript has it
                call = SpanDoc(name, TOOL_SPAN)
                spans.append(call)
            else:
                pending.remove(call)
            call.outputs = {"result": result}
            if result.startswith("Error"):  # what the environment answers a failed call with
                call.error = result[:500]
            if name == MESSAGE_TOOL:
                customer_turns += 1
                spans.append(SpanDoc(f"customer {customer_turns}", CUSTOMER_SPAN, outputs={"content": result}))
    return spans


def _opening(messages: Sequence[Mapping[str, Any]]) -> str:
    first = next((m for m in messages if m.get("role") == "user"), None)
    return "" if first is None else _text(first.get("content") or "")[:PREVIEW_CHARS]


def _last_reply(messages: Sequence[Mapping[str, Any]]) -> str:
    last = next((m for m in reversed(messages) if m.get("role") == "assistant"), None)
    return "" if last is None else _text(last.get("content") or "")[:PREVIEW_CHARS]


def judged_feedback(success: bool | None, reward: float | None, terms: Mapping[str, float]) -> dict[str, Any]:
    """The judge's numbers as feedback: `verified_success`, `proxy_reward`, and `reward/<term>` for
    each weighted term that moved the reward (a term left out is 0: a dozen zeros on every trace
    would bury the two or three terms that decided it, in the trace view and its list)."""
    out: dict[str, Any] = {}
    if success is not None:
        out["verified_success"] = bool(success)
    # An errored trial's reward is NaN: it was never judged, so there is no number to show.
    if reward is not None and math.isfinite(reward):
        out["proxy_reward"] = round(float(reward), 6)
    for name, value in sorted(terms.items()):
        if math.isfinite(value) and round(float(value), 6) != 0:
            out[f"reward/{name}"] = round(float(value), 6)
    return out


def trial_trace(trial: Trial, *, week: str, split: str, policy: str, policy_version: str) -> ConversationTrace:
    """The trace of one evaluation trial."""
    mode = primary_failure_mode(trial)
    outcome = outcome_of(trial.episode)
    tags = {
        KIND_TAG: EVALUATION_KIND,
        "week": week,
        "split": split,
        "policy": policy,
        "policy_version": policy_version,
        "task_id": trial.record_id,
        "trial": str(trial.trial),
        # Evaluated records are identified by their interaction id (`record_id_of`), so the trace
        # of a trial and the review trace of the interaction it replays share this tag.
        "interaction_id": trial.record_id,
        "intent": trial.intent or "",
        "outcome": outcome,
        "success": "true" if trial.success else "false",
        "failure_mode": mode or "none",
        "ended_by": trial.ended_by,
    }
    if trial.error is not None:  # it raised: a failure nobody judged, its message is the lead
        tags["error"] = trial.error[:500]
    return ConversationTrace(
        name=f"{split} {policy} {trial.record_id}#{trial.trial}",
        inputs={"task_id": trial.record_id, "trial": trial.trial, "customer": _opening(trial.messages)},
        outputs={
            "verified_success": bool(trial.success),
            "outcome": outcome,
            "ended_by": trial.ended_by,
            "agent": _last_reply(trial.messages),
        },
        spans=conversation_spans(trial.messages),
        tags=tags,
        # An errored trial has no proxy reward (NaN, `evaluation.rollout.Trial`): none is logged; its
        # failure_mode tag is "errored" and ended_by "error".
        feedback=judged_feedback(trial.success, None if trial.errored else trial.reward, trial.reward_terms),
    )


def _rank(seed: int, split: str, key: tuple[str, int]) -> str:
    return hashlib.sha256(f"{seed}:{split}:{key[0]}#{key[1]}".encode()).hexdigest()


def select_trials(trials: Sequence[Trial], successes: int, seed: int, split: str, max_traces: int = -1) -> list[Trial]:
    """Up to `successes` successful trials and the failed ones, at most `max_traces` in all (-1:
    no cap), in (record, trial) order. The successes' places come first; every failure fits when
    the cap allows, else those of the failures are taken.

    Samples are the trials whose hash of (seed, split, record, trial) sorts first: the same seed
    picks the same conversations again, and for candidate and baseline it picks the same
    (record, trial) wherever both succeeded, or both failed, so their traces read side by side.
    """
    order = lambda t: _rank(seed, split, t.key)  # noqa: E731 - one key for both samples
    won = sorted((t for t in trials if t.success), key=order)[: max(0, successes)]
    if max_traces >= 0:
        won = won[:max_traces]
    failed = sorted((t for t in trials if not t.success), key=order)
    if max_traces >= 0:
        failed = failed[: max_traces - len(won)]
    return sorted(failed + won, key=lambda t: t.key)


# MLflow writes finished spans in batches of MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE (default
# 5): a conversation's dozen spans then cost several store transactions. Batches of up to 1,000
# spans, sent at least every second, took the export from 117 to 51 ms of CPU a trace on the
# tiny agent's conversations (bench/results/traces.md). With MLflow's 10 export threads, such
# batches contend for the sqlite store's one writer lock, and MLflow drops the spans of traces
# whose row it could not create in 10 tries (seen: "Could not create trace_info ... spans for these
# traces will be dropped"); one export thread writes them in turn. MLflow reads these when its
# tracer starts; an operator's own values win (a tracking server takes more threads).
EXPORT_BATCHING = {
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_SPAN_BATCH_SIZE": "1000",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_INTERVAL_MILLIS": "1000",
    "MLFLOW_ASYNC_TRACE_LOGGING_MAX_WORKERS": "1",
}


@contextmanager
def tracing_to(tracking_uri: str) -> Iterator[None]:
    """Send MLflow traces to `tracking_uri` for the block; on leaving, wait until every trace
    started in it is written, then restore the previous tracking URI.

    MLflow's tracer exports to the process-wide tracking URI (and mirrors it in the
    MLFLOW_TRACKING_URI environment variable), so it is switched only when it differs, and put
    back exactly as it was: the variable unset again if it was unset. `EXPORT_BATCHING` holds for
    the block where the environment does not set those variables (a tracer MLflow started before
    the block, on this same URI, keeps its own batching).
    """
    import mlflow  # heavy (~1 s): see the module docstring

    before = os.environ.get("MLFLOW_TRACKING_URI")
    added = [name for name in EXPORT_BATCHING if name not in os.environ]
    for name in added:
        os.environ[name] = EXPORT_BATCHING[name]
    switch = mlflow.get_tracking_uri() != tracking_uri
    try:
        if switch:
            mlflow.set_tracking_uri(tracking_uri)  # the tracer restarts, reading the batching above
        yield
    finally:
        _flush_export()
        if switch:
            mlflow.set_tracking_uri(before)
        for name in added:
            os.environ.pop(name, None)


class TraceNotStartedError(RuntimeError):
    """MLflow's tracer handed back a no-op span (tracing disabled, or it failed to start one)."""


def _send_span(doc: SpanDoc) -> None:
    import mlflow  # heavy (~1 s): see the module docstring
    from mlflow.entities import SpanStatus, SpanStatusCode

    with mlflow.start_span(name=doc.name, span_type=doc.span_type) as span:
        if doc.inputs is not None:
            span.set_inputs(doc.inputs)
        for child in doc.children:
            _send_span(child)
        if doc.outputs is not None:
            span.set_outputs(doc.outputs)
        if doc.error is not None:
            span.set_status(SpanStatus(SpanStatusCode.ERROR, doc.error))


# MLflow hands finished spans to OpenTelemetry's batch processor, whose queue holds 2,048 spans
# (max(batch size, 2048)) and drops what arrives when it is full ("Queue full, dropping Span."):
# a review export of 200 conversations queued faster than one export thread wrote them, on a loaded
# machine, and 10 of its 200 traces never reached the store. Flushing whenever this many spans
# have been queued since the last flush keeps the queue at half its size or less.
FLUSH_EVERY_SPANS = 1000
_queued_spans = 0


def _span_count(docs: Sequence[SpanDoc]) -> int:
    return sum(1 + _span_count(doc.children) for doc in docs)


def _flush_export() -> None:
    """Wait until MLflow has written every queued trace; nothing is queued after."""
    import mlflow  # heavy (~1 s): see the module docstring

    global _queued_spans
    mlflow.flush_trace_async_logging()
    _queued_spans = 0


def _queued(spans: int) -> None:
    """Count `spans` queued for export; flush MLflow's trace export once FLUSH_EVERY_SPANS are."""
    global _queued_spans
    _queued_spans += spans
    if _queued_spans >= FLUSH_EVERY_SPANS:
        _flush_export()


def send_trace(trace: ConversationTrace, experiment_id: str, run_id: str | None = None) -> str:
    """Mask `trace`, start it in `experiment_id` (linked to `run_id` when given) and return its id.

    Must run inside `tracing_to`: the trace is queued for MLflow's export threads, and written
    when the block flushes (or earlier, once FLUSH_EVERY_SPANS spans wait). Raises PIILeakError,
    before anything is sent, when masking leaves PII.
    """
    import mlflow  # heavy (~1 s): see the module docstring
    from mlflow.entities import AssessmentSource, AssessmentSourceType
    from mlflow.entities.trace_location import MlflowExperimentLocation

    where = f"trace {trace.name!r}"
    clean = ConversationTrace(
        name=masked(trace.name, where),
        inputs=masked(trace.inputs, where),
        outputs=masked(trace.outputs, where),
        spans=[_masked_span(doc, where) for doc in trace.spans],
        tags=masked(trace.tags, where),
        feedback=masked(trace.feedback, where),
    )
    source = AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=CODE_SOURCE_ID)
    location = MlflowExperimentLocation(experiment_id)
    with mlflow.start_span(
        name=clean.name, span_type=CONVERSATION_SPAN, trace_destination=location, run_id=run_id
    ) as root:
        if root.trace_id is None or not root.trace_id.startswith("tr-"):
            raise TraceNotStartedError(f"MLflow did not start a trace for {clean.name!r} (got {root.trace_id!r})")
        root.set_inputs(clean.inputs)
        mlflow.update_current_trace(tags=clean.tags)
        for doc in clean.spans:
            _send_span(doc)
        # Logged while the trace is the active one, the assessments travel with it (one write).
        for name, value in clean.feedback.items():
            mlflow.log_feedback(trace_id=root.trace_id, name=name, value=value, source=source)
        root.set_outputs(clean.outputs)
    _queued(1 + _span_count(clean.spans))
    return root.trace_id


def _masked_span(doc: SpanDoc, where: str) -> SpanDoc:
    return SpanDoc(
        name=masked(doc.name, where),
        span_type=doc.span_type,
        inputs=masked(doc.inputs, where),
        outputs=masked(doc.outputs, where),
        error=masked(doc.error, where),
        children=[_masked_span(child, where) for child in doc.children],
    )


@dataclass
class TrialTraces:
    """The trace log of one evaluation set of a week: `__call__(policy, trials)` logs the chosen
    trials of one policy (`evaluation.reports.evaluate_pair` calls it as each policy finishes,
    so the export overlaps the next policy's rollouts); `logged` counts traces per policy,
    `untraced_failures` the failed trials the cap left out."""

    experiment_id: str
    run_id: str
    week: str
    split: str
    policy_versions: Mapping[str, str]
    settings: TraceSettings = TraceSettings()
    seed: int = 0
    logged: dict[str, int] = field(default_factory=dict)
    untraced_failures: dict[str, int] = field(default_factory=dict)

    def __call__(self, policy: str, trials: Sequence[Trial]) -> None:
        if not self.settings.log_traces:
            return
        settings = self.settings
        chosen = select_trials(trials, settings.trace_successes, self.seed, self.split, settings.max_traces)
        failed = sum(not t.success for t in trials) - sum(not t.success for t in chosen)
        self.untraced_failures[policy] = self.untraced_failures.get(policy, 0) + failed
        version = self.policy_versions.get(policy, policy)
        for trial in chosen:
            trace = trial_trace(trial, week=self.week, split=self.split, policy=policy, policy_version=version)
            send_trace(trace, self.experiment_id, self.run_id)
        self.logged[policy] = self.logged.get(policy, 0) + len(chosen)

    def stored(self, tracking_uri: str) -> int:
        """How many of this set's traces the store holds (after `tracing_to` flushed them)."""
        client = mlflow_client(tracking_uri)
        with mlflow_step(tracking_uri, "count the week's traces"):
            return len(_linked_trace_ids(client, self.experiment_id, self.run_id, f"tags.split = '{self.split}'"))


def week_traces(
    tracking_uri: str,
    run_id: str,
    *,
    week: str,
    split: str,
    policy_versions: Mapping[str, str],
    settings: TraceSettings,
    seed: int,
) -> TrialTraces:
    """The trace log of one evaluation set of `week`, into the experiment of the week's run
    `run_id` and linked to it. A trace already linked to that run for this split (a retried step)
    is deleted first, so the run holds one trace per logged conversation."""
    if split not in SPLITS:  # quoted into a filter string below
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "find the week's run for its traces"):
        experiment_id = client.get_run(run_id).info.experiment_id
        earlier = _linked_trace_ids(client, experiment_id, run_id, f"tags.split = '{split}'")
        if earlier:
            client.delete_traces(experiment_id, trace_ids=earlier)
    return TrialTraces(experiment_id, run_id, week, split, dict(policy_versions), settings, seed)


def all_traces(client: Any, experiment_id: str, filter_string: str, run_id: str | None = None) -> list[Any]:
    """Every trace of `experiment_id` matching `filter_string` (and linked to `run_id`), without
    spans, read page by page (MLflow returns at most 500 a call)."""
    found: list[Any] = []
    token = None
    while True:
        page = client.search_traces(
            locations=[experiment_id],
            filter_string=filter_string,
            run_id=run_id,
            include_spans=False,
            max_results=500,
            page_token=token,
        )
        found += list(page)
        token = page.token
        if not token:
            return found


def _linked_trace_ids(client: Any, experiment_id: str, run_id: str | None, filter_string: str) -> list[str]:
    """Ids of the evaluation traces in `experiment_id` matching `filter_string` (and linked to `run_id`)."""
    matching = f"tags.{KIND_TAG} = '{EVALUATION_KIND}' AND {filter_string}"
    return [t.info.trace_id for t in all_traces(client, experiment_id, matching, run_id)]
