"""A trial that raises fails alone: the week's evaluation completes, says what raised, and holds
when too much of it did.

One record of twelve is poisoned at each place a conversation can break (its environment cannot
be reset, its customer simulator or a tool raises mid-conversation, the policy fails on it, its
reward cannot be computed). Every trial of that record comes back errored with the exception's
class, every other trial is scored exactly as without the poison, and the gates see it: two of 24
trials per policy (8%) is above `max_errored_share` (5%), so the week holds naming the class.
"""

from __future__ import annotations

import copy
import math

import pytest

from evaluation.gates import GateInputs, evaluate_gates
from evaluation.metrics import errored_by_class, summarize
from evaluation.reports import compare, outcomes
from evaluation.rollout import run_rollouts
from tests.helpers_eval import escalator_policy, expert_policy, make_records

POISONED = "ev-0-1"  # the only record of its customer
K = 2


@pytest.fixture(scope="module")
def records():
    return make_records(12)


def _customer(records, record_id):
    return next(r["customer_id"] for r in records if r["interaction_id"] == record_id)


class _FailsOn:
    """The expert, except that its batched call raises whenever the poisoned conversation is in it."""

    name = "fails-on-one"

    def __init__(self, records):
        self.inner = expert_policy(records)

    def act(self, conversations):
        if any(c.task_id == POISONED for c in conversations):
            raise RuntimeError("generation failed for this conversation")
        return self.inner.act(conversations)


def _poison(where, records, monkeypatch):
    """(records, candidate policy, the class the poisoned trials raise) with `where` broken for POISONED."""
    from domains.retail.domain import RetailDomain
    from domains.retail.tools import RetailWorld
    from evaluation import rollout

    customer = _customer(records, POISONED)
    records = copy.deepcopy(records)
    policy = expert_policy(records)
    if where == "environment_reset":  # a crafted record: its initial state breaks the world's schema
        next(r for r in records if r["interaction_id"] == POISONED)["initial_state"]["users"] = "not a table"
        return records, policy, "WorldError"
    if where == "customer_simulator":  # the domain's customer hook raises for this customer's scenario
        real = RetailDomain.make_customer

        def make_customer(self, user_scenario, seed):
            if user_scenario is poisoned_scenario:
                raise ValueError("persona cannot be built")
            return real(self, user_scenario, seed)

        poisoned_scenario = next(r for r in records if r["interaction_id"] == POISONED)["user_scenario"]
        monkeypatch.setattr(RetailDomain, "make_customer", make_customer)
        return records, policy, "ValueError"
    if where == "tool_call":  # the world raises on this customer's first tool call, mid-conversation
        real_call = RetailWorld.call

        def call(self, name, arguments):
            if customer in self.state["users"]:
                raise KeyError("back end lost the record")
            return real_call(self, name, arguments)

        monkeypatch.setattr(RetailWorld, "call", call)
        return records, policy, "KeyError"
    if where == "policy":
        return records, _FailsOn(records), "RuntimeError"
    if where == "reward":
        real_score = rollout.score_episode

        def score(episode, weights=None):
            if episode.user_id == customer:
                raise ZeroDivisionError("reward term divided by zero")
            return real_score(episode, weights)

        monkeypatch.setattr(rollout, "score_episode", score)
        return records, policy, "ZeroDivisionError"
    raise AssertionError(where)


@pytest.mark.parametrize("where", ["environment_reset", "customer_simulator", "tool_call", "policy", "reward"])
def test_one_poisoned_record_errors_its_trials_only_and_the_week_holds(where, records, monkeypatch):
    clean = run_rollouts(expert_policy(records), records, k=K, seed=0)
    poisoned_records, policy, error_class = _poison(where, records, monkeypatch)
    trials = run_rollouts(policy, poisoned_records, k=K, seed=0)

    bad = [t for t in trials if t.record_id == POISONED]
    assert len(trials) == len(clean) and len(bad) == K
    for t in bad:
        assert t.errored and t.error_class == error_class and t.ended_by == "error", t.error
        assert not t.success and math.isnan(t.reward) and t.reward_terms == {}
        assert t.episode.audit_log == [] and t.customer_id == _customer(records, POISONED)
    # Every other trial is scored exactly as in the run without the poison.
    for t, ref in zip(trials, clean):
        if t.record_id != POISONED:
            assert t.error is None and (t.success, t.reward, t.messages) == (ref.success, ref.reward, ref.messages)
    assert all(ref.success for ref in clean)

    # The week: the same records against a baseline, through the report, the outcomes and the gates.
    report = compare(trials, run_rollouts(escalator_policy(), poisoned_records, k=K, seed=0))
    assert report.candidate.errored_by_class == {error_class: K}
    assert [e["record_id"] for e in report.candidate.errored] == [POISONED] * K
    assert report.candidate.summary["errored_trials"] == K and report.candidate.summary[f"errored_{error_class}"] == K
    assert report.candidate.failure_modes["errored"] == pytest.approx(K / len(trials))
    candidate, baseline = outcomes(report, report)
    gates = evaluate_gates(
        GateInputs(
            candidate,
            baseline,
            data_valid=True,
            proxy_rewards=[1.0, 0.0] * 10,
            human_success=[True, False] * 10,
            training_rewards=[0.0, 1.0, 2.0, 3.0],
        )
    )
    errored = gates.gate("errored_trials")
    assert errored.verdict == "hold" and errored.value == pytest.approx(K / len(trials))
    # The report stands in for both sets (2K errored trials per policy); only the candidate's policy
    # fails on the record, any other poison breaks the baseline's trials of it as well.
    assert f"{error_class} {2 * K if where == 'policy' else 4 * K}" in gates.reason
    # The other gates are measured on the rest: the reward alarm leaves the errored pairs out.
    assert gates.gate("reward_hacking_alarm").extra["errored_pairs_left_out"] == 2 * K
    assert gates.gate("calibration_improvement").value is not None


def test_below_the_share_the_week_goes_on_with_the_errors_on_record(monkeypatch):
    records = make_records(24, seed=1)
    poisoned_id = records[5]["interaction_id"]
    records[5]["initial_state"]["users"] = "not a table"
    cand = run_rollouts(expert_policy(records), records, k=1, seed=0)
    base = run_rollouts(expert_policy(records), records, k=1, seed=0)
    assert [t.record_id for t in cand if t.errored] == [poisoned_id]
    report = compare(cand, base)
    candidate, baseline = outcomes(report, report)
    gates = evaluate_gates(
        GateInputs(candidate, baseline, True, [1.0, 0.0] * 10, [True, False] * 10, [0.0, 1.0, 2.0, 3.0])
    )
    errored = gates.gate("errored_trials")
    assert errored.verdict == "pass" and errored.value == pytest.approx(1 / 24)  # 4.2% <= 5%
    assert "WorldError 4" in errored.detail  # one trial of each policy, in both sets


def test_metrics_leave_errored_trials_out_of_rewards_and_count_them(records):
    poisoned = copy.deepcopy(records)
    poisoned[0]["initial_state"] = None  # refused when the conversation starts
    trials = run_rollouts(expert_policy(records), poisoned, k=1, seed=0)
    summary = summarize(trials)
    scored = [t for t in trials if not t.errored]
    assert errored_by_class(trials) == {"RolloutError": 1} and summary["errored_RolloutError"] == 1
    assert summary["success_rate"] == pytest.approx(len(scored) / len(trials))  # an errored trial failed
    assert summary["reward_mean"] == pytest.approx(sum(t.reward for t in scored) / len(scored))
    assert summary["failure_share_errored"] == pytest.approx(1 / len(trials))
    every = summarize([t for t in trials if t.errored])
    assert every["errored_trials"] == 1 and "reward_mean" not in every


def test_report_metadata_and_the_week_run_show_errored_trials_and_the_clustered_interval(records):
    import pandas as pd

    from assets.evaluation import _report_metadata
    from tracking.run_log import WeekRun, flatten_metrics

    poisoned = copy.deepcopy(records)
    poisoned[0]["initial_state"] = None
    report = compare(
        run_rollouts(expert_policy(records), poisoned, k=2, seed=0),
        run_rollouts(escalator_policy(), poisoned, k=2, seed=0),
    )
    meta = _report_metadata(report)
    assert meta["errored_trials"] == 4  # two trials of one record, each policy
    assert meta["errored_by_class"].value == {"candidate": {"RolloutError": 2}, "baseline": {"RolloutError": 2}}
    assert meta["ci_low"] == report.clustered.ci.low and meta["customers"] == len({r["customer_id"] for r in records})
    assert meta["per_trial_ci_low"] == report.bootstrap_ci.low
    candidate, baseline = outcomes(report, report)
    gates = evaluate_gates(
        GateInputs(candidate, baseline, True, [1.0, 0.0] * 10, [True, False] * 10, [0.0, 1.0, 2.0, 3.0])
    )
    metrics = flatten_metrics(WeekRun("2026-11-09", "ab" * 32, pd.DataFrame(), gates))
    cal = gates.gate("calibration_improvement")
    assert metrics["gate/calibration_improvement/ci_low"] == cal.extra["ci_low"] == cal.value
    assert metrics["gate/calibration_improvement/ci_high"] == cal.extra["ci_high"]
    assert metrics["gate/errored_trials/errored_RolloutError"] == 8  # both sets, both policies


def test_an_errored_trial_is_traced_as_errored_without_a_made_up_reward(records):
    from tracking.traces import trial_trace

    poisoned = copy.deepcopy(records[:1])
    poisoned[0]["initial_state"]["users"] = "not a table"
    (trial,) = run_rollouts(expert_policy(records), poisoned, k=1, seed=0)
    trace = trial_trace(trial, week="2026-11-09", split="calibration", policy="candidate", policy_version="m/1")
    assert (trace.tags["failure_mode"], trace.tags["ended_by"]) == ("errored", "error")
    assert trace.feedback == {"verified_success": False}  # no NaN proxy reward, no reward terms


def test_a_broken_records_traceback_is_logged_once_and_every_trial_named(records, monkeypatch, caplog):
    import logging

    from training.sandbox import rollout as sandbox_rollout

    monkeypatch.setattr(sandbox_rollout, "_TRACED", set())
    poisoned, policy, error_class = _poison("environment_reset", records, monkeypatch)
    with caplog.at_level(logging.WARNING, logger=sandbox_rollout.log.name):
        run_rollouts(policy, poisoned, k=3, seed=0)
    failed = [r for r in caplog.records if "failed:" in r.getMessage() and POISONED in r.getMessage()]
    assert len(failed) == 3 and all(error_class in r.getMessage() for r in failed)
    assert sum(r.exc_info is not None for r in failed) == 1
