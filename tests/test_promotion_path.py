"""The promotion path in Dagster: a rejection is a normal week, a promotion registers from the
decision value, every gate is a visible check, and failure-mode rises are flagged.

Real promotion and registration assets, a real Dagster instance and sqlite MLflow store; the
upstream assets are stand-ins handing over scripted evaluation reports (tests.helpers_promotion).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import dagster as dg
import pytest

from assets.decisions import latest_decision, run_decision
from assets.pause_log import PAUSE_ASSET, InstancePauseLog
from dataplane.hashing import MODEL_DIGEST_KEY, model_digest
from dataplane.incidents import list_incidents
from evaluation.gate_floors import FLOORS_ENV, INSTANCE_FLOORS_FILE, write_floors
from evaluation.gates import GATE_NAMES, GATE_RULES
from monitoring.pause import active_pause, pause_promotions
from orchestration.cli.demo import _summary_rows
from orchestration.runner import WeekRun, resume_watch
from tests.helpers_promotion import run_promotion
from tracking.registry import canary_info, champion_info, find_base_version, find_week_version, mlflow_client

WEEK, NEXT = "2026-11-16", "2026-11-23"


def _checks(result) -> dict[str, dg.AssetCheckEvaluation]:
    return {e.check_name: e for e in result.get_asset_check_evaluations()}


def _materialized(result) -> set[str]:
    return {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}


def test_a_rejected_week_is_a_successful_run_that_registers_nothing(home, instance, tmp_path):
    result = run_promotion(home, instance, WEEK, "identical", tmp_path)
    assert result.success  # an ordinary week whose candidate was not better
    assert "promotion_gate" in _materialized(result) and "registered_model" not in _materialized(result)
    checks = _checks(result)
    assert {f"gate_{name}" for name in GATE_NAMES} <= set(checks)
    assert not checks["gate_calibration_improvement"].passed
    assert checks["gate_calibration_improvement"].metadata["verdict"].value == "fail"
    assert checks["gate_data_valid"].passed
    alarm = checks["gate_reward_hacking_alarm"].metadata  # the statistic, documented with its parts
    assert alarm["rule"].value == GATE_RULES["reward_hacking_alarm"] and "proxy_delta" in alarm
    assert "serves_this_version" not in checks  # registration skipped, so its check too
    # The decision reached Dagster (the asset's value and its metadata), not a side file.
    decision = latest_decision(instance, WEEK)
    assert decision.decision == "reject" and "calibration_improvement fail" in decision.reason
    assert not list((home.root / "runs").glob(f"{WEEK}/promotion_request.json"))
    # Nothing registered beyond the first champion (the base model).
    assert find_week_version(home.mlflow_uri, WEEK) is None
    assert find_base_version(home.mlflow_uri)[0] == champion_info(home.mlflow_uri).version == 1
    run = mlflow_client(home.mlflow_uri).get_run(decision.mlflow_run_id)
    assert run.data.tags["gate_decision"] == "reject"
    assert run.data.tags["gate_reason"] == decision.reason
    assert list_incidents(home) == []
    # What `retrain run` and the demo print comes from the run's own record of the decision.
    week_run = WeekRun(WEEK, result.run_id, result.success, sorted(_materialized(result)), run_decision(result, WEEK))
    assert week_run.decision == decision
    summary = "\n".join(_summary_rows(week_run))
    assert f"decision: reject ({decision.reason})" in summary and "calibration_improvement" in summary


def test_a_promoted_week_registers_the_decision_it_was_handed(home, instance, tmp_path):
    result = run_promotion(home, instance, WEEK, "better", tmp_path)
    assert result.success and "registered_model" in _materialized(result)
    assert _checks(result)["serves_this_version"].passed
    # The candidate serves as canary beside the base model; the health sensor decides on promotion.
    canary, champion = canary_info(home.mlflow_uri), champion_info(home.mlflow_uri)
    assert canary.version == find_week_version(home.mlflow_uri, WEEK) == 2
    assert champion.version == 1 and champion.previous_version is None
    assert canary.tags["gate_decision"] == "promote" and canary.tags["canary_set_by"].startswith(
        "registered_model asset"
    )
    assert canary.tags["window_hash"] == latest_decision(instance, WEEK).lineage.window_hash
    # The decision recorded the digest of the folder the gates judged; the version carries it.
    digest = model_digest(tmp_path / f"cand-{WEEK}")
    assert latest_decision(instance, WEEK).lineage.model_digest == canary.tags[MODEL_DIGEST_KEY] == digest


def test_a_held_week_is_not_registered_until_approved(home, instance, tmp_path):
    from orchestration.runner import approve_week

    result = run_promotion(home, instance, WEEK, "drifter", tmp_path)
    assert result.success and "registered_model" not in _materialized(result)
    check = _checks(result)["gate_tool_call_drift"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert find_week_version(home.mlflow_uri, WEEK) is None
    done = approve_week(WEEK, "alice", home)
    assert done["version"] == canary_info(home.mlflow_uri).version == 2 and champion_info(home.mlflow_uri).version == 1
    # The run the version points to carries the report it was promoted on, and the held one beside it.
    from tracking.run_log import load_gate_report

    run_id = latest_decision(instance, WEEK).mlflow_run_id
    version = mlflow_client(home.mlflow_uri).get_model_version("retail-agent", "2")
    assert version.run_id == run_id
    approved = load_gate_report(home.mlflow_uri, run_id)
    assert approved.decision == "promote" and approved.approved_by == "alice"
    assert approved.gate("tool_call_drift").value == check.metadata["value"].value
    run = mlflow_client(home.mlflow_uri).get_run(run_id)
    assert run.data.tags["gate_decision"] == "promote" and run.data.tags["approved_by"] == "alice"
    with tempfile.TemporaryDirectory() as tmp:
        held = json.loads(
            Path(mlflow_client(home.mlflow_uri).download_artifacts(run_id, "gate_report_held.json", tmp)).read_text()
        )
    assert held["decision"] == "hold" and held["approved_by"] is None


def test_the_demo_stands_in_for_the_reviewer_only_on_an_approvable_hold(home, instance, tmp_path):
    from orchestration.cli.demo import DEMO_REVIEWER, review_hold

    def week_run(week, policy, gate_config=None):
        result = run_promotion(home, instance, week, policy, tmp_path / week, gate_config)
        return WeekRun(week, result.run_id, result.success, sorted(_materialized(result)), run_decision(result, week))

    rejected = week_run(WEEK, "identical")
    assert review_hold(rejected, home) is None and find_week_version(home.mlflow_uri, WEEK) is None
    # Held also for missing labels: only more labels lift that, so the stand-in does not approve.
    short_of_labels = week_run("2026-11-09", "drifter", {"min_human_labels": 100_000})
    assert short_of_labels.decision.report.gate("reward_alignment").verdict == "hold"
    assert review_hold(short_of_labels, home) is None and find_week_version(home.mlflow_uri, "2026-11-09") is None
    held = week_run(NEXT, "drifter")
    assert held.decision.decision == "hold"
    done = review_hold(held, home)
    assert done["approved_by"] == DEMO_REVIEWER
    assert done["version"] == canary_info(home.mlflow_uri).version == find_week_version(home.mlflow_uri, NEXT) == 2


def test_a_failure_mode_rise_is_flagged_without_blocking(home, instance, tmp_path):
    run_promotion(home, instance, WEEK, "better", tmp_path)
    result = run_promotion(home, instance, NEXT, "random", tmp_path)
    assert result.success
    check = _checks(result)["failure_modes_week_over_week"]
    assert not check.passed and check.severity == dg.AssetCheckSeverity.WARN
    assert check.metadata["previous_week"].value == WEEK
    assert set(check.metadata["rises"].value) == {"gave_up"}
    decision = latest_decision(instance, NEXT)
    assert [j.mode for j in decision.failure_mode_rises] == ["gave_up"]
    run = mlflow_client(home.mlflow_uri).get_run(decision.mlflow_run_id)
    assert run.data.tags["failure_mode_rises"] == "gave_up"
    assert run.data.metrics["failure_mode_rise/candidate/gave_up"] == pytest.approx(decision.failure_mode_rises[0].jump)
    first = _checks(run_promotion(home, instance, WEEK, "better", tmp_path))["failure_modes_week_over_week"]
    assert first.passed  # no decision the week before: nothing to compare with


def test_the_failure_mode_jump_is_the_gate_settings(home, instance, tmp_path, monkeypatch):
    # A deployment whose floor tolerates any rise; then a run that tightens it to the product's default.
    monkeypatch.setenv(FLOORS_ENV, str(write_floors(tmp_path / "floors.yaml", {"failure_mode_jump": 1.0}).source))
    run_promotion(home, instance, WEEK, "better", tmp_path)
    run_promotion(home, instance, NEXT, "random", tmp_path)
    assert latest_decision(instance, NEXT).failure_mode_rises == ()  # no share rises by more than 1.0
    run_promotion(home, instance, NEXT, "random", tmp_path, {"failure_mode_jump": 0.10})  # tighter than the floor
    assert [j.mode for j in latest_decision(instance, NEXT).failure_mode_rises] == ["gave_up"]


def test_a_run_config_may_tighten_a_gate(home, instance, tmp_path, monkeypatch):
    monkeypatch.delenv(FLOORS_ENV, raising=False)
    result = run_promotion(home, instance, WEEK, "better", tmp_path, {"calibration_min_margin": 0.5})
    assert result.success
    gate = _checks(result)["gate_calibration_improvement"]
    assert not gate.passed and gate.metadata["threshold"].value == 0.5
    decision = latest_decision(instance, WEEK)
    assert decision.decision == "reject" and decision.report.config.calibration_min_margin == 0.5
    floors = next(
        e.materialization.metadata["gate_floors"].value
        for e in result.get_asset_materialization_events()
        if e.asset_key == dg.AssetKey("promotion_gate")
    )
    assert floors["source"] == "the product's defaults" and floors["floors"]["calibration_min_margin"] == 0.0


def test_a_run_config_that_loosens_a_gate_fails_the_gate_before_any_decision(home, instance, tmp_path, monkeypatch):
    monkeypatch.delenv(FLOORS_ENV, raising=False)
    result = run_promotion(home, instance, WEEK, "identical", tmp_path, {"calibration_min_margin": -1.0})
    assert not result.success
    [failure] = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert failure.step_key == "promotion_gate"
    message = failure.event_specific_data.error.message
    assert "calibration_min_margin=-1.0 is looser than its floor 0.0" in message
    assert "a run may raise calibration_min_margin, never lower it" in message
    assert latest_decision(instance, WEEK) is None and find_week_version(home.mlflow_uri, WEEK) is None
    assert not _checks(result)  # no gate was evaluated


@pytest.mark.parametrize("where", ["variable", "instance"])
def test_the_deployments_floors_file_sets_what_a_run_may_ask_for(home, instance, tmp_path, monkeypatch, where):
    monkeypatch.delenv(FLOORS_ENV, raising=False)
    floors = {"calibration_min_margin": -1.0, "max_tool_drift": 0.01}
    if where == "variable":
        monkeypatch.setenv(FLOORS_ENV, str(write_floors(tmp_path / "floors.yaml", floors).source))
    else:
        write_floors(tmp_path / "unused.yaml", floors)
        write_floors(Path(instance.root_directory) / INSTANCE_FLOORS_FILE, floors)
    # What the floors allow goes through: an identical candidate passes calibration at margin -1.
    result = run_promotion(home, instance, WEEK, "identical", tmp_path, {"calibration_min_margin": -1.0})
    assert result.success and _checks(result)["gate_calibration_improvement"].passed
    # A setting the run does not name takes its floor, stricter here than the product's default ...
    assert latest_decision(instance, WEEK).report.config.max_tool_drift == 0.01
    # ... and asking for the product's default is loosening this deployment's gate.
    refused = run_promotion(home, instance, NEXT, "identical", tmp_path, {"max_tool_drift": 0.05})
    assert not refused.success and latest_decision(instance, NEXT) is None


def test_a_real_failure_still_fails_the_run_and_files_an_incident(home, instance, tmp_path):
    from assets.resources import HomeResource
    from orchestration.sensors import retrain_failure_incident

    # A base model folder that is not a model: registering the first champion is an error.
    result = run_promotion(home, instance, WEEK, "better", tmp_path, base_dir=tmp_path / "no-model")
    assert not result.success
    failure = next(e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE")
    context = dg.build_run_status_sensor_context(
        sensor_name="retrain_failure_incident",
        dagster_event=failure,
        dagster_instance=instance,
        dagster_run=instance.get_run_by_id(result.run_id),
    ).for_run_failure()
    retrain_failure_incident(context, home=HomeResource(root=str(home.root)))
    [incident] = list_incidents(home)
    assert incident["kind"] == "run_failure" and incident["evidence"]["run_id"] == result.run_id
    assert "first_champion" in incident["evidence"]["failed_steps"]


def test_the_gate_holds_on_the_pause_recorded_on_the_instance_until_a_resume_is_recorded_there(
    home, instance, tmp_path
):
    pauses = InstancePauseLog(instance)
    pause_promotions(pauses, "2026-11-12", "retail-agent/1", 0.2, 0.05, "incident.json")
    held = run_promotion(home, instance, WEEK, "better", tmp_path)
    gate = _checks(held)["gate_live_watch"]
    assert held.success and gate.metadata["verdict"].value == "hold"
    assert gate.metadata["detail"].value.startswith("live watch paused since 2026-11-12")
    assert "registered_model" not in _materialized(held)

    # `retrain resume`'s path records the resume on the same instance; the next run of the week promotes.
    resumed = resume_watch("bob", "read the day's transcripts", home)["resumed"]
    assert resumed["lifted_by"] == "bob" and active_pause(pauses) is None
    [latest, *_] = instance.fetch_observations(PAUSE_ASSET, limit=5).records
    assert latest.asset_observation.metadata["event"].value["event"] == "resume" and latest.run_id == ""
    again = run_promotion(home, instance, WEEK, "better", tmp_path)
    assert _checks(again)["gate_live_watch"].passed and "registered_model" in _materialized(again)
