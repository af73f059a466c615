"""The evaluation assets' own rules: leakage by customer, the shadow set reaching back before a short
window, the run's reward weights, one declaration of the gate thresholds, and what runs by itself
when the code location loads."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import subprocess
import sys
from datetime import date, datetime
from pathlib import Path

import pytest

from assets.evaluation import _never_trained_on, run_reward_weights
from assets.promotion import GateSettings
from domains.retail.traffic.simulate import simulate
from evaluation.gates import GateConfig
from evaluation.replay import alignment_evidence, reward_alignment
from tests.helpers_gates import make_record


def test_never_trained_on_fails_when_an_evaluated_customer_is_in_the_train_split():
    train = [make_record(1, customer="ann_1"), make_record(2, customer="bob_2")]
    held_out = [make_record(10, customer="cid_3"), make_record(11, customer="dee_4")]
    clean = _never_trained_on({"train": train}, held_out)
    assert clean.passed and clean.metadata["with_a_train_customer"].value == 0
    # Different interactions (ids never overlap), but one customer sits on both sides.
    leaking = [*held_out, make_record(12, customer="bob_2")]
    check = _never_trained_on({"train": train}, leaking)
    assert not check.passed
    assert check.metadata["with_a_train_customer"].value == 1
    assert check.metadata["sample"].value == ["int-00012"]


@pytest.fixture(scope="module")
def labelled(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("traffic")
    simulate(days=1, per_day=40, seed=3, out_dir=str(out), start=date(2026, 11, 16), label_share=1.0, n_users=40)
    files = sorted(Path(f) for f in glob.glob(f"{out}/**/*.jsonl", recursive=True))
    records = [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]
    return [r for r in records if r.get("human_label")]


def test_alignment_is_scored_with_the_weights_the_candidate_trained_with(labelled):
    default = alignment_evidence(labelled, {})
    assert not all(default.human) and any(default.human)  # both classes, so the AUC is defined
    inverted = {"completed": -10.0, "failed": 5.0}
    priced = alignment_evidence(labelled, inverted)
    assert priced.human == default.human and len(priced.rewards) == len(priced.human)
    assert priced.summary["auc"] == pytest.approx(reward_alignment(labelled, inverted)["auc"])
    assert priced.summary["auc"] < 0.5 < default.summary["auc"]  # a reward that pays failure is not aligned
    assert priced.rewards != default.rewards


def test_evaluation_refuses_a_candidate_that_does_not_say_its_reward_weights():
    import dagster as dg

    from assets.handoffs import GRPOCandidate

    trained = GRPOCandidate("m", "run", final_step=1, reward_weights={"looping": -2.0})
    assert run_reward_weights(trained) == {"looping": -2.0}
    stored_before = GRPOCandidate("m", "run", final_step=1)
    object.__delattr__(stored_before, "reward_weights")  # as unpickled from before the field existed
    with pytest.raises(dg.Failure, match="reward weights"):
        run_reward_weights(stored_before)


@pytest.mark.parametrize(
    "levels,config,compact",
    [({"1": 1.0}, {}, True), ({"1": 0.5, "4": 0.5}, {}, False), ({"4": 1.0}, {"compact": True}, True)],
)
def test_evaluation_shows_tool_results_in_the_curriculums_form_unless_the_config_says(levels, config, compact):
    """A policy trained on recorded conversations (level 4, full results) is judged in full, one
    trained below level 4 in short results; an explicit `compact` wins. The tools are the curriculum's."""
    from assets.evaluation import EvalConfig, _pair_run
    from assets.handoffs import GRPOCandidate, PolicyBase
    from assets.resources import Curriculum
    from evaluation.reports import PairRun

    curriculum = Curriculum(levels=levels, tool_list="level1")
    run = _pair_run(
        EvalConfig(**config),
        PolicyBase(path="base", source="base_model"),
        GRPOCandidate(path="candidate", mlflow_run_id="none", final_step=0),
        curriculum,
        "retail",
        None,
    )
    assert (run.settings.compact, run.tools) == (compact, curriculum.tools_for("retail"))
    with pytest.raises(ValueError, match="settings.compact is None"):
        PairRun("candidate", "base", dataclasses.replace(run.settings, compact=None), {})


def test_gate_settings_are_the_gate_config_declared_once():
    declared = {f.name: f for f in dataclasses.fields(GateConfig)}
    settings = GateSettings.model_fields
    assert list(settings) == list(declared)
    for name, spec in declared.items():
        assert settings[name].default == spec.default, name
        assert settings[name].description == spec.metadata["help"], name
    assert GateConfig(**GateSettings(max_tool_drift=0.2).model_dump()) == GateConfig(max_tool_drift=0.2)


def _defaults(**env: str) -> list[str]:
    code = (
        "from orchestration.definitions import defs; "
        "print(defs.get_schedule_def('weekly_retrain_schedule').default_status.value); "
        "print(defs.get_sensor_def('champion_health').default_status.value)"
    )
    environ = {k: v for k, v in os.environ.items() if k not in ("RETRAIN_SCHEDULE", "RETRAIN_CHAMPION_HEALTH")}
    done = subprocess.run(
        [sys.executable, "-c", code], env={**environ, **env}, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-2:]


def test_schedule_and_champion_health_run_by_default_and_switch_off_by_environment():
    assert _defaults() == ["RUNNING", "RUNNING"]
    assert _defaults(RETRAIN_SCHEDULE="off", RETRAIN_CHAMPION_HEALTH="off") == ["STOPPED", "STOPPED"]


def test_a_misspelt_switch_is_an_error_naming_it(monkeypatch):
    from orchestration.environment import switched_on

    monkeypatch.setenv("RETRAIN_SCHEDULE", "of")
    with pytest.raises(ValueError, match="RETRAIN_SCHEDULE='of'"):
        switched_on("RETRAIN_SCHEDULE")


def test_shadow_report_tops_up_a_short_window_from_earlier_history(home):
    """The real shadow_report after the real data assets, with a tiny model as both candidate and
    baseline: a 40-row window holds too few shadow conversations, so the set reaches back into the
    log before it, never past the week's end, and the metadata says where each part came from."""
    import dagster as dg

    from assets import data
    from assets.evaluation import shadow_report
    from assets.handoffs import GRPOCandidate, PolicyBase
    from assets.partitions import week_end, weekly_partitions
    from assets.resources import Curriculum
    from dataplane.store import load_records, open_store
    from dataplane.window import week_id, window_ids
    from evaluation.eval_sets import shadow_set
    from orchestration.environment import default_resources
    from tests.helpers_training import tiny_spec
    from training.tiny.bootstrap import build_tiny_policy

    week, size = "2026-11-16", 8
    # Three weeks up to the partition's end and one week after it: later traffic that must not leak.
    simulate(days=28, per_day=12, seed=5, out_dir=str(home.landing), start=date(2026, 11, 2), n_users=60)
    landed = [json.loads(line) for f in sorted(home.landing.rglob("*.jsonl")) for line in f.read_text().splitlines()]
    model = str(build_tiny_policy(home.models / "tiny", landed[:40], tiny_spec()))

    @dg.asset(name="policy_base", partitions_def=weekly_partitions)
    def stub_policy_base():
        return PolicyBase(path=model, source="base_model")

    @dg.asset(name="grpo_candidate", partitions_def=weekly_partitions)
    def stub_candidate():
        return GRPOCandidate(path=model, mlflow_run_id="none", final_step=0)

    resources = {**default_resources(), "curriculum": Curriculum(levels={"2": 1.0})}  # recorded form: no rewrite
    config = {
        "ops": {
            "interaction_window": {"config": {"size": 40}},
            # The stub candidate has no MLflow run to link traces to (tests/test_traces.py traces a week).
            "shadow_report": {
                "config": {"shadow_size": size, "max_turns": 2, "max_new_tokens": 8, "log_traces": False}
            },
        }
    }
    assets = [data.raw_interactions, data.interaction_window, data.window_splits, stub_policy_base, stub_candidate]
    result = dg.materialize(
        [*assets, shadow_report], partition_key=week, resources=resources, run_config=config, raise_on_error=False
    )
    assert result.success
    [event] = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == "shadow_report"]
    meta = {k: v.value for k, v in event.materialization.metadata.items() if k.startswith("shadow_")}
    in_window, before = meta["shadow_found_in_window"], meta["shadow_found_before_window"]
    assert meta["shadow_found"] == meta["shadow_requested"] == size == in_window + before
    assert in_window > 0 and before > 0

    con = open_store(home.duckdb_path)
    try:
        stored = shadow_set(con, week)
        records = load_records(con, list(stored.interaction_ids))
        window = set(window_ids(con, week_id(week_end(week))))
    finally:
        con.close()
    ended = [datetime.fromisoformat(r["ended_at"]) for r in records]
    assert max(ended) < week_end(week) and ended == sorted(ended, reverse=True)
    assert len(window) == 40 and sum(r["interaction_id"] in window for r in records) == in_window
    assert any(datetime.fromisoformat(r["ended_at"]) >= week_end(week) for r in landed)  # a future to leak
