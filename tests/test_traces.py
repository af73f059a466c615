"""Evaluation conversations as MLflow traces, against a real MLflow tracking store (sqlite in tmp).

The span tree of a conversation, which trials are traced, the masking every trace goes through,
the tracking URI restored after tracing, and a weekly evaluation (the real data assets and
`calibration_report` on the shipped tiny agent) logging its trials as traces linked to the week's
run with their tags and the judge's CODE assessments.
"""

# No `from __future__ import annotations`: Dagster reads the stand-ins' types live.

import os
from datetime import date

import dagster as dg
import pytest

from evaluation.rollout import run_rollouts
from tests.helpers_eval import escalator_policy, expert_policy, make_records
from tracking.registry import ensure_experiment, mlflow_client
from tracking.traces import (
    CODE_SOURCE_ID,
    ConversationTrace,
    SpanDoc,
    TraceSettings,
    TrialTraces,
    conversation_spans,
    select_trials,
    send_trace,
    tracing_to,
)
from training.sandbox.episode import MESSAGE_TOOL


def _store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow_client(uri)
    experiment = ensure_experiment(client, "traces-test", (tmp_path / "artifacts").as_uri())
    return uri, client, experiment


def test_a_conversation_is_a_span_per_turn_and_per_tool_call():
    messages = [
        {"role": "system", "content": "policy text"},
        {"role": "user", "content": "cancel order #W1"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"name": "get_order_details", "arguments": {"order_id": "#W1"}},
                {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "x"}},
            ],
        },
        {"role": "tool", "name": "get_order_details", "content": '{"status": "pending"}'},
        {"role": "tool", "name": "cancel_pending_order", "content": "Error: invalid reason"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": MESSAGE_TOOL, "arguments": {"message": "why?"}}]},
        {"role": "tool", "name": MESSAGE_TOOL, "content": "no longer needed"},
        {"role": "assistant", "content": "Done.", "tool_calls": []},
    ]
    spans = conversation_spans(messages)
    assert [(s.name, s.span_type) for s in spans] == [
        ("customer 1", "CUSTOMER"),
        ("assistant 1", "CHAT_MODEL"),
        ("assistant 2", "CHAT_MODEL"),
        ("customer 2", "CUSTOMER"),  # the answer to the customer-message tool is the customer speaking
        ("assistant 3", "CHAT_MODEL"),
    ]
    read, cancel = spans[1].children
    assert (read.name, read.inputs, read.outputs, read.error) == (
        "get_order_details",
        {"order_id": "#W1"},
        {"result": '{"status": "pending"}'},
        None,
    )
    assert cancel.outputs == {"result": "Error: invalid reason"} and cancel.error == "Error: invalid reason"
    assert spans[2].children[0].outputs == {"result": "no longer needed"}
    assert spans[3].outputs == {"content": "no longer needed"} and spans[4].outputs["content"] == "Done."


def test_every_failure_and_a_seeded_capped_sample_of_the_successes_are_traced():
    records = make_records(6)
    won = run_rollouts(expert_policy(records), records, k=2, max_turns=12)
    lost = run_rollouts(escalator_policy(), records, k=2, max_turns=12)
    mixed = won[:6] + lost[6:]  # the first three tasks solved, the last three handed over
    assert sum(t.success for t in mixed) == 6 and sum(not t.success for t in mixed) == 6
    chosen = select_trials(mixed, successes=2, seed=0, split="calibration")
    assert [t.key for t in chosen if not t.success] == [t.key for t in lost[6:]]  # every failure
    assert sum(t.success for t in chosen) == 2
    assert chosen == sorted(chosen, key=lambda t: t.key)
    again = select_trials(mixed, successes=2, seed=0, split="calibration")
    assert [t.key for t in again] == [t.key for t in chosen]  # seeded
    other_seeds = {tuple(t.key for t in select_trials(won, 2, seed, "calibration")) for seed in range(8)}
    assert len(other_seeds) > 1  # the seed moves the sample
    # Candidate and baseline: where both succeeded, the same conversations are drawn.
    assert [t.key for t in select_trials(won, 3, 5, "shadow")] == [
        t.key for t in select_trials(list(won), 3, 5, "shadow")
    ]
    assert select_trials(mixed, successes=0, seed=0, split="calibration") == [t for t in mixed if not t.success]

    # The cap: the successes' places first, the failures fill the rest, a seeded sample of them.
    capped = select_trials(mixed, successes=2, seed=0, split="calibration", max_traces=4)
    assert len(capped) == 4 and sum(t.success for t in capped) == 2
    lost_keys = {t.key for t in lost[6:]}
    assert {t.key for t in capped if not t.success} < lost_keys
    assert capped == select_trials(mixed, successes=2, seed=0, split="calibration", max_traces=4)
    # Where candidate and baseline both failed, the sample draws the same conversations.
    all_lost = [t.key for t in select_trials(lost, 0, 3, "shadow", max_traces=5)]
    assert all_lost == [t.key for t in select_trials(list(reversed(lost)), 0, 3, "shadow", max_traces=5)]
    assert [t.success for t in select_trials(mixed, successes=2, seed=0, split="calibration", max_traces=1)] == [True]


def test_traces_are_linked_to_the_run_with_tags_spans_and_code_assessments(tmp_path):
    uri, client, experiment = _store(tmp_path)
    run_id = client.create_run(experiment).info.run_id
    records = make_records(3)
    trials = run_rollouts(escalator_policy(), records, k=1, max_turns=4)
    log = TrialTraces(
        experiment, run_id, "2026-11-09", "shadow", {"candidate": "retail-agent/candidate-2026-11-09"}, seed=0
    )
    with tracing_to(uri):
        log("candidate", trials)
    assert log.logged == {"candidate": 3}
    # Written by the time tracing_to returns: a fresh search, no flush asked for.
    found = mlflow_client(uri).search_traces(locations=[experiment], run_id=run_id)
    assert len(found) == 3
    by_task = {t.info.tags["task_id"]: t for t in found}
    assert set(by_task) == {r["interaction_id"] for r in records}
    trial = trials[0]
    trace = by_task[trial.record_id]
    tags = trace.info.tags
    assert {k: tags[k] for k in ("week", "split", "policy", "policy_version", "interaction_id", "intent")} == {
        "week": "2026-11-09",
        "split": "shadow",
        "policy": "candidate",
        "policy_version": "retail-agent/candidate-2026-11-09",
        "interaction_id": trial.record_id,
        "intent": records[0]["intent"],
    }
    assert tags["outcome"] == "escalated" and tags["success"] == "false"
    assert tags["failure_mode"] == "unnecessary_escalation" or records[0]["escalation_was_necessary"]
    feedback = {a.name: a for a in trace.info.assessments}
    assert feedback["verified_success"].value is False
    assert feedback["proxy_reward"].value == pytest.approx(trial.reward)
    terms = {n.removeprefix("reward/"): a.value for n, a in feedback.items() if n.startswith("reward/")}
    assert terms == {k: pytest.approx(v) for k, v in trial.reward_terms.items() if v} and terms  # the terms that count
    assert {(a.source.source_type, a.source.source_id) for a in feedback.values()} == {("CODE", CODE_SOURCE_ID)}
    spans = {s.name: s for s in trace.data.spans}
    root = next(s for s in trace.data.spans if s.parent_id is None)
    assert root.outputs["verified_success"] is False
    transfer = spans["transfer_to_human_agents"]
    assert transfer.span_type == "TOOL" and transfer.parent_id == spans["assistant 1"].span_id
    assert transfer.inputs == {"summary": "customer needs help"}
    assert spans["customer 1"].parent_id == root.span_id


def test_a_trace_is_masked_as_every_mlflow_artifact_is(tmp_path):
    uri, client, experiment = _store(tmp_path)
    card, phone = "4111 1111 1111 1111", "415-555-0134"
    trace = ConversationTrace(
        name="pii",
        inputs={"customer": f"my card is {card}"},
        outputs={"agent": "ok"},
        spans=[
            SpanDoc("customer 1", "CUSTOMER", outputs={"content": f"call me on {phone}"}),
            SpanDoc("assistant 1", "CHAT_MODEL", children=[SpanDoc("lookup", "TOOL", inputs={"card": card})]),
        ],
        tags={"note": f"card {card}"},
    )
    with tracing_to(uri):
        trace_id = send_trace(trace, experiment)
    stored = client.get_trace(trace_id)
    text = str(stored.to_dict())
    assert card not in text and phone not in text
    assert "[CARD]" in text and "[PHONE]" in text and stored.info.tags["note"] == "card [CARD]"


def test_tracing_to_puts_the_tracking_uri_back_as_it_was(tmp_path, monkeypatch):
    import mlflow

    uri, _client, _experiment = _store(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(None)
    with tracing_to(uri):
        assert mlflow.get_tracking_uri() == uri
    assert "MLFLOW_TRACKING_URI" not in os.environ  # unset again, not left pointing at the store
    other = f"sqlite:///{tmp_path / 'other.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", other)
    with tracing_to(uri):
        assert mlflow.get_tracking_uri() == uri
    assert os.environ["MLFLOW_TRACKING_URI"] == other and mlflow.get_tracking_uri() == other
    mlflow.set_tracking_uri(None)


def test_tracing_to_batches_mlflows_export_for_the_block_unless_the_environment_says_otherwise(tmp_path, monkeypatch):
    from tracking.traces import EXPORT_BATCHING

    uri, _client, _experiment = _store(tmp_path)
    batch, interval, workers = EXPORT_BATCHING
    monkeypatch.delenv(batch, raising=False)
    monkeypatch.delenv(workers, raising=False)
    monkeypatch.setenv(interval, "250")  # an operator's own setting
    with tracing_to(uri):
        assert os.environ[batch] == EXPORT_BATCHING[batch] and os.environ[workers] == "1"
        assert os.environ[interval] == "250"
    assert batch not in os.environ and workers not in os.environ and os.environ[interval] == "250"


# --- a weekly evaluation ------------------------------------------------------------------------

W1 = "2026-11-09"
SMALL = {"trials": 2, "max_tasks": 4, "max_turns": 12, "max_new_tokens": 64, "trace_successes": 1, "max_traces": 4}


def _stand_ins():
    from assets.handoffs import GRPOCandidate, PolicyBase
    from assets.partitions import weekly_partitions
    from assets.resources import HomeResource, MLflowTracking
    from tracking.run_log import open_week_run
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    @dg.asset(name="policy_base", partitions_def=weekly_partitions)
    def shipped_base():
        return PolicyBase(str(SHIPPED_AGENT_DIR), "base_model")

    # Training is not what is tested: the candidate is the shipped agent, in the week's MLflow run
    # opened the way grpo_candidate opens it.
    @dg.asset(name="grpo_candidate", partitions_def=weekly_partitions)
    def shipped_candidate(context: dg.AssetExecutionContext, home: HomeResource, mlflow: MLflowTracking):
        h = home.home
        run_id = open_week_run(
            mlflow.uri(h), context.partition_key, context.run_id, artifact_location=h.mlflow_artifacts.as_uri()
        )
        return GRPOCandidate(str(SHIPPED_AGENT_DIR), run_id, final_step=0, reward_weights={})

    return [shipped_base, shipped_candidate]


def test_a_weekly_evaluation_logs_its_trials_as_traces_of_the_weeks_run(home):
    from assets import data
    from assets.evaluation import calibration_report
    from assets.resources import Curriculum
    from domains.retail.traffic.simulate import simulate
    from orchestration.environment import default_resources

    simulate(days=7, per_day=30, seed=2, out_dir=str(home.landing), start=date.fromisoformat(W1), label_share=0.8)
    result = dg.materialize(
        [data.raw_interactions, data.interaction_window, data.window_splits, *_stand_ins(), calibration_report],
        partition_key=W1,
        resources={**default_resources(), "curriculum": Curriculum(levels={"1": 1.0})},
        run_config={"ops": {"calibration_report": {"config": SMALL}}},
        raise_on_error=False,
    )
    assert result.success
    report = result.output_for_node("calibration_report")
    run_id = result.output_for_node("grpo_candidate").mlflow_run_id
    (event,) = [e for e in result.get_asset_materialization_events() if e.asset_key.path == ["calibration_report"]]
    summary = event.materialization.metadata["traces"].value

    client = mlflow_client(home.mlflow_uri)
    traces = client.search_traces(locations=[summary["experiment_id"]], run_id=run_id)
    assert summary["stored"] == len(traces) == sum(summary["sent"].values()) > 0
    assert client.get_run(run_id).info.experiment_id == summary["experiment_id"]
    for side, policy in (("candidate", report.pair.candidate), ("baseline", report.pair.baseline)):
        mine = [t for t in traces if t.info.tags["policy"] == side]
        failures = {key for key, ok in zip(policy.keys, policy.success) if not ok}
        traced = {f"{t.info.tags['task_id']}#{t.info.tags['trial']}" for t in mine}
        successes = min(1, len(policy.keys) - len(failures))  # trace_successes: 1
        traced_failures = traced & failures
        # Every failure while they fit under max_traces (4) beside the success, else 4 in all.
        assert len(traced_failures) == min(len(failures), 4 - successes) and len(mine) == successes + len(
            traced_failures
        )
        assert summary["untraced_failures"][side] == len(failures) - len(traced_failures)
    expected_versions = {"candidate": f"retail-agent/candidate-{W1}", "baseline": "retail-agent/base:retail-agent-tiny"}
    for trace in traces:
        tags = trace.info.tags
        assert tags["week"] == W1 and tags["split"] == "calibration"
        assert tags["policy_version"] == expected_versions[tags["policy"]]
        assert tags["task_id"] in report.interaction_ids and tags["interaction_id"] == tags["task_id"]
        assert tags["intent"] in ("order_status", "cancel_order")  # the level-1 shop
        assert tags["outcome"] in ("completed", "failed", "escalated") and tags["failure_mode"]
        feedback = {a.name: a for a in trace.info.assessments}
        assert feedback["verified_success"].value == (tags["success"] == "true")
        assert feedback["verified_success"].source.source_type == "CODE"
        assert any(name.startswith("reward/") for name in feedback)
        assert any(s.span_type == "CHAT_MODEL" for s in trace.data.spans)


def test_the_trace_settings_are_declared_once_and_reach_both_evaluation_assets():
    import dataclasses

    from assets.evaluation import CalibrationConfig, EvalConfig

    for spec in dataclasses.fields(TraceSettings):
        for config in (EvalConfig, CalibrationConfig):
            declared = config.model_fields[spec.name]
            assert (declared.default, declared.description) == (spec.default, spec.metadata["help"]), spec.name


def test_a_retried_set_replaces_its_traces_and_an_errored_trial_says_why(tmp_path):
    import dataclasses
    import math

    from tracking.traces import week_traces

    uri, client, experiment = _store(tmp_path)
    run_id = client.create_run(experiment).info.run_id
    records = make_records(3)
    trials = run_rollouts(escalator_policy(), records, k=1, max_turns=4)
    broke = dataclasses.replace(trials[0], error="ValueError: boom", reward=math.nan, reward_terms={})
    trials = [broke, *trials[1:]]
    for _attempt in range(2):  # a step retried within one Dagster run logs into the same MLflow run
        log = week_traces(
            uri, run_id, week="2026-11-09", split="calibration", policy_versions={}, settings=TraceSettings(), seed=0
        )
        with tracing_to(uri):
            log("baseline", trials)
        assert log.stored(uri) == 3
    found = mlflow_client(uri).search_traces(locations=[experiment], run_id=run_id, include_spans=False)
    assert len(found) == 3
    errored = next(t for t in found if t.info.tags["task_id"] == broke.record_id)
    assert errored.info.tags["error"] == "ValueError: boom" and errored.info.tags["success"] == "false"
    names = {a.name for a in errored.info.assessments}
    assert "verified_success" in names and "proxy_reward" not in names  # NaN: never judged, no number


def test_many_traces_in_one_block_flush_before_the_export_queue_fills(tmp_path, monkeypatch):
    """OpenTelemetry's span queue drops spans once full: a long block flushes every
    FLUSH_EVERY_SPANS queued spans, and every trace sent reaches the store."""
    import mlflow

    from tracking import traces

    uri, client, experiment = _store(tmp_path)
    flushes = []
    real_flush = mlflow.flush_trace_async_logging
    monkeypatch.setattr(traces, "FLUSH_EVERY_SPANS", 6)
    monkeypatch.setattr(mlflow, "flush_trace_async_logging", lambda *a, **k: (flushes.append(1), real_flush(*a, **k)))
    spans = [SpanDoc("assistant 1", "CHAT_MODEL", children=[SpanDoc("lookup", "TOOL")])]  # 3 spans with the root
    with tracing_to(uri):
        ids = [send_trace(ConversationTrace(f"t{i}", {}, {}, spans, {}), experiment) for i in range(6)]
        during = len(flushes)
    assert during == 3  # after the 2nd, 4th and 6th trace (6 spans each time)
    assert all(client.get_trace(trace_id) is not None for trace_id in ids)
