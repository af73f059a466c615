"""monitoring.health: the champion-health circuit breaker on simulated production traffic, with and
without the degraded-agent drift of `domains.retail.traffic.simulate.simulate`."""

from __future__ import annotations

import copy

import pytest

from domains.retail.traffic.simulate import Drift, simulate
from evaluation.failure_modes import episode_violations
from evaluation.replay import record_verified_success, recorded_episode
from monitoring.health import INSUFFICIENT_DATA, HealthConfigError, assess_champion_health
from tests.helpers_traffic import generated_world, read_records

# The scripted agent's traffic stands in for what the champion served, so it is recorded under its name.
CHAMPION = "retail-agent/1"
# What the degraded agents get wrong: the first fails tasks without breaking policy, the second
# breaks policy (writes for unidentified customers) while still finishing the tasks.
FAILS_TASKS = {"unnecessary_escalation": 0.4, "looping": 0.2}
BREAKS_POLICY = {"skipped_authentication": 0.5}


def _traffic(out, seed, per_day=60, drift=None):
    summary = simulate(
        days=2, per_day=per_day, seed=seed, out_dir=out, world=generated_world(), drift=drift, policy_version=CHAMPION
    )
    return read_records(summary["files"])


@pytest.fixture(scope="module")
def shadow_estimate(tmp_path_factory):
    """The champion's success as its shadow evaluation measured it: an independent normal sample."""
    records = _traffic(tmp_path_factory.mktemp("shadow"), seed=101, per_day=150)  # ~270 with gold
    judged = [s for s in map(record_verified_success, records) if s is not None]
    return sum(judged) / len(judged)


@pytest.fixture(scope="module")
def normal(tmp_path_factory):
    return _traffic(tmp_path_factory.mktemp("normal"), seed=21)


@pytest.fixture(scope="module")
def failing(tmp_path_factory):
    return _traffic(tmp_path_factory.mktemp("failing"), seed=22, drift=Drift(from_day=0, mistake_rates=FAILS_TASKS))


@pytest.fixture(scope="module")
def violating(tmp_path_factory):
    return _traffic(tmp_path_factory.mktemp("violating"), seed=23, drift=Drift(from_day=0, mistake_rates=BREAKS_POLICY))


def test_normal_traffic_does_not_trip(normal, shadow_estimate):
    verdict = assess_champion_health(normal, shadow_estimate, champion=CHAMPION)
    assert verdict.healthy and verdict.tripped == ()
    assert verdict.n == len(normal) and verdict.skipped == []
    assert verdict.n_verified == sum(r["gold"] is not None for r in normal)
    assert verdict.observed_success >= shadow_estimate - verdict.margin
    assert verdict.violation_rate <= verdict.violation_spike
    assert verdict.reason == "verified success and policy violations within bounds"


def test_degraded_agent_trips_on_success(failing, shadow_estimate):
    verdict = assess_champion_health(failing, shadow_estimate, champion=CHAMPION)
    assert not verdict.healthy and verdict.tripped == ("low_success",)
    assert verdict.observed_success < shadow_estimate - 0.10
    assert "below the shadow estimate" in verdict.reason
    by_id = {r["interaction_id"]: r for r in failing}
    assert 1 <= len(verdict.evidence["low_success"]) <= 5
    for interaction_id in verdict.evidence["low_success"]:
        assert record_verified_success(by_id[interaction_id]) is False


def test_degraded_agent_trips_on_policy_violations(violating, shadow_estimate):
    verdict = assess_champion_health(violating, shadow_estimate, champion=CHAMPION)
    assert not verdict.healthy and "violation_spike" in verdict.tripped
    assert verdict.violation_rate > 0.10
    by_id = {r["interaction_id"]: r for r in violating}
    assert verdict.evidence["unauthenticated_write"]
    for interaction_id in verdict.evidence["unauthenticated_write"]:
        rules = {v.rule for v in episode_violations(recorded_episode(by_id[interaction_id]))}
        assert "unauthenticated_write" in rules


def test_violation_baseline_moves_the_threshold(violating, shadow_estimate):
    rate = assess_champion_health(violating, shadow_estimate).violation_rate
    relaxed = assess_champion_health(violating, shadow_estimate, violation_baseline=rate - 0.05)
    strict = assess_champion_health(violating, shadow_estimate, violation_baseline=max(rate - 0.2, 0.0))
    assert "violation_spike" not in relaxed.tripped and relaxed.baseline == pytest.approx(rate - 0.05)
    assert "violation_spike" in strict.tripped


def test_margin_decides_the_success_check(failing, shadow_estimate):
    observed = assess_champion_health(failing, shadow_estimate).observed_success
    gap = shadow_estimate - observed
    assert assess_champion_health(failing, shadow_estimate, margin=gap + 0.01).healthy
    assert not assess_champion_health(failing, shadow_estimate, margin=gap - 0.01).healthy


def test_too_few_interactions_is_healthy_with_an_explicit_reason(failing, shadow_estimate):
    verdict = assess_champion_health(failing[:29], shadow_estimate, min_interactions=30)
    assert verdict.healthy and verdict.reason.startswith(INSUFFICIENT_DATA)
    assert verdict.n == 29 and verdict.observed_success is not None  # measured, just not acted on
    assert not assess_champion_health(failing, shadow_estimate, min_interactions=30).healthy


def test_success_check_needs_enough_interactions_with_gold(failing, shadow_estimate):
    records = copy.deepcopy(failing)
    for record in records[10:]:
        record["gold"] = None
    verdict = assess_champion_health(records, shadow_estimate)
    assert verdict.n_verified == sum(r["gold"] is not None for r in records[:10]) and verdict.healthy
    assert verdict.reason.startswith(INSUFFICIENT_DATA + " for the success check")


def test_only_the_champions_interactions_count(tmp_path, shadow_estimate):
    drift = Drift(from_day=1, mistake_rates=FAILS_TASKS, policy_version="retail-agent/2")
    records = _traffic(tmp_path, seed=24, per_day=50, drift=drift)
    old = assess_champion_health(records, shadow_estimate, champion=CHAMPION)
    new = assess_champion_health(records, shadow_estimate, champion="retail-agent/2")
    assert old.n == new.n == 50
    assert old.healthy and not new.healthy
    assert {s["reason"] for s in new.skipped} == {f"served by {CHAMPION!r}"}


def test_unreplayable_records_are_reported_not_counted(normal, shadow_estimate):
    records = copy.deepcopy(normal)
    records[0]["messages"] = []
    verdict = assess_champion_health(records, shadow_estimate)
    assert verdict.n == len(normal) - 1
    assert verdict.skipped[0]["interaction_id"] == records[0]["interaction_id"]
    assert "empty_messages" in verdict.skipped[0]["reason"]


def test_verdict_serialises(failing, shadow_estimate):
    out = assess_champion_health(failing, shadow_estimate).to_dict()
    assert out["tripped"] == ["low_success"] and out["healthy"] is False
    assert set(out) >= {
        "healthy",
        "reason",
        "n",
        "observed_success",
        "expected_success",
        "margin",
        "violation_rate",
        "baseline",
        "evidence",
    }


@pytest.mark.parametrize(
    "arguments",
    [
        {"shadow_success_estimate": 1.5},
        {"shadow_success_estimate": float("nan")},
        {"margin": -0.1},
        {"min_interactions": 0},
        {"min_interactions": True},
        {"violation_baseline": 2},
        {"violation_spike": "0.1"},
    ],
)
def test_bad_settings_raise(arguments):
    settings = {"shadow_success_estimate": 0.9, **arguments}
    with pytest.raises(HealthConfigError):
        assess_champion_health([], **settings)
