"""The real `weekly_retrain` job, end to end on the tiny model, through the home's Dagster instance.

Two weeks and a re-run: week A has no champion, so its base model becomes the first one (v1), and
a permissive gate policy then promotes week A's candidate over it (champion v2, previous v1,
lineage tags, a complete MLflow week run); re-running week A registers nothing new; week B trains
on top of the champion and an impossible calibration margin rejects it: no version, champion
unchanged, and its MLflow run still holds the gate report. Stage sizes are shrunk to CI size; the SFT is too
short to teach tool calls, so the probe threshold is lowered (the probe itself still runs).
"""

from __future__ import annotations

import json
import tempfile
from datetime import date
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WEEK_A, WEEK_B = "2026-11-16", "2026-11-23"


def _config(**gates) -> dict:
    from orchestration.demo import demo_run_config

    return demo_run_config("ci", gates)


PERMISSIVE = dict(
    calibration_min_margin=-1.0,
    shadow_margin=-1.0,
    max_tool_drift=1.0,
    min_reward_alignment=0.0,
    violation_tolerance=1.0,
    hacking_flat_tolerance=-1.0,
)


@pytest.fixture(scope="module")
def week_runs(tmp_path_factory):
    import os

    from dataplane.home import Home
    from orchestration.runner import run_week
    from training.traffic.simulate import simulate

    root = tmp_path_factory.mktemp("e2e") / "home"
    old = os.environ.get("RETRAIN_HOME")
    os.environ["RETRAIN_HOME"] = str(root)
    try:
        home = Home.from_env().ensure()
        simulate(
            days=14,
            per_day=30,
            seed=11,
            out_dir=str(home.landing),
            start=date(2026, 11, 16),
            label_share=0.6,
            n_users=80,
        )
        runs = {"a": run_week(WEEK_A, run_config=_config(**PERMISSIVE), home=home)}
        runs["a_again"] = run_week(WEEK_A, run_config=_config(**PERMISSIVE), home=home)
        runs["b"] = run_week(WEEK_B, run_config=_config(calibration_min_margin=1.0), home=home)
        yield home, runs
    finally:
        if old is None:
            os.environ.pop("RETRAIN_HOME", None)
        else:
            os.environ["RETRAIN_HOME"] = old


def test_promoted_week_registers_the_champion_with_lineage(week_runs):
    from evaluation.registry import champion_info, find_week_version

    home, runs = week_runs
    assert runs["a"].success, runs["a"]
    assert {"first_champion", "registered_model"} <= set(runs["a"].materialized)
    champion = champion_info(home.mlflow_uri)
    assert champion is not None and champion.version == find_week_version(home.mlflow_uri, WEEK_A) == 2
    assert champion.previous_version == 1  # the base model, registered first, is the rollback target
    request = json.loads((home.root / "runs" / WEEK_A / "promotion_request.json").read_text())
    assert request["report"]["decision"] == "promote"
    assert champion.tags["window_hash"] == request["lineage"]["window_hash"]
    assert champion.tags["gate_decision"] == "promote" and champion.tags["baseline_kind"] == "base_model"


def test_the_first_champion_was_the_base_model_with_its_shadow_estimate(week_runs):
    from evaluation.registry import mlflow_client

    home, runs = week_runs
    base = mlflow_client(home.mlflow_uri).get_model_version("retail-agent", "1")
    assert base.tags["role"] == "base" and base.tags["base_of_week"] == WEEK_A and "week" not in base.tags
    shadow = json.loads((home.root / "runs" / WEEK_A / "shadow_report.json").read_text())
    # What the health sensor holds the base to while it serves: its own shadow success.
    assert float(base.tags["shadow_success"]) == pytest.approx(shadow["baseline"]["summary"]["success_rate"])
    assert base.source.endswith("/base_model")


def test_rerunning_a_week_never_registers_twice(week_runs):
    from evaluation.registry import mlflow_client

    home, runs = week_runs
    assert runs["a_again"].success
    versions = mlflow_client(home.mlflow_uri).search_model_versions("name='retail-agent'")
    assert [int(v.version) for v in versions if v.tags.get("week") == WEEK_A] == [2]
    assert [int(v.version) for v in versions if v.tags.get("role") == "base"] == [1]


def test_rejected_week_leaves_the_champion_and_keeps_its_evidence(week_runs):
    from evaluation.registry import champion_info, find_week_version, mlflow_client
    from evaluation.run_log import find_week_runs

    home, runs = week_runs
    assert not runs["b"].success
    assert "promotion_gate" in runs["b"].materialized and "registered_model" not in runs["b"].materialized
    assert find_week_version(home.mlflow_uri, WEEK_B) is None
    assert champion_info(home.mlflow_uri).version == 2
    request = json.loads((home.root / "runs" / WEEK_B / "promotion_request.json").read_text())
    assert request["report"]["decision"] == "reject"
    assert request["report"]["baseline_kind"] == "champion"  # week B started from the champion
    [run_id] = find_week_runs(home.mlflow_uri, WEEK_B)
    client = mlflow_client(home.mlflow_uri)
    run = client.get_run(run_id)
    assert run.data.tags["gate_decision"] == "reject"
    assert run.data.tags["dagster_run_url"].endswith(f"/runs/{runs['b'].run_id}")  # MLflow -> Dagster
    assert "calibration/candidate/success_rate" in run.data.metrics
    assert "gate/calibration_improvement/passed" in run.data.metrics
    with tempfile.TemporaryDirectory() as tmp:
        report = json.loads(Path(client.download_artifacts(run_id, "gate_report.json", tmp)).read_text())
    assert report["decision"] == "reject"
    assert len(client.get_metric_history(run_id, "train/reward")) >= 1


def test_runs_are_in_the_dagster_instance(week_runs):
    import dagster as dg

    home, runs = week_runs
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        for run in runs.values():
            stored = instance.get_run_by_id(run.run_id)
            assert stored is not None and stored.tags.get("dagster/partition") == run.week
