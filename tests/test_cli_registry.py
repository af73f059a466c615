"""`retrain approve` and `retrain rollback` as a person uses them, on a real sqlite MLflow store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace

import dagster as dg
import numpy as np
import pytest
from safetensors.numpy import save_file

from assets.decisions import PROMOTION_ASSET, decision_metadata, latest_decision
from assets.pause_log import InstancePauseLog
from dataplane.hashing import model_digest
from evaluation.decision import ChampionLineage, PromotionDecision
from evaluation.gates import evaluate_gates
from monitoring.pause import active_pause, lifted_pauses, pause_promotions
from orchestration.instance import prepare_dagster_home
from tests.helpers_gates import gate_inputs
from tracking.registry import canary_info, champion_info, find_week_version, mlflow_client, promote_canary
from tracking.run_log import load_gate_report, open_week_run

WEEK = "2026-11-16"


@pytest.fixture(autouse=True)
def _dagster_home(home, monkeypatch):
    # prepare_dagster_home exports DAGSTER_HOME; set here first so the test's end restores it.
    monkeypatch.setenv("DAGSTER_HOME", str(home.dagster_home))


def _retrain(home, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "RETRAIN_HOME": str(home.root)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def _decision(home, tmp_path, week: str, policy: str, labels: int | None = None, pause=None):
    """Record a promotion decision for `week` in the home's Dagster instance, as promotion_gate does
    (`pause`: the live watch's pause in force when the week was gated)."""
    model = tmp_path / f"model-{week}"
    model.mkdir()
    save_file({"w": np.ones(4, dtype=np.float32)}, str(model / "model.safetensors"))
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    report = evaluate_gates(replace(gate_inputs(policy, labels=labels), watch_pause=pause))
    lineage = ChampionLineage(week=week, window_hash="ab" * 32, shadow_success=0.8, model_digest=model_digest(model))
    decision = PromotionDecision(week, report, str(model), lineage, open_week_run(home.mlflow_uri, week, "dagster-run"))
    with dg.DagsterInstance.from_config(str(prepare_dagster_home(home))) as instance:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(PROMOTION_ASSET, partition=week, metadata=decision_metadata(decision))
        )
    return report


@pytest.mark.slow
def test_a_held_week_is_registered_only_after_approval(home, tmp_path):
    report = _decision(home, tmp_path, WEEK, "drifter")
    assert report.decision == "hold"
    assert champion_info(home.mlflow_uri) is None

    done = _retrain(home, "approve", "--week", "2026-11-18", "--by", "alice")  # any day of the week
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"week": WEEK, "version": 1, "approved_by": "alice"}
    champion = champion_info(home.mlflow_uri)
    assert champion.version == 1 and champion.tags["approved_by"] == "alice"

    again = _retrain(home, "approve", "--week", WEEK, "--by", "alice")
    assert again.returncode == 0 and json.loads(again.stdout)["version"] == 1  # never a second version


@pytest.mark.slow
def test_approval_refuses_weights_changed_since_the_decision(home, tmp_path):
    _decision(home, tmp_path, WEEK, "drifter")
    weights = tmp_path / f"model-{WEEK}" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight, after the gates judged the folder
    weights.write_bytes(bytes(data))
    refused = _retrain(home, "approve", "--week", WEEK, "--by", "alice")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "model folder changed since the decision" in refused.stderr and "nothing registered" in refused.stderr
    assert champion_info(home.mlflow_uri) is None and find_week_version(home.mlflow_uri, WEEK) is None
    # Refused before the approval was recorded: the week's run still says what the gates said.
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        run_id = latest_decision(instance, WEEK).mlflow_run_id
    tags = mlflow_client(home.mlflow_uri).get_run(run_id).data.tags
    assert "approved_by" not in tags


@pytest.mark.slow
def test_approval_of_a_week_also_short_of_human_labels_registers_nothing(home, tmp_path):
    report = _decision(home, tmp_path, WEEK, "drifter", labels=12)
    assert {g.name for g in report.gates if g.verdict == "hold"} == {"tool_call_drift", "reward_alignment"}
    refused = _retrain(home, "approve", "--week", WEEK, "--by", "alice")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "reward_alignment held: 12 human labels, 200 needed: label 188 more" in refused.stderr
    assert find_week_version(home.mlflow_uri, WEEK) is None and champion_info(home.mlflow_uri) is None


@pytest.mark.slow
def test_approval_lifts_the_drift_hold_never_the_live_watch_pause_which_resume_lifts(home, instance, tmp_path):
    pauses = InstancePauseLog(instance)  # the home's instance, where the CLI reads and records the pause
    pause = pause_promotions(pauses, "2026-11-12", "retail-agent/1", 0.2, 0.05, "incident.json")
    report = _decision(home, tmp_path, WEEK, "drifter", pause=pause)
    assert {g.name for g in report.gates if g.verdict == "hold"} == {"tool_call_drift", "live_watch"}

    refused = _retrain(home, "approve", "--week", WEEK, "--by", "alice")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "live_watch held" in refused.stderr and "retrain resume --by NAME --reason TEXT" in refused.stderr
    assert "tool_call_drift held" not in refused.stderr  # the approval covers the drift; the pause is left
    assert active_pause(pauses) == pause and champion_info(home.mlflow_uri) is None

    for args, missing in ((("--by", "bob"), "--reason"), (("--reason", "read it"), "--by")):
        incomplete = _retrain(home, "resume", *args)
        assert incomplete.returncode == 2 and missing in incomplete.stderr
    assert active_pause(pauses) == pause
    resumed = _retrain(home, "resume", "--by", "bob", "--reason", "transcripts read: a carrier outage")
    assert resumed.returncode == 0, resumed.stderr
    record = json.loads(resumed.stdout)["resumed"]
    assert (record["lifted_by"], record["reason"], record["since"]) == (
        "bob",
        "transcripts read: a carrier outage",
        "2026-11-12",
    )
    assert active_pause(pauses) is None and lifted_pauses(pauses) == [record]

    done = _retrain(home, "approve", "--week", WEEK, "--by", "alice")
    assert done.returncode == 0, done.stderr
    champion = champion_info(home.mlflow_uri)
    assert champion.version == 1 and champion.tags["approved_by"] == "alice"
    # The report the version was promoted on says who resumed promotions, and why.
    live = load_gate_report(home.mlflow_uri, champion.run_id).gate("live_watch")
    assert live.verdict == "pass" and "promotions resumed by bob" in live.detail and "carrier outage" in live.detail
    nothing = _retrain(home, "resume", "--by", "bob", "--reason", "again")
    assert nothing.returncode == 2 and "not paused" in nothing.stderr


@pytest.mark.slow
def test_a_rejected_week_cannot_be_approved_and_rollback_needs_a_previous(home, tmp_path):
    _decision(home, tmp_path, WEEK, "escalator")
    refused = _retrain(home, "approve", "--week", WEEK)
    assert refused.returncode == 2
    assert "cannot approve" in refused.stderr and "Traceback" not in refused.stderr
    assert find_week_version(home.mlflow_uri, WEEK) is None

    missing = _retrain(home, "approve", "--week", "2026-11-30")
    assert missing.returncode == 2 and "no promotion decision" in missing.stderr

    nothing = _retrain(home, "rollback")
    assert nothing.returncode == 1 and "previous_champion" in nothing.stderr


@pytest.mark.slow
def test_rollback_restores_the_previous_champion(home, tmp_path):
    for week in ("2026-11-09", WEEK):
        _decision(home, tmp_path, week, "drifter")
        assert _retrain(home, "approve", "--week", week, "--by", "bob").returncode == 0
    # The first approval found no champion and became it; the second serves as canary until the
    # health sensor's canary check promotes it.
    assert champion_info(home.mlflow_uri).version == 1 and canary_info(home.mlflow_uri).version == 2
    promote_canary(home.mlflow_uri, moved_by="health sensor (canary check): test")
    assert champion_info(home.mlflow_uri).version == 2
    done = _retrain(home, "rollback")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["to_version"] == 1
    assert champion_info(home.mlflow_uri).version == 1


def test_bad_week_is_a_clear_error(home):
    done = _retrain(home, "run", "--week", "last tuesday")
    assert done.returncode == 2
    assert "YYYY-MM-DD" in done.stderr and "Traceback" not in done.stderr
