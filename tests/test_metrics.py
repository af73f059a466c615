"""Metrics over trials: hand-computed pass^k and rates, and real rollouts of scripted characters."""

from __future__ import annotations

import math

import pytest

from evaluation.metrics import (
    actions_per_task,
    paired_outcomes,
    pass_hat_k,
    pass_hat_ks,
    recovery_rate,
    reward_totals,
    success_rate,
    summarize,
    tool_call_distribution,
    tool_call_shift,
)
from evaluation.rollout import Trial, run_rollouts
from tests.helpers_eval import escalator_policy, expert_policy, make_records, random_policy
from training.sandbox.episode import AuditEntry, Episode


def _trial(
    record_id: str, index: int, success: bool, tools=("get_order_details",), errors=0, reward: float = 0.0, terms=None
) -> Trial:
    log = [AuditEntry(t, {}, "Error: x" if i < errors else "{}", False, i < errors) for i, t in enumerate(tools)]
    episode = Episode({}, {}, log)
    return Trial(
        record_id,
        index,
        0,
        episode,
        success,
        [],
        turns=len(tools),
        tool_calls=len(tools),
        tool_errors=errors,
        ended_by="answer",
        reward=reward,
        reward_terms=terms or {},
    )


def _task(record_id: str, flags: list[bool]) -> list[Trial]:
    return [_trial(record_id, i, ok) for i, ok in enumerate(flags)]


def test_pass_hat_k_hand_computed():
    # Task a: 2 of 4 succeed; task b: 4 of 4; task c: 0 of 4.
    trials = _task("a", [True, False, True, False]) + _task("b", [True] * 4) + _task("c", [False] * 4)
    expected = {
        1: (2 / 4 + 1 + 0) / 3,
        2: (math.comb(2, 2) / math.comb(4, 2) + 1 + 0) / 3,  # (1/6 + 1) / 3
        3: (0 + 1 + 0) / 3,
        4: (0 + 1 + 0) / 3,
    }
    got = pass_hat_ks(trials)
    assert got.keys() == expected.keys()
    for k, value in expected.items():
        assert got[k] == pytest.approx(value)
    assert pass_hat_k(trials, 1) == pytest.approx(success_rate(trials))
    assert got[1] >= got[2] >= got[3] >= got[4]


def test_pass_hat_k_needs_enough_trials():
    trials = _task("a", [True, True]) + _task("b", [True, False, True])
    assert set(pass_hat_ks(trials)) == {1, 2}
    with pytest.raises(ValueError, match="needs 3 trials"):
        pass_hat_k(trials, 3)


def test_recovery_rate_counts_only_trials_with_a_failed_call():
    trials = [
        _trial("a", 0, True, tools=("get_order_details", "get_order_details"), errors=1),
        _trial("b", 0, False, tools=("get_order_details",), errors=1),
        _trial("c", 0, False, tools=("get_order_details",)),
        _trial("d", 0, True, tools=("get_order_details",)),
    ]
    assert recovery_rate(trials) == 0.5
    assert recovery_rate(trials[2:]) is None


def test_actions_exclude_talking_and_thinking():
    trials = [
        _trial("a", 0, True, tools=("think", "send_message_to_customer", "get_order_details")),
        _trial("b", 0, True, tools=("cancel_pending_order",)),
    ]
    assert actions_per_task(trials) == 1.0


def test_tool_call_distribution_and_shift():
    a = [
        _trial("a", 0, True, tools=("get_order_details", "cancel_pending_order")),
        _trial("b", 0, True, tools=("get_order_details", "think")),
    ]
    b = [_trial("a", 0, True, tools=("get_order_details", "get_order_details"))]
    assert tool_call_distribution(a) == {"cancel_pending_order": 0.25, "get_order_details": 0.5, "think": 0.25}
    assert tool_call_shift(a, b) == pytest.approx(0.5)
    assert tool_call_shift(a, a) == 0.0


def test_reward_totals_average_each_term():
    trials = [
        _trial("a", 0, True, reward=9.0, terms={"completed": 10.0, "looping": -1.0}),
        _trial("b", 0, False, reward=-5.0, terms={"failed": -5.0}),
    ]
    totals = reward_totals(trials)
    assert totals["reward_mean"] == 2.0
    assert totals["reward_term_completed"] == 5.0
    assert totals["reward_term_looping"] == -0.5
    assert totals["reward_term_failed"] == -2.5


def test_paired_outcomes_align_by_record_and_trial():
    a = [_trial("x", 1, True), _trial("x", 0, False), _trial("y", 0, True)]
    b = [_trial("y", 0, False), _trial("x", 0, True), _trial("x", 1, True)]
    assert paired_outcomes(a, b) == ([False, True, True], [True, True, False])
    with pytest.raises(ValueError, match="do not pair up"):
        paired_outcomes(a, b[:2])


def test_empty_inputs_are_refused_not_zero():
    with pytest.raises(ValueError):
        success_rate([])
    with pytest.raises(ValueError):
        pass_hat_k([], 1)


@pytest.fixture(scope="module")
def characters():
    records = make_records(12)
    return {
        "expert": run_rollouts(expert_policy(records), records, k=4, seed=0),
        "random": run_rollouts(random_policy(), records, k=4, seed=0),
        "escalator": run_rollouts(escalator_policy(), records, k=4, seed=0),
    }


def test_summaries_rank_the_characters(characters):
    s = {name: summarize(trials) for name, trials in characters.items()}
    assert s["expert"]["success_rate"] == s["expert"]["pass_hat_4"] == 1.0
    assert s["expert"]["policy_violation_rate"] == 0.0
    assert s["random"]["success_rate"] < 0.2 and s["random"]["policy_violation_rate"] > 0.3
    assert s["escalator"]["ended_by_done"] == 1.0
    assert s["expert"]["reward_mean"] > s["escalator"]["reward_mean"] > s["random"]["reward_mean"]
    # The shares of primary failure modes add up to the failure rate.
    for summary in s.values():
        shares = sum(v for k, v in summary.items() if k.startswith("failure_share_"))
        assert shares == pytest.approx(1.0 - summary["success_rate"])
    assert {"trials", "tasks", "actions_per_task", "pass_hat_1", "pass_hat_2", "pass_hat_3"} <= s["random"].keys()


def test_tool_mix_shift_separates_characters(characters):
    assert tool_call_shift(characters["expert"], characters["expert"]) == 0.0
    assert tool_call_shift(characters["expert"], characters["escalator"]) == pytest.approx(1.0, abs=1e-12)
    assert 0.3 < tool_call_shift(characters["expert"], characters["random"]) < 1.0
