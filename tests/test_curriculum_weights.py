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
    from training.curriculum import TaskWeights, select_rows

    records = level1_records(world, 40, seed=0)
    assert set(Counter(r["intent"] for r in records)) == {"cancel_order", "order_status"}
    weights = {"cancel_order": 0.8, "order_status": 0.2}
    rows, report = select_rows(records, {"1": 1.0}, seed=2, size=50, weights=TaskWeights(weights))
    assert Counter(row["intent"] for row in rows) == {"cancel_order": 40, "order_status": 10}
    assert report.intents == {"cancel_order": 40, "order_status": 10}
    again, _ = select_rows(records, {"1": 1.0}, seed=2, size=50, weights=TaskWeights(weights))
    assert [r["seed"] for r in again] == [r["seed"] for r in rows]
    flipped, _ = select_rows(
        records, {"1": 1.0}, seed=2, size=50, weights=TaskWeights({"cancel_order": 0.2, "order_status": 0.8})
    )
    assert Counter(row["intent"] for row in flipped) == {"cancel_order": 10, "order_status": 40}
    # Each level follows the weights over the intents it holds.
    mixed, _ = select_rows(records, {"1": 0.5, "4": 0.5}, seed=2, size=40, weights=TaskWeights(weights))
    for level in (1, 4):
        assert Counter(r["intent"] for r in mixed if r["level"] == level) == {"cancel_order": 16, "order_status": 4}


def test_without_weights_or_with_weights_for_no_held_intent_the_draw_is_as_before(world):
    from training.curriculum import TaskWeights, select_rows

    records = level1_records(world, 40, seed=0)
    plain, _ = select_rows(records, {"1": 1.0}, seed=2, size=50)
    stray, _ = select_rows(records, {"1": 1.0}, seed=2, size=50, weights=TaskWeights({"exchange_items": 1.0}))
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
    for field, value, rule in (
        ("persona_weights", {"angry": True}, "bad_persona_weight"),
        ("failed_share", 1.5, "bad_failed_share"),
    ):
        bad = GRPORunConfig(model_path="org/model", output_dir=str(tmp_path), records=[], **{field: value})
        with pytest.raises(ConfigError) as err:
            validate(bad, num_processes=1)
        assert err.value.rule == rule


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


def test_a_task_the_sandbox_cannot_start_is_never_drawn_and_is_counted(world):
    """TRL resets the sandbox for every rollout, and one reset that raises stops the update: a
    record whose stored world or scenario cannot start is left out of every level's pool."""
    import copy

    from training.curriculum import select_rows, startable
    from training.sandbox.environment import environment_class

    records = level1_records(world, 8, seed=2)
    broken = copy.deepcopy(records[0])
    broken["interaction_id"] = "no-name"
    for user in broken["initial_state"]["users"].values():
        user["name"] = 7  # the retail world refuses it at reset
    assert "WorldError" in startable(broken, 1) and startable(records[1], 1) is None
    for levels in ({"1": 1.0}, {"4": 1.0}, {"1": 0.5, "3": 0.5}):
        rows, report = select_rows([broken, *records], levels, seed=0, size=24)
        assert "no-name" not in {r["interaction_id"] for r in rows} and len(rows) == 24
        assert sum(report.unstartable_per_level.values()) == len(levels)
        assert report.first_unstartable.startswith("no-name: WorldError")
        assert report.to_dict()["unstartable_per_level"]
        for row in rows:  # every drawn row starts, as TRL will start it
            environment_class("retail")().reset(**row)


def test_a_week_with_no_task_that_starts_is_not_trained_and_says_why(world):
    """No record of the week's level starts (here: the customers' known facts are not text, so
    none restates at level 1 and no simulated customer can be built): the update is not
    run into a failed training process; the candidate is its base, with the reason."""
    from assets.training import _no_task_starts
    from training.grpo_config import GRPORunConfig

    records = level1_records(world, 6, seed=4)
    config = GRPORunConfig(model_path="m", output_dir="o", levels={"1": 1.0})
    assert _no_task_starts(records, config) is None
    unstated = [{**r, "user_scenario": {**r["user_scenario"], "known_info": {"order_ids": 7}}} for r in records]
    why = _no_task_starts(unstated, config)
    assert why is not None and why.startswith("not trained: empty_level") and "levels [1]" in why


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
    mix = _week_mix(home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}), "retail", "retail-agent")
    assert mix.levels == {"1": 1.0}
    assert mix.intents == pytest.approx({"cancel_order": 0.9, "order_status": 0.1})
    assert mix.evidence["failed_by_intent"] == {"cancel_order": 6} and mix.evidence["incident_intents"] == {}
    record_incident(home, "review", "status answers wrong", {"intent": "order_status"})
    this_week = _week_mix(
        home, date.today().isoformat(), train, None, Curriculum(levels={"1": 1.0}), "retail", "retail-agent"
    )
    assert this_week.evidence["incident_intents"] == {"order_status": 1}
    assert this_week.intents["order_status"] > mix.intents["order_status"]
    assert mix.failed_tasks == {r["interaction_id"] for r in cancels[:6]} and mix.failed_share == pytest.approx(0.9)
    assert mix.personas and mix.evidence["failed_tasks"] == 6
    off = _week_mix(
        home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}, by_failures=False), "retail", "retail-agent"
    )
    assert (off.levels, off.intents, off.personas, off.failed_share) == ({"1": 1.0}, None, None, None)


def test_the_weeks_failed_tasks_are_the_models_own_once_it_has_served(home, world):
    """Another agent's failures (the scripted legacy agent's) never steer the week once a version of
    the registered model has served some of the window; before that, the whole window's do."""
    from assets.resources import Curriculum
    from assets.training import _week_mix

    records = level1_records(world, 40, seed=4)
    cancels = [r for r in records if r["intent"] == "cancel_order"]
    legacy_failed, model_failed = cancels[:6], cancels[6:8]
    train = [
        {**(_failed(r) if r in legacy_failed + model_failed else r), "policy_version": "rules-agent/legacy"}
        for r in records
    ]
    before = _week_mix(home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}), "retail", "retail-agent")
    assert before.failed_tasks == {r["interaction_id"] for r in legacy_failed + model_failed}
    assert before.evidence["failures_of"].startswith("all traffic")
    model_ids = {r["interaction_id"] for r in model_failed + cancels[8:12] + records[-4:]}
    train = [{**r, "policy_version": "retail-agent/1"} if r["interaction_id"] in model_ids else r for r in train]
    mix = _week_mix(home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}), "retail", "retail-agent")
    assert mix.failed_tasks == {r["interaction_id"] for r in model_failed}
    assert mix.evidence["failed_by_intent"] == {"cancel_order": 2}
    assert mix.evidence["failures_of"] == "retail-agent (any version)"


def test_the_weeks_grpo_run_gets_the_whole_mix(home, world, tmp_path):
    """What _week_mix decides reaches the trainer's config, and the trainer's draw follows it."""
    from assets.handoffs import PolicyBase
    from assets.resources import Curriculum
    from assets.training import GRPOTrainingConfig, _week_mix, _week_run_config
    from training.curriculum import select_rows

    records = level1_records(world, 30, seed=4)
    cancels = [r for r in records if r["intent"] == "cancel_order"]
    train = [_failed(r) if r in cancels[:6] else r for r in records]
    mix = _week_mix(home, "2026-11-16", train, None, Curriculum(levels={"1": 1.0}), "retail", "retail-agent")
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": 4096}))
    base = PolicyBase(path=str(model), source="base_model")
    run = _week_run_config(GRPOTrainingConfig(), base, tmp_path, train, "retail", mix, "level1")
    assert run.tool_list == "level1"  # the curriculum's list, as the asset passes it
    assert set(run.failed_tasks) == mix.failed_tasks and run.failed_share == mix.failed_share
    assert run.persona_weights == mix.personas and run.intent_weights == mix.intents
    rows, report = select_rows(train, run.levels, seed=0, size=100, weights=mix.task_weights())
    cancel_rows = [r for r in rows if r["intent"] == "cancel_order"]
    assert report.failed_task_rows == sum(r["interaction_id"] in mix.failed_tasks for r in cancel_rows)
    assert report.failed_task_rows == round(0.9 * len(cancel_rows))


# ---------- failure modes, personas and faults pick from the same mix ----------


def test_the_week_mix_weights_personas_faults_and_the_failed_tasks():
    from training.curriculum import MixSettings, week_mix

    seen = {"order_status": 30, "cancel_order": 30}
    personas = {"polite forthcoming": 40, "angry": 20}
    mix = week_mix(
        {"1": 0.5, "3": 0.5},
        seen,
        {"cancel_order": 10},
        {"1": 10},
        judged=60,
        personas_seen=personas,
        failed_by_persona={"angry": 10},
        faulted_failed=10,
        failed_tasks={"a", "b"},
    )
    assert mix.personas == pytest.approx({"angry": 0.9, "polite forthcoming": 0.1})
    # Level 3 (the tasks that inject a fault) gains the failures that met a back-end fault.
    assert mix.levels == pytest.approx({"1": 0.5, "3": 0.5})
    no_faults = week_mix({"1": 0.5, "3": 0.5}, seen, {"cancel_order": 10}, {"1": 10}, judged=60)
    assert no_faults.levels == pytest.approx({"1": 0.9, "3": 0.1})
    assert mix.failed_tasks == {"a", "b"} and mix.failed_share == pytest.approx(0.9)
    assert mix.to_dict()["failed_tasks"] == 2 and mix.evidence["faulted_failed"] == 10
    weights = mix.task_weights()
    assert (weights.personas, weights.failed_share) == (mix.personas, mix.failed_share)
    # Nothing failed: no failed-task split; weighting off: none of it.
    assert week_mix({"1": 1.0}, seen, {}, {}, judged=60, failed_tasks=()).failed_share is None
    off = week_mix({"1": 1.0}, seen, {}, {}, 60, None, MixSettings(False), personas_seen=personas, failed_tasks={"a"})
    assert (off.personas, off.failed_share, off.task_weights().splits()[2][1]) == (None, None, None)


def _personas(records, names):
    out = []
    for i, record in enumerate(records):
        scenario = dict(record["user_scenario"]) if isinstance(record["user_scenario"], dict) else {}
        scenario["persona"] = names[i % len(names)]
        out.append({**record, "user_scenario": scenario})
    return out


def test_the_draws_follow_persona_weights_and_favour_failed_tasks(world):
    from training.curriculum import TaskWeights, persona_of, select_rows

    records = _personas(level1_records(world, 40, seed=0), ["calm", "angry"])
    cancel = [r for r in records if r["intent"] == "cancel_order"]
    failed = frozenset(r["interaction_id"] for r in cancel[:3])
    weights = TaskWeights({"cancel_order": 0.5, "order_status": 0.5}, {"angry": 0.8, "calm": 0.2}, failed, 0.9)
    rows, report = select_rows(records, {"4": 1.0}, seed=1, size=100, weights=weights)
    by_intent = Counter(r["intent"] for r in rows)
    assert by_intent == {"cancel_order": 50, "order_status": 50}
    angry = Counter(r["persona"] for r in rows)["angry"]
    assert angry == 80 and report.personas == {"angry": 80, "calm": 20}
    # Within each (intent, persona) cell that holds a failed task, 90% of its draws are failed tasks.
    cells = Counter((r["intent"], r["persona"], r["interaction_id"] in failed) for r in rows)
    for persona in ("angry", "calm"):
        holds_failed = any(r["interaction_id"] in failed and persona_of(r) == persona for r in cancel)
        n = cells[("cancel_order", persona, True)] + cells[("cancel_order", persona, False)]
        assert cells[("cancel_order", persona, True)] == (round(0.9 * n) if holds_failed else 0)
    assert report.failed_task_rows == sum(r["interaction_id"] in failed for r in rows) > 0
    again, _ = select_rows(records, {"4": 1.0}, seed=1, size=100, weights=weights)
    assert [r["seed"] for r in again] == [r["seed"] for r in rows]


def test_a_persona_the_weights_do_not_name_gets_the_floor_not_nothing(world):
    from training.curriculum import TaskWeights, select_rows

    records = _personas(level1_records(world, 30, seed=3), ["calm", "angry", "confused"])
    rows, report = select_rows(
        records, {"4": 1.0}, seed=0, size=100, weights=TaskWeights(None, {"angry": 0.7, "calm": 0.1})
    )
    shares = {k: v / 100 for k, v in report.personas.items()}
    assert shares["confused"] == pytest.approx(shares["calm"], abs=0.01) and shares["angry"] > 0.7


def test_window_failures_count_personas_faults_and_keep_the_failed_ids(world):
    from evaluation.week_failures import met_fault, window_failures
    from training.sandbox.core import INJECTED_ERROR

    records = _personas(level1_records(world, 20, seed=4), ["calm", "angry"])
    cancels = [r for r in records if r["intent"] == "cancel_order"]
    broken = [_failed(r) for r in cancels[:3]]
    kept = [r for r in records if r not in cancels[:3]]
    faulted = dict(broken[0], messages=[*broken[0]["messages"], {"role": "tool", "content": INJECTED_ERROR}])
    assert met_fault(faulted) and not met_fault(broken[0]) and not met_fault({"messages": "text"})
    failures = window_failures([*kept, faulted, *broken[1:]])
    assert failures.failed_ids == {r["interaction_id"] for r in broken}
    assert sum(failures.failed_by_persona.values()) == 3 and sum(failures.judged_by_persona.values()) == len(records)
    assert failures.faulted_failed == 1 and failures.faulted_judged == 1
    assert failures.to_dict()["failed_tasks"] == 3
