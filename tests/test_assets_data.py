"""Data assets through dagster.materialize on a temporary home: window, checks, blocking, CLI."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import date

import dagster as dg
import pytest

from assets import data, training
from assets.handoffs import ValidatedWindow, WindowSplits
from orchestration.environment import default_resources

WEEK = "2026-11-16"  # a Monday; the simulated traffic below covers it and the week before


@pytest.fixture()
def landed(home):
    from domains.retail.traffic.simulate import simulate

    simulate(days=14, per_day=12, seed=5, out_dir=str(home.landing), start=date(2026, 11, 9), n_users=60)
    return home


def _materialize(assets, run_config=None):
    return dg.materialize(
        assets, partition_key=WEEK, resources=default_resources(), run_config=run_config or {}, raise_on_error=False
    )


def _checks(result) -> dict[str, bool]:
    return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}


def test_data_assets_cut_a_reproducible_window(landed):
    first = _materialize([data.raw_interactions, data.interaction_window, data.window_splits])
    assert first.success
    checks = _checks(first)
    assert checks == {
        "no_row_lost": True,
        "window_gx_suite": True,
        "window_min_rows": True,
        "window_quarantine_rate": True,
        "window_no_pii": True,
        "no_customer_in_two_splits": True,
    }
    window = first.output_for_node("interaction_window")
    assert isinstance(window, ValidatedWindow)
    # Every simulated day (11-09 .. 11-22) ended before the partition's end, Monday 11-23.
    assert window.rows == 14 * 12
    assert window.ended_at_max < "2026-11-23"
    assert window.validation_success is True
    assert window.failed_expectations == ()
    splits = first.output_for_node("window_splits")
    assert isinstance(splits, WindowSplits)
    assert sum(v for k, v in splits.counts.items() if k.endswith("_rows")) == window.rows
    assert (splits.week, splits.window_hash, splits.fractions) == (window.week, window.content_hash, (0.8, 0.1, 0.1))

    again = _materialize([data.raw_interactions, data.interaction_window, data.window_splits])
    assert again.success
    assert again.output_for_node("raw_interactions").ingest.accepted == 0  # nothing new: a no-op
    assert again.output_for_node("interaction_window").content_hash == window.content_hash


def test_a_failing_window_never_reaches_training(landed):
    """min_gold_share above what the traffic carries fails the GX suite, and policy_base never runs."""
    config = {"ops": {"interaction_window": {"config": {"min_gold_share": 0.999}}}}
    result = _materialize(
        [data.raw_interactions, data.interaction_window, data.window_splits, training.policy_base], config
    )
    assert not result.success
    checks = _checks(result)
    assert checks["window_gx_suite"] is False
    failing = [e for e in result.get_asset_check_evaluations() if e.check_name == "window_gx_suite"][0]
    failed = failing.metadata["failing_expectations"].value
    assert [f["expectation"] for f in failed] == ["min_gold_share"]
    assert failed[0]["observed"] < 0.999
    materialized = {e.asset_key.to_user_string() for e in result.get_asset_materialization_events()}
    assert "policy_base" not in materialized and "window_splits" not in materialized


def _retrain(*args, env_home) -> subprocess.CompletedProcess:
    import os

    env = {**os.environ, "RETRAIN_HOME": str(env_home)}
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def test_cli_ingest_reports_counts_and_exit_codes(landed, tmp_path):
    done = _retrain("ingest", str(landed.landing), "--json", env_home=landed.root)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["read"] == summary["accepted"] + summary["duplicates"] + summary["quarantined"] == 14 * 12
    again = json.loads(_retrain("ingest", str(landed.landing), "--json", env_home=landed.root).stdout)
    assert again["accepted"] == 0 and again["files_skipped"] == 14

    missing = _retrain("ingest", str(tmp_path / "nope.jsonl"), env_home=landed.root)
    assert missing.returncode == 2
    assert "nope.jsonl" in missing.stderr and "Traceback" not in missing.stderr


def test_the_week_folder_is_known_in_one_place(home):
    from assets.weekdata import week_dir
    from dataplane.home import HomePathError

    assert home.week_dir("2026-11-16") == home.root / "runs" / "2026-11-16"
    assert not home.week_dir("2026-11-16").exists()  # naming a folder creates nothing
    assert week_dir(home, "2026-11-16") == home.week_dir("2026-11-16") and home.week_dir("2026-11-16").is_dir()
    with pytest.raises(HomePathError, match="escapes the home"):
        home.week_dir("../../elsewhere")


def test_cli_and_dagster_read_the_same_mlflow_settings(home, monkeypatch):
    from assets.resources import MLflowTracking
    from orchestration.runner import mlflow_target

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("RETRAIN_MODEL_NAME", raising=False)
    assert mlflow_target(home) == (home.mlflow_uri, "retail-agent")
    assert mlflow_target(home, "airline") == (home.mlflow_uri, "airline-agent")  # each domain its own model
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.internal:5000")
    monkeypatch.setenv("RETRAIN_MODEL_NAME", "shop-agent")
    # Outside a run the resource holds an EnvVar, whose string is the variable's name: the value is read.
    assert mlflow_target(home) == ("http://mlflow.internal:5000", "shop-agent")
    resources = default_resources()
    assert isinstance(resources["mlflow"], MLflowTracking) and resources["mlflow"].model_name == "shop-agent"
    assert resources["mlflow"].uri(home) == "http://mlflow.internal:5000"


def test_a_bad_grpo_setting_fails_before_any_compute_or_mlflow_run(landed):
    """The asset validates the run config it builds, so a bad setting never starts the trainer."""
    from assets.handoffs import PolicyBase
    from assets.partitions import weekly_partitions
    from tracking.registry import mlflow_client

    @dg.asset(name="policy_base", partitions_def=weekly_partitions)
    def stub_policy_base():
        return PolicyBase(path=str(landed.models / "none"), source="base_model")

    config = {"ops": {"grpo_candidate": {"config": {"num_generations": 3, "per_device_train_batch_size": 4}}}}
    result = _materialize(
        [data.raw_interactions, data.interaction_window, data.window_splits, stub_policy_base, training.grpo_candidate],
        config,
    )
    assert not result.success
    [failure] = result.get_step_failure_events()
    assert failure.step_key == "grpo_candidate"
    description = failure.step_failure_data.user_failure_data.description
    assert "generations_do_not_divide_batch" in description and "'num_generations'" in description
    assert not list(landed.week_dir(WEEK).glob("run-*/grpo_config.json"))
    assert mlflow_client(landed.mlflow_uri).search_experiments(filter_string="name != 'Default'") == []
