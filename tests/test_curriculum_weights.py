"""The week's GRPO mix follows the production agent's failures: more of what it fails, a floor for
what it does well, incidents pointing at intents, and dataset draws that follow the weights."""

from __future__ import annotations

import json
from collections import Counter
from datetime import date

import pytest

from tests.helpers_training import failed_cancellation as _failed
from tests.helpers_training import level1_records

# ---------- the weights ----------


def test_the_weights_shift_toward_what_fails_and_keep_a_floor():
    from training.curriculum import failure_weighted

    weights = failure_weighted({"a": 5, "b": 5, "c": 0}, {"a": 0.3, "b": 0.0, "c": 1.0}, floor=0.1)
    assert set(weights) == {"a", "b"}  # c has no share to weight: a failure elsewhere adds no key
    assert weights["b"] == pytest.approx(0.1)  # never failed: the floor, not nothing
    assert weights["a"] == pytest.approx(0.9)
    more = failure_weighted({"a": 1, "b": 1, "c": 1}, {"a": 0.1, "b": 0.3}, floor=0.05)
    assert more["b"] > more["a"] > more["c"] == pytest.approx(0.05)
    assert sum(more.values()) == pytest.approx(1.0)


def test_with_nothing_failed_the_prior_stands_and_a_floor_too_high_is_capped():
    from training.curriculum import CurriculumError, failure_weighted

    assert failure_weighted({"a": 3, "b": 1}, {}) == {"a": 0.75, "b": 0.25}
    capped = failure_weighted({"a": 1, "b": 1, "c": 1}, {"a": 1.0}, floor=0.5)
    assert capped == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    with pytest.raises(CurriculumError):
        failure_weighted({"a": 0}, {"a": 1.0})


def test_the_week_mix_weights_failed_intents_and_levels_and_incidents():
    from training.curriculum import MixSettings, week_mix

    seen = {"order_status": 30, "cancel_order": 30}
    mix = week_mix({"1": 0.5, "2": 0.5}, seen, {"cancel_order": 12}, {"1": 10, "2": 2}, judged=60)
    assert mix.intents == pytest.approx({"cancel_order": 0.9, "order_status": 0.1})
    assert mix.levels["1"] > mix.levels["2"] >= 0.1
    assert sum(mix.levels.values()) == pytest.approx(1.0)
    # An open incident pointing at an intent the agent never failed still raises its share.
    boosted = week_mix({"1": 1.0}, seen, {}, {}, judged=60, incident_intents={"order_status": 2})
    assert boosted.intents["order_status"] > boosted.intents["cancel_order"] == pytest.approx(0.1)
    assert boosted.evidence["incident_intents"] == {"order_status": 2}
    # Failures on a level the run does not train add no level: the tool list stays the configured one.
    assert week_mix({"1": 1.0}, seen, {}, {"3": 40}, judged=60).levels == {"1": 1.0}
    off = week_mix({"1": 0.25, "2": 0.75}, seen, {"cancel_order": 12}, {"1": 10}, 60, None, MixSettings(False))
    assert (off.levels, off.intents) == ({"1": 0.25, "2": 0.75}, None)


# ---------- the draws follow them ----------


def test_the_dataset_draws_follow_the_intent_weights_deterministically(world):
    from training.curriculum import select_rows

    records = level1_records(world, 40, seed=0)
    assert set(Counter(r["intent"] for r in records)) == {"cancel_order", "order_status"}
    weights = {"cancel_order": 0.8, "order_status": 0.2}
    rows, report = select_rows(records, {"1": 1.0}, seed=2, size=50, intent_weights=weights)
    assert Counter(row["intent"] for row in rows) == {"cancel_order": 40, "order_status": 10}
    assert report.intents == {"cancel_order": 40, "order_status": 10}
    again, _ = select_rows(records, {"1": 1.0}, seed=2, size=50, intent_weights=weights)
    assert [r["seed"] for r in again] == [r["seed"] for r in rows]
    flipped, _ = select_rows(
        records, {"1": 1.0}, seed=2, size=50, intent_weights={"cancel_order": 0.2, "order_status": 0.8}
    )
    assert Counter(row["intent"] for row in flipped) == {"cancel_order": 10, "order_status": 40}
    # Each level follows the weights over the intents it holds.
    mixed, _ = select_rows(records, {"1": 0.5, "4": 0.5}, seed=2, size=40, intent_weights=weights)
    for level in (1, 4):
        assert Counter(r["intent"] for r in mixed if r["level"] == level) == {"cancel_order": 16, "order_status": 4}


def test_without_weights_or_with_weights_for_no_held_intent_the_draw_is_as_before(world):
    from training.curriculum import select_rows

    records = level1_records(world, 40, seed=0)
    plain, _ = select_rows(records, {"1": 1.0}, seed=2, size=50)
    stray, _ = select_rows(records, {"1": 1.0}, seed=2, size=50, intent_weights={"exchange_items": 1.0})
    assert [r["seed"] for r in stray] == [r["seed"] for r in plain]
    held = Counter(r["intent"] for r in records)
    drawn = Counter(r["intent"] for r in plain)
    assert abs(drawn["cancel_order"] / 50 - held["cancel_order"] / 40) < 0.1  # the pool's own mix


def test_a_bad_intent_weight_is_refused_before_compute(tmp_path):
    from training.grpo_config import ConfigError, GRPORunConfig, validate

    config = GRPORunConfig(
        model_path="org/model", output_dir=str(tmp_path), records=[], intent_weights={"cancel_order": -1.0}
    )
    with pytest.raises(ConfigError) as err:
        validate(config, num_processes=1)
    assert err.value.rule == "bad_intent_weight"


def test_the_adversarial_level_is_never_empty_while_any_task_is_verified(world):
    """No adversarial customer and no short task: the long verified tasks are hardened instead."""
    from training.curriculum import ADVERSARIAL_PERSONAS, level_of, select_rows

    long_tasks = []
    for record in level1_records(world, 4, seed=1):
        actions = record["gold"]["actions"] + [{"name": "think", "arguments": {"thought": str(i)}} for i in range(8)]
        long_tasks.append(dict(record, gold={**record["gold"], "actions": actions}))
    assert {level_of(r) for r in long_tasks} == {4}
    rows, report = select_rows(long_tasks, {"3": 1.0}, seed=0, size=6)
    assert len(rows) == 6 and report.generated_per_level == {3: 4}
    assert {json.loads(r["user_scenario"])["persona"] for r in rows} <= ADVERSARIAL_PERSONAS
    assert all(r["inject_tool_errors"] for r in rows)


# ---------- the evidence: the window's failures and open incidents ----------


def test_window_failures_count_failed_intents_and_levels(world):
    from evaluation.week_failures import window_failures

    records = level1_records(world, 20, seed=4)
    cancels = [r for r in records if r["intent"] == "cancel_order"]
    broken = [_failed(r) for r in cancels[:3]]
    no_gold = dict(records[0], interaction_id="no-gold", gold=None)
    failures = window_failures([*records, *broken, no_gold])
    assert failures.judged == len(records) + 3  # a record without gold is not judged
    assert failures.failed_by_intent == {"cancel_order": 3}
    assert failures.failed_by_level == {"1": 3}
    assert sum(failures.modes.values()) == 3


def test_open_incidents_are_the_weeks_or_the_champions_and_point_at_intents(world):
    from evaluation.week_failures import incident_intents, open_incidents

    records = level1_records(world, 10, seed=2)
    incidents = [
        {"kind": "run_failure", "created_at": "2026-11-18T10:00:00+00:00", "evidence": {"intent": "order_status"}},
        {"kind": "old", "created_at": "2026-10-01T10:00:00+00:00", "evidence": {"intent": "order_status"}},
        {
            "kind": "live_watch_action_drift",
            "created_at": "2026-10-02T10:00:00+00:00",
            "evidence": {
                "champion": "retail-agent/3",
                "tool_mix": {"cancel_pending_order": 0.3, "get_order_details": 0.2},
                "evaluated_mix": {"cancel_pending_order": 0.1, "get_order_details": 0.4},
            },
        },
    ]
    opened = open_incidents(incidents, "2026-11-16", champion="retail-agent/3")
    assert [i["kind"] for i in opened] == ["run_failure", "live_watch_action_drift"]
    assert [i["kind"] for i in open_incidents(incidents, "2026-11-16")] == ["run_failure"]
    # The drift raised the cancellation tool's share: it points at the intent whose gold calls it.
    assert incident_intents(opened, records) == {"order_status": 1, "cancel_order": 1}


def test_the_weeks_mix_reads_the_windows_failures_and_the_homes_open_incidents(home, world):
    """What grpo_candidate hands GRPO: the level-1 intents weighted by the failures of the train
    split's conversations, plus an incident filed in the week naming an intent."""
    from assets.resources import Curriculum
    from assets.training import _week_mix
    from dataplane.incidents import record_incident

    records = level1_records(world, 30, seed=4)
    cancels = [r for r in records if r["intent"] == "cancel_order"]
    train = [_failed(r) if r in cancels[:6] else r for r in records]
    mix = _week_mix(home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}), "retail")
    assert mix.levels == {"1": 1.0}
    assert mix.intents == pytest.approx({"cancel_order": 0.9, "order_status": 0.1})
    assert mix.evidence["failed_by_intent"] == {"cancel_order": 6} and mix.evidence["incident_intents"] == {}
    record_incident(home, "review", "status answers wrong", {"intent": "order_status"})
    this_week = _week_mix(home, date.today().isoformat(), train, None, Curriculum(levels={"1": 1.0}), "retail")
    assert this_week.evidence["incident_intents"] == {"order_status": 1}
    assert this_week.intents["order_status"] > mix.intents["order_status"]
    off = _week_mix(home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}, by_failures=False), "retail")
    assert (off.levels, off.intents) == ({"1": 1.0}, None)
