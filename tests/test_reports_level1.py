"""evaluation.reports (candidate vs baseline on one set) and domains.retail.level1 (curriculum level 1)."""

from __future__ import annotations

import pytest

from domains.retail.level1 import as_level1, level1_demonstration, level1_opening
from evaluation.gates import GateInputs, evaluate_gates
from evaluation.reports import compare, outcomes, policy_report
from evaluation.rollout import run_rollouts
from tests.helpers_eval import escalator_policy, expert_policy, make_records
from training.sft import replay_trajectory


@pytest.fixture(scope="module")
def records():
    return make_records(12, seed=3)


def test_compare_pairs_trials_and_prefers_the_expert(records):
    expert = run_rollouts(expert_policy(records), records, k=2, seed=1)
    escalator = run_rollouts(escalator_policy(), records, k=2, seed=1)
    report = compare(expert, escalator, seed=0)
    assert report.pairs == len(records) * 2
    assert report.candidate.keys == report.baseline.keys
    assert all(report.candidate.success)
    ci = report.bootstrap_ci
    assert ci.difference == pytest.approx(sum(report.candidate.success) / 24 - sum(report.baseline.success) / 24)
    assert ci.low > 0
    assert report.tool_call_tv > 0.3  # one transfers, the other authenticates, reads and writes
    assert report.baseline.tool_counts["transfer_to_human_agents"] == 24
    # Each trial's proxy reward rides along, paired with its success flag.
    assert report.candidate.rewards == [t.reward for t in sorted(expert, key=lambda t: t.key)]
    assert min(report.candidate.rewards) > max(report.baseline.rewards)


def test_outcomes_pool_both_sets_and_drive_the_gates(records):
    expert = run_rollouts(expert_policy(records), records, seed=1)
    escalator = run_rollouts(escalator_policy(), records, seed=1)
    cal, sha = compare(expert, escalator), compare(expert, escalator)
    candidate, baseline = outcomes(cal, sha)
    assert candidate.violation_rate == 0.0
    assert sum(baseline.tool_distribution.values()) == pytest.approx(1.0)
    report = evaluate_gates(
        GateInputs(
            candidate,
            baseline,
            data_valid=True,
            proxy_rewards=[1.0, 0.0] * 10,
            human_success=[True, False] * 10,
            training_rewards=[0.0, 1.0, 2.0, 3.0],
        )
    )
    assert report.gate("calibration_improvement").passed
    assert report.gate("tool_call_drift").verdict == "hold"  # the expert's tool mix differs wildly


def test_reports_refuse_unpaired_or_empty_trials(records):
    expert = run_rollouts(expert_policy(records), records, seed=1)
    with pytest.raises(ValueError, match="pair"):
        compare(expert, expert[:-1])
    with pytest.raises(ValueError):
        policy_report([])


def _status_record(records):
    return next(r for r in records if r["intent"] == "order_status")


def test_level1_states_identity_order_and_request(records):
    eligible = [r for r in records if as_level1(r) is not None]
    assert eligible, "the sample should hold a level-1 task"
    for record in eligible:
        task = as_level1(record)
        known = record["user_scenario"]["known_info"]
        opening = task["messages"][1]["content"]
        assert known["order_ids"][0] in opening
        assert (known.get("email") or known["zip"]) in opening
        assert task["gold"] == record["gold"] and task["initial_state"] == record["initial_state"]
        assert "forthcoming" in task["user_scenario"]["persona"]
    writes_heavy = [r for r in records if r["intent"] not in ("order_status", "cancel_order")]
    assert all(level1_opening(r) is None for r in writes_heavy)


def test_level1_demonstrations_verify_in_the_environment(records):
    tasks = [t for t in map(as_level1, records) if t is not None]
    for task in tasks:
        messages = replay_trajectory(level1_demonstration(task))
        assert messages is not None, task["interaction_id"]
        called = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
        assert called[0].startswith("find_user_id") and "get_order_details" in called


def test_level1_refuses_tasks_without_gold_or_identity(records):
    record = dict(_status_record(records))
    assert as_level1({**record, "gold": None}) is None
    scenario = {
        **record["user_scenario"],
        "known_info": {"order_ids": record["user_scenario"]["known_info"]["order_ids"]},
    }
    assert as_level1({**record, "user_scenario": scenario}) is None


def test_an_escalating_demonstration_is_a_logged_habit_not_a_verified_trajectory(records):
    """`escalate=True` is the over-cautious agent's log: it reads the order, then hands over.

    The product's SFT leaves it out (it does not verify); cloning the log as it is keeps it.
    """
    from training.sft import sft_rows

    task = next(t for t in map(as_level1, records) if t is not None)
    logged = level1_demonstration(task, escalate=True)
    assert replay_trajectory(logged) is None
    messages = replay_trajectory(logged, verified_only=False)
    called = [c["function"]["name"] for m in messages for c in m.get("tool_calls") or []]
    assert called[1:] == ["get_order_details", "transfer_to_human_agents"]
    handover = next(m for m in messages if "transfer_to_human_agents" in str(m.get("tool_calls")))
    assert task["user_scenario"]["known_info"]["order_ids"][0] in str(handover["tool_calls"])
    expert = level1_demonstration(task)
    assert len(sft_rows([expert, logged])) == 1
    assert len(sft_rows([expert, logged], verified_only=False)) == 2


# What a producer's free-form `known_info` and gold can hold where a fact belongs (every one
# passes the record contract): none may stop the week's level-1 task set, and none is restated.
_NOT_A_FACT = [None, 0, 7, 1.5, True, "", "  ", [], ["#W1", "#W2"], [None], [3], {}, {"k": [None]}]


@pytest.mark.parametrize("value", _NOT_A_FACT, ids=repr)
@pytest.mark.parametrize("key", ["order_ids", "email", "first_name", "zip"])
def test_level1_skips_a_scenario_whose_facts_are_not_text(records, key, value):
    for record in (_status_record(records), next(r for r in records if r["intent"] == "cancel_order")):
        orders = record["user_scenario"]["known_info"]["order_ids"]
        # The facts that identify the customer in each case: the broken one is needed.
        if key in ("first_name", "zip"):
            known = {"first_name": "Ann", "last_name": "Lee", "zip": "12345", "order_ids": orders}
        else:
            known = {"email": "ann@example.com", "order_ids": orders}

        def with_known(info, record=record):
            return {**record, "user_scenario": {**record["user_scenario"], "known_info": info}}

        assert as_level1(with_known(known)) is not None
        assert as_level1(with_known({**known, key: value})) is None


@pytest.mark.parametrize(
    "gold",
    [
        {"actions": "cancel it", "outputs": []},
        {"actions": [5], "outputs": []},
        {"actions": [{"name": "cancel_pending_order", "arguments": "order"}], "outputs": []},
        {"actions": [{"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": 5}}], "outputs": []},
        {"actions": [{"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": ""}}], "outputs": []},
    ],
)
def test_level1_skips_a_cancellation_whose_gold_names_no_reason_to_state(records, gold):
    record = next(r for r in records if r["intent"] == "cancel_order")
    assert as_level1(record) is not None
    assert as_level1({**record, "gold": gold}) is None


def test_level1_skips_a_task_whose_world_lacks_the_order(records):
    record = _status_record(records)
    assert as_level1(record) is not None
    state = {**record["initial_state"], "orders": {}}
    assert as_level1({**record, "initial_state": state}) is None
