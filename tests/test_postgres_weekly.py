"""`weekly_retrain` on the production services: a Dagster instance on PostgreSQL (deploy/dagster.yaml)
with its daemon, and an `mlflow server` whose backend store is PostgreSQL.

Two weeks are launched back to back with `dagster job launch` while the first still runs: the run
queue holds the second until the first has ended (one weekly retrain at a time), then both train,
evaluate, gate and register in the tracking server. Runs execute in process inside their run
worker: the default multiprocess executor would start one Python process per step (each importing
torch and TRL) and triple the time on two cores, without changing what the queue or the storage
do. Stage sizes are the end-to-end test's CI sizes.
"""

from __future__ import annotations

import json
from datetime import date

import pytest

from tests.helpers_postgres import (
    ci_run_config,
    deployment,
    fresh_database,
    launched_run,
    mlflow_server,
    query,
    require_postgres,
    wait_for,
)

pytestmark = [pytest.mark.postgres, pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1500)]

WEEK_A, WEEK_B = "2026-11-16", "2026-11-23"
RUN_BOUND_S = 1200  # both weeks, one after the other, on two shared cores


def event_time(instance, run_id: str, event_type) -> float:
    [record] = instance.get_records_for_run(run_id, of_type=event_type).records
    return record.timestamp


@pytest.fixture(scope="module")
def two_weeks(tmp_path_factory):
    import dagster as dg

    from dataplane.home import Home
    from evaluation.registry import champion_info, find_base_version, find_week_version
    from training.traffic.simulate import simulate

    require_postgres()
    tmp = tmp_path_factory.mktemp("pg-weekly")
    home = Home.from_env(str(tmp / "home")).ensure()
    simulate(
        days=14, per_day=30, seed=11, out_dir=str(home.landing), start=date(2026, 11, 16), label_share=0.6, n_users=80
    )
    config = ci_run_config()
    with (
        fresh_database("retrain_mlflow") as mlflow_db,
        mlflow_server(mlflow_db, tmp / "mlflow-artifacts", tmp / "logs") as uri,
        deployment(tmp, home.root, {"MLFLOW_TRACKING_URI": uri}) as deploy,
    ):
        # Week A is submitted first, so it is first in the queue; week B is submitted while A runs.
        for tag, week in (("a", WEEK_A), ("b", WEEK_B)):
            launcher = deploy.launch(week, config, tag)
            assert launcher.wait(timeout=300) == 0, (deploy.log_dir / f"launch-{tag}.log").read_text()[-3000:]
        with deploy.instance() as instance:

            def finished():
                runs = [launched_run(instance, tag) for tag in ("a", "b")]
                return runs if all(r is not None and r.dagster_run.is_finished for r in runs) else None

            a, b = wait_for(
                finished,
                RUN_BOUND_S,
                "both weekly runs finished",
                interval=5,
                on_timeout=lambda: (deploy.log_dir / "daemon.log").read_text()[-3000:],
            )
            times = {
                "a_success": event_time(instance, a.dagster_run.run_id, dg.DagsterEventType.RUN_SUCCESS),
                "b_enqueued": event_time(instance, b.dagster_run.run_id, dg.DagsterEventType.RUN_ENQUEUED),
                "b_starting": event_time(instance, b.dagster_run.run_id, dg.DagsterEventType.RUN_STARTING),
            }
            materialized = {
                run.dagster_run.run_id: sorted(
                    {
                        r.asset_key.to_user_string()
                        for r in instance.get_records_for_run(
                            run.dagster_run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                        ).records
                    }
                )
                for run in (a, b)
            }
        yield {
            "a": a,
            "b": b,
            "times": times,
            "materialized": materialized,
            "champion": champion_info(uri),
            "versions": {
                "base": find_base_version(uri),
                WEEK_A: find_week_version(uri, WEEK_A),
                WEEK_B: find_week_version(uri, WEEK_B),
            },
            "dagster_rows": dict(query(deploy.db, "select run_id, status from runs")),
            "mlflow_aliases": sorted(query(mlflow_db, "select alias, version from registered_model_aliases")),
            "mlflow_versions": query(mlflow_db, "select count(*) from model_versions")[0][0],
            "home": home,
        }


def test_both_weeks_train_gate_and_register_in_the_postgres_backed_mlflow_server(two_weeks):
    a, b = two_weeks["a"], two_weeks["b"]
    for run in (a, b):
        assert run.dagster_run.status.value == "SUCCESS", run.dagster_run
        assert {"grpo_candidate", "promotion_gate", "registered_model"} <= set(
            two_weeks["materialized"][run.dagster_run.run_id]
        )
    versions = two_weeks["versions"]
    assert versions["base"][0] == 1 and versions[WEEK_A] == 2 and versions[WEEK_B] == 3
    champion = two_weeks["champion"]
    assert (champion.version, champion.previous_version, champion.week) == (3, 2, WEEK_B)
    # The registry lives in PostgreSQL (read here straight from the server's database).
    assert two_weeks["mlflow_aliases"] == [("champion", 3), ("previous_champion", 2)]
    assert two_weeks["mlflow_versions"] == 3
    request = json.loads((two_weeks["home"].root / "runs" / WEEK_B / "promotion_request.json").read_text())
    assert request["report"]["decision"] == "promote" and request["report"]["baseline_kind"] == "champion"


def test_the_run_queue_holds_the_second_week_until_the_first_has_ended(two_weeks):
    a, b = two_weeks["a"], two_weeks["b"]
    times = two_weeks["times"]
    assert times["b_enqueued"] < times["a_success"]  # B was queued while A was running
    assert times["b_starting"] >= times["a_success"]  # and launched only once A had ended
    assert b.start_time >= a.end_time
    # Both runs are in the instance's PostgreSQL run storage.
    rows = two_weeks["dagster_rows"]
    assert rows[a.dagster_run.run_id] == rows[b.dagster_run.run_id] == "SUCCESS"
