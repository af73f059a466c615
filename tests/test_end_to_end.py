"""The real `weekly_retrain` job, end to end on the tiny model, through the home's Dagster instance.

Sizes are shrunk to CI size and the tiny model trains and is evaluated at curriculum level 1, as in
the demo; every setting, threshold (the tool-call probe, every gate) and the reward are the product's.

The window holds a week of the legacy rules agent's traffic and a week the shipped agent served
(level 1, as in the demo). The update's supervised step on the shipped agent's verified successes
moves the weights; GRPO then may see no reward spread in CI's two groups of rollouts, and
`weights_changed` (judged against GRPO's own start) then says so as a warning (no learning signal,
not a broken run). The week goes on, and the
gates judge the candidate at their default thresholds: not better than the base model. The run
succeeds with decision `reject`, only the first champion (the base model) is registered, no
incident is filed, and the MLflow week run keeps every gate's evidence.

The promotion path itself (a promote, a hold and an approval, a failure-mode rise) is covered
without models in tests/test_promotion_path.py.
"""

from __future__ import annotations

import json
import tempfile
from datetime import date
from pathlib import Path

import pytest

from orchestration import environment

pytestmark = pytest.mark.slow

WEEK = "2026-11-16"


def _product_settings() -> dict:
    """The demo's CI-sized run config: stage sizes only, no training or gate override."""
    from orchestration.cli.demo import demo_run_config

    config = demo_run_config("ci")
    assert "grpo_overrides" not in config["ops"]["grpo_candidate"]["config"]  # the product's trainer
    assert config["ops"]["promotion_gate"]["config"] == {}  # the product's gates
    return config


@pytest.fixture(scope="module")
def week_runs(tmp_path_factory):
    import os

    from domains.retail.traffic.simulate import simulate
    from orchestration.cli.demo import serving_policy
    from orchestration.runner import run_week
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    root = tmp_path_factory.mktemp("e2e") / "home"
    old = {name: os.environ.get(name) for name in ("RETRAIN_HOME", "DAGSTER_HOME")}
    os.environ["RETRAIN_HOME"] = str(root)
    try:
        home = environment.home().ensure()
        simulate(
            days=7,
            per_day=40,
            seed=11,
            out_dir=str(home.landing),
            start=date(2026, 11, 16),
            label_share=0.6,
            n_users=80,
        )
        # ...and the shipped agent's own week beside the legacy agent's, as the demo serves it: the
        # supervised step learns only from conversations the registered model served.
        simulate(
            days=7,
            per_day=12,
            seed=12,
            out_dir=str(home.landing / "served"),
            start=date(2026, 11, 16),
            policy=serving_policy(str(SHIPPED_AGENT_DIR)),
            level=1,
            policy_version="retail-agent/1",
            label_share=0.6,
            n_users=80,
        )
        run = run_week(WEEK, run_config=_product_settings(), home=home)
        yield home, run
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_the_week_trains_the_shipped_agent_and_its_update_moves_the_weights(week_runs):
    """policy_base starts from the shipped agent, which acts. The update's supervised step imitates
    the window's verified successes and moves the weights; GRPO then starts from that model. With
    CI's two groups of rollouts GRPO may see no reward spread (every rollout of a group alike):
    its `weights_changed` check then warns, saying so, and the week goes on to the gates."""
    import json

    import dagster as dg

    from assets.training import weights_digest
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    home, run = week_runs
    assert "grpo_candidate" in run.materialized and run.success
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        checks = {
            e.dagster_event.event_specific_data.check_name: e.dagster_event.event_specific_data
            for e in instance.all_logs(run.run_id)
            if e.dagster_event is not None and e.dagster_event.event_type_value == "ASSET_CHECK_EVALUATION"
        }
    [summary] = list(home.week_dir(WEEK).glob("run-*/episodes/episode_update.json"))
    step = json.loads(summary.read_text())
    assert step["skipped"] is None and step["episodes"] >= 16 and step["steps"] == 20
    moved = checks["weights_changed"]
    assert moved.metadata["base"].value == step["model_path"]  # GRPO's start: the supervised step's model
    assert weights_digest(moved.metadata["candidate"].value) != weights_digest(str(SHIPPED_AGENT_DIR))
    no_signal = moved.metadata["zero_std_fraction"].value == 1.0
    assert moved.passed or (no_signal and moved.severity == dg.AssetCheckSeverity.WARN), moved.metadata


def test_an_ordinary_week_at_default_gates_is_a_successful_rejection(week_runs):
    from dataplane.incidents import list_incidents
    from tracking.registry import champion_info, find_week_version

    home, run = week_runs
    assert run.success, run
    assert run.decision is not None and run.decision.decision == "reject", run.decision
    assert run.decision.report.config.min_human_labels == 200  # the product's thresholds, untouched
    assert {"promotion_gate", "first_champion"} <= set(run.materialized)
    assert "registered_model" not in run.materialized
    assert find_week_version(home.mlflow_uri, WEEK) is None
    champion = champion_info(home.mlflow_uri)
    assert champion.version == 1 and champion.tags["role"] == "base"  # the first champion, nothing else
    assert list_incidents(home) == []  # a rejection is an ordinary week


def test_the_first_champion_is_the_base_model_with_its_shadow_estimate(week_runs):
    from tracking.registry import mlflow_client

    home, run = week_runs
    base = mlflow_client(home.mlflow_uri).get_model_version("retail-agent", "1")
    assert base.tags["role"] == "base" and base.tags["base_of_week"] == WEEK and "week" not in base.tags
    # What the health sensor holds the base to while it serves: its own shadow success.
    shadow = run.decision.metrics["shadow"]["baseline"]["success_rate"]
    assert float(base.tags["shadow_success"]) == pytest.approx(shadow)
    assert base.source.endswith("/base_model")


def test_the_rejected_week_keeps_its_evidence_in_mlflow_and_dagster(week_runs):
    import dagster as dg

    from tracking.registry import mlflow_client

    home, run = week_runs
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
    # Both training steps and the week's mix are on the run, with their data counts.
    for key in ("sft/episodes", "sft/candidates", "sft/steps", "grpo/tasks", "mix/level/1"):
        assert key in logged.data.metrics, key
    assert {"episode_update.json", "curriculum_weights.json"} <= {a.path for a in client.list_artifacts(run_id)}
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        stored = instance.get_run_by_id(run.run_id)
        assert stored is not None and stored.tags.get("dagster/partition") == WEEK
        assert stored.is_success
        [candidate] = [
            e.dagster_event.event_specific_data.materialization
            for e in instance.all_logs(run.run_id)
            if e.dagster_event is not None
            and e.dagster_event.event_type_value == "ASSET_MATERIALIZATION"
            and e.dagster_event.asset_key == dg.AssetKey("grpo_candidate")
        ]
    shown = candidate.metadata
    assert shown["sft_episodes"].value == logged.data.metrics["sft/episodes"]
    assert {"sft_steps", "sft_skipped", "curriculum_weights", "curriculum_evidence"} <= set(shown)
