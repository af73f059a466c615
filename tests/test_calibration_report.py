"""`calibration_report` and the week's MLflow run through Dagster: a week is judged on one pinned
calibration version (candidate and baseline alike, a backfill too), on that week's labels, and the
run logs the version as a dataset input and the alignment as a weekly series.

The calibration test runs the real data assets and `calibration_report` on the shipped tiny agent
(candidate and baseline both, a few short rollouts); only `policy_base` and `grpo_candidate` are
stand-ins naming that model, since training is not what is tested here.
"""

# No `from __future__ import annotations`: Dagster reads the stand-ins' types live.

import json
from datetime import date

import dagster as dg
import pytest

from assets import data
from assets.evaluation import calibration_report
from assets.handoffs import GRPOCandidate, PolicyBase
from assets.partitions import weekly_partitions
from assets.resources import Curriculum
from domains.retail.traffic.simulate import simulate
from evaluation.calibration_versions import DEFAULT_REFRESH_AFTER
from orchestration.cli import main
from orchestration.environment import default_resources
from tests.helpers_promotion import run_promotion
from tracking.registry import mlflow_client
from tracking.run_log import find_week_runs, week_step
from training.tiny.manifest import SHIPPED_AGENT_DIR

W1, W2 = "2026-11-09", "2026-11-16"  # Mondays
# The stand-in candidate has no MLflow run to link traces to (tests/test_traces.py traces a week).
SMALL = {"trials": 1, "max_tasks": 2, "max_turns": 2, "max_new_tokens": 16, "log_traces": False}


@dg.asset(name="policy_base", partitions_def=weekly_partitions)
def shipped_base():
    return PolicyBase(str(SHIPPED_AGENT_DIR), "base_model")


@dg.asset(name="grpo_candidate", partitions_def=weekly_partitions)
def shipped_candidate():
    return GRPOCandidate(str(SHIPPED_AGENT_DIR), "not-logged", final_step=0, reward_weights={})


def _calibrate(week: str):
    result = dg.materialize(
        [data.raw_interactions, data.interaction_window, data.window_splits, shipped_base, shipped_candidate]
        + [calibration_report],
        partition_key=week,
        resources={**default_resources(), "curriculum": Curriculum(levels={"1": 1.0})},
        run_config={"ops": {"calibration_report": {"config": SMALL}}},
        raise_on_error=False,
    )
    assert result.success
    (materialization,) = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.asset_key.path == ["calibration_report"]
    ]
    return result.output_for_node("calibration_report"), {k: v.value for k, v in materialization.metadata.items()}


def test_a_week_never_compares_two_calibration_versions(home, capsys):
    simulate(days=14, per_day=20, seed=2, out_dir=str(home.landing), start=date.fromisoformat(W1), label_share=0.6)
    first, first_meta = _calibrate(W1)
    assert first.version == "v1" and first_meta["calibration_pin"] == "pinned by this run (frozen now)"

    assert main(["calibration", "refresh", "--json"]) == 0  # the second week's labelled traffic is new
    assert json.loads(capsys.readouterr().out)["version"] == "v2"
    second, second_meta = _calibrate(W2)
    assert second.version == "v2" and second_meta["calibration_pin"] == "pinned by this run"

    backfill, backfill_meta = _calibrate(W1)  # re-running the first week after v2 exists
    assert (backfill.version, backfill.set_hash) == (first.version, first.set_hash)
    assert backfill_meta["calibration_pin"] == "pinned by an earlier run of this week"
    assert second.set_hash != first.set_hash

    for report in (first, second, backfill):
        cand, base = report.pair.candidate, report.pair.baseline
        assert cand.keys == base.keys and cand.keys  # the same records, trial for trial
        assert {key.split("#")[0] for key in cand.keys} <= set(report.interaction_ids)
        assert report.rows == len(report.interaction_ids)

    # Alignment is the week's own labels, not the calibration version's.
    assert (first.alignment["labels_week"], second.alignment["labels_week"]) == (W1, W2)
    assert first_meta["labels_week"] == W1 and second_meta["human_labels"] == second.alignment["n"] > 0
    assert len(second.proxy_rewards) == len(second.human_success) == second.alignment["n"]
    assert backfill.alignment == first.alignment


def test_the_week_run_logs_the_calibration_version_and_a_weekly_alignment_series(home, tmp_path):
    with dg.DagsterInstance.ephemeral() as instance:
        for week in (W1, W2):
            assert run_promotion(home, instance, week, "better", tmp_path).success
    client = mlflow_client(home.mlflow_uri)
    steps = []
    for week in (W1, W2):
        (run_id,) = find_week_runs(home.mlflow_uri, week)
        run = client.get_run(run_id)
        (auc,) = client.get_metric_history(run_id, "alignment/auc")
        assert auc.step == week_step(week) and auc.value == pytest.approx(run.data.metrics["alignment/auc"])
        steps.append(auc.step)
        assert client.get_metric_history(run_id, "alignment/labels")[0].value == 200
        inputs = {i.dataset.name: i for i in run.inputs.dataset_inputs}
        assert set(inputs) == {f"window-{week}", "calibration-v1"}
        calibration = inputs["calibration-v1"]
        assert calibration.dataset.digest == ("cd" * 32)[:32]
        assert json.loads(calibration.dataset.source)["tags"]["set_hash"] == "cd" * 32
        assert json.loads(calibration.dataset.profile)["num_rows"] == 200
        assert {t.key: t.value for t in calibration.tags}["mlflow.data.context"] == "calibration"
        assert run.data.tags["calibration_version"] == "v1" and run.data.tags["alignment_labels_week"] == week
    assert steps[1] == steps[0] + 1  # consecutive weeks, consecutive steps


def test_the_refresh_threshold_is_calibration_report_config_only():
    from orchestration.cli.demo import demo_run_config
    from orchestration.definitions import defs

    job = defs.resolve_job_def("weekly_retrain")
    config = demo_run_config("ci")
    config["ops"]["calibration_report"]["config"]["calibration_refresh_after"] = 10
    resolved = dg.validate_run_config(job, config)["ops"]["calibration_report"]["config"]
    assert resolved["calibration_refresh_after"] == 10
    del config["ops"]["calibration_report"]["config"]["calibration_refresh_after"]
    assert dg.validate_run_config(job, config)["ops"]["calibration_report"]["config"]["calibration_refresh_after"] == (
        DEFAULT_REFRESH_AFTER
    )
    config["ops"]["shadow_report"]["config"]["calibration_refresh_after"] = 10
    with pytest.raises(dg.DagsterInvalidConfigError, match="calibration_refresh_after"):
        dg.validate_run_config(job, config)
