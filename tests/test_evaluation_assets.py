"""The evaluation assets' own rules: leakage by customer, the run's reward weights, one declaration
of the gate thresholds, and what runs by itself when the code location loads."""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import subprocess
import sys
from datetime import date
from pathlib import Path

import pytest

from assets.evaluation import _never_trained_on, run_reward_weights
from assets.promotion import GateSettings
from evaluation.gates import GateConfig
from evaluation.replay import alignment_evidence, reward_alignment
from tests.helpers_gates import make_record
from training.traffic.simulate import simulate


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
    from orchestration.switches import switched_on

    monkeypatch.setenv("RETRAIN_SCHEDULE", "of")
    with pytest.raises(ValueError, match="RETRAIN_SCHEDULE='of'"):
        switched_on("RETRAIN_SCHEDULE")
