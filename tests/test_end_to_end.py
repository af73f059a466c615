"""The real `weekly_retrain` job, end to end on the tiny model, through the home's Dagster instance.

Sizes are shrunk to CI size and the tiny model trains and is evaluated at curriculum level 1, as in
the demo; every threshold (the tool-call probe, every gate) and the reward are the product's.

1. At the product's settings, today's tiny model fails every GRPO rollout alike (reward -5, zero
   spread in every group), so the update has no gradient and changes no weight: the blocking
   `weights_changed` check fails the run, a real failure, and the failure sensor files an incident.
   Nothing is evaluated or registered.
2. The same week re-run with one training override, an entropy bonus (named below), moves the
   weights, so the candidate reaches the gates at their default thresholds. It does not beat the
   base model: the run succeeds with decision `reject`, only the first champion (the base model)
   is registered, no incident is filed, and the MLflow week run keeps every gate's evidence.

The promotion path itself (a promote, a hold and an approval, a failure-mode rise) is covered
without models in tests/test_promotion_path.py.
"""

from __future__ import annotations

import json
import tempfile
from datetime import date
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

WEEK = "2026-11-16"


def _product_settings() -> dict:
    """The demo's CI-sized run config without its one training override (the entropy bonus)."""
    from orchestration.demo import demo_run_config

    config = demo_run_config("ci")
    del config["ops"]["grpo_candidate"]["config"]["grpo_overrides"]
    return config


def _with_entropy_bonus() -> dict:
    from orchestration.demo import ENTROPY_BONUS, demo_run_config

    config = demo_run_config("ci")
    assert config["ops"]["grpo_candidate"]["config"]["grpo_overrides"] == ENTROPY_BONUS  # the only override
    assert config["ops"]["promotion_gate"]["config"] == {}  # the product's gates
    return config


@pytest.fixture(scope="module")
def week_runs(tmp_path_factory):
    import os

    from dataplane.home import Home
    from orchestration.runner import run_week
    from training.traffic.simulate import simulate

    root = tmp_path_factory.mktemp("e2e") / "home"
    old = {name: os.environ.get(name) for name in ("RETRAIN_HOME", "DAGSTER_HOME")}
    os.environ["RETRAIN_HOME"] = str(root)
    try:
        home = Home.from_env().ensure()
        simulate(
            days=7,
            per_day=40,
            seed=11,
            out_dir=str(home.landing),
            start=date(2026, 11, 16),
            label_share=0.6,
            n_users=80,
        )
        defaults = run_week(WEEK, run_config=_product_settings(), home=home)
        incident = _file_failure_incident(home, defaults.run_id)
        bonus = run_week(WEEK, run_config=_with_entropy_bonus(), home=home)  # the warm start is reused
        yield home, defaults, incident, bonus
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _file_failure_incident(home, run_id: str) -> list[dict]:
    """What the daemon does with a failed run: evaluate `retrain_failure_incident` on it."""
    import dagster as dg

    from assets.resources import HomeResource
    from orchestration.incidents import list_incidents
    from orchestration.sensors import retrain_failure_incident

    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        if run.is_success:
            return list_incidents(home)
        [failure] = [
            e.dagster_event
            for e in instance.all_logs(run_id)
            if e.dagster_event is not None and e.dagster_event.event_type_value == "PIPELINE_FAILURE"
        ]
        context = dg.build_run_status_sensor_context(
            sensor_name="retrain_failure_incident", dagster_event=failure, dagster_instance=instance, dagster_run=run
        ).for_run_failure()
        retrain_failure_incident(context, home=HomeResource(root=str(home.root)))
    return list_incidents(home)


def test_at_the_products_settings_a_training_without_signal_fails_loudly(week_runs):
    _, defaults, incidents, _ = week_runs
    assert not defaults.success and defaults.decision is None
    assert "grpo_candidate" in defaults.materialized  # trained, then its blocking check failed
    assert not {"calibration_report", "promotion_gate", "first_champion", "registered_model"} & set(
        defaults.materialized
    )
    [incident] = incidents  # filed before the second run: the registry was still empty
    assert incident["kind"] == "run_failure" and incident["evidence"]["run_id"] == defaults.run_id
    assert "grpo_candidate" in incident["evidence"]["failed_steps"]


def test_an_ordinary_week_at_default_gates_is_a_successful_rejection(week_runs):
    from evaluation.registry import champion_info, find_week_version
    from orchestration.incidents import list_incidents

    home, defaults, _, run = week_runs
    assert run.success, run
    assert run.decision is not None and run.decision.decision == "reject", run.decision
    assert run.decision.report.config.min_human_labels == 20  # the product's thresholds, untouched
    assert {"promotion_gate", "first_champion"} <= set(run.materialized)
    assert "registered_model" not in run.materialized
    assert find_week_version(home.mlflow_uri, WEEK) is None
    champion = champion_info(home.mlflow_uri)
    assert champion.version == 1 and champion.tags["role"] == "base"  # the first champion, nothing else
    assert [i["evidence"]["run_id"] for i in list_incidents(home)] == [defaults.run_id]  # none for the reject


def test_the_first_champion_is_the_base_model_with_its_shadow_estimate(week_runs):
    from evaluation.registry import mlflow_client

    home, _, _, run = week_runs
    base = mlflow_client(home.mlflow_uri).get_model_version("retail-agent", "1")
    assert base.tags["role"] == "base" and base.tags["base_of_week"] == WEEK and "week" not in base.tags
    # What the health sensor holds the base to while it serves: its own shadow success.
    shadow = run.decision.metrics["shadow"]["baseline"]["success_rate"]
    assert float(base.tags["shadow_success"]) == pytest.approx(shadow)
    assert base.source.endswith("/base_model")


def test_the_rejected_week_keeps_its_evidence_in_mlflow_and_dagster(week_runs):
    import dagster as dg

    from evaluation.registry import mlflow_client

    home, _, _, run = week_runs
    run_id = run.decision.mlflow_run_id
    client = mlflow_client(home.mlflow_uri)
    logged = client.get_run(run_id)
    assert logged.data.tags["gate_decision"] == "reject"
    assert logged.data.tags["gate_reason"] == run.decision.reason
    assert logged.data.tags["dagster_run_url"].endswith(f"/runs/{run.run_id}")  # MLflow -> Dagster
    assert "calibration/candidate/success_rate" in logged.data.metrics
    assert "gate/calibration_improvement/passed" in logged.data.metrics
    with tempfile.TemporaryDirectory() as tmp:
        report = json.loads(Path(client.download_artifacts(run_id, "gate_report.json", tmp)).read_text())
    assert report["decision"] == "reject"
    assert len(client.get_metric_history(run_id, "train/reward")) >= 1
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        stored = instance.get_run_by_id(run.run_id)
        assert stored is not None and stored.tags.get("dagster/partition") == WEEK
        assert stored.is_success
