"""`weekly_retrain` on the production services: a Dagster instance on PostgreSQL (deploy/dagster.yaml)
with its daemon, and an `mlflow server` (deploy/mlflow-server.sh) whose backend store is PostgreSQL.

One deployment, one scenario, three tests reading it. Two weeks are submitted with `dagster job
launch` while the first still runs: the run queue holds week B until week A has ended (one weekly
retrain at a time). Week A trains, evaluates, gates and registers in the tracking server. Once
week B's out-of-process trainer (`python -m training.grpo`, launched through Pipes) has written a
complete checkpoint, B's run worker and everything under it are killed with SIGKILL, as losing
the node would. The code server that spawned the worker sees it die and marks the run failed; the
daemon's run retries (crashes only) re-run it from the failed step under the same root run, so the
trainer resumes from the checkpoint, and week B registers too.

Runs execute in process inside their run worker: the default multiprocess executor would start a
Python process per step (each importing torch and TRL) and triple the time on two cores, without
changing what the queue, the storage or the crash handling do. Stage sizes are the end-to-end
test's CI sizes; the scenario shares one deployment because a weekly run is the expensive part.
"""

from __future__ import annotations

import json
import signal
from datetime import date

import psutil
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
B_STEPS = 6  # enough steps that the kill lands after the first checkpoint and before the last
RUN_BOUND_S = 900


def event_time(instance, run_id: str, event_type) -> float:
    [record] = instance.get_records_for_run(run_id, of_type=event_type).records
    return record.timestamp


def worker_pid(instance, run_id: str) -> int | None:
    """The run worker's pid, from the engine event its process logs when it starts."""
    import dagster as dg

    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT).records:
        event = record.event_log_entry.dagster_event
        pid = event.engine_event_data.metadata.get("pid") if event and event.engine_event_data else None
        if pid is not None and "Started process for run" in (event.message or ""):
            return int(pid.value)
    return None


def complete_steps(home, week: str) -> list[int]:
    """Global steps of the week's complete checkpoints (the trainer writes trainer_state.json last)."""
    states = (home.root / "runs" / week).glob("run-*/grpo/checkpoint-*/trainer_state.json")
    return sorted(json.loads(path.read_text())["global_step"] for path in states)


def kill_run_worker(instance, run_id: str) -> list[str]:
    """SIGKILL the run worker and every process under it; the command lines of those killed."""
    pid = worker_pid(instance, run_id)
    assert pid is not None, f"run {run_id} logged no 'Started process for run' engine event"
    worker = psutil.Process(pid)
    processes = [worker, *worker.children(recursive=True)]
    killed = [" ".join(p.cmdline()) for p in processes]
    for process in processes:
        process.send_signal(signal.SIGKILL)
    return killed


def run_failures(instance, run_id: str) -> list[str]:
    """The messages of the run's failed steps and failed checks, as its event log holds them."""
    import dagster as dg

    failed = []
    for record in instance.get_records_for_run(run_id).records:
        event = record.event_log_entry.dagster_event
        if event is None:
            continue
        if event.event_type == dg.DagsterEventType.STEP_FAILURE:
            failed.append(f"{event.step_key}: {event.message}")
        elif event.event_type == dg.DagsterEventType.ASSET_CHECK_EVALUATION and not event.event_specific_data.passed:
            check = event.event_specific_data
            failed.append(f"check {check.check_name}: {dict((k, v.value) for k, v in check.metadata.items())}")
    return failed


def materialized(instance, run_id: str) -> set[str]:
    import dagster as dg

    records = instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
    return {r.asset_key.to_user_string() for r in records}


def grpo_metadata(instance, run_id: str) -> dict:
    import dagster as dg

    [record] = [
        r
        for r in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION).records
        if r.asset_key == dg.AssetKey("grpo_candidate")
    ]
    return {k: v.value for k, v in record.event_log_entry.dagster_event.materialization.metadata.items()}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory):
    import dagster as dg

    from assets.decisions import latest_decision
    from dataplane.home import Home
    from domains.retail.traffic.simulate import simulate
    from tracking.registry import champion_info, find_base_version, find_week_version

    require_postgres()
    tmp = tmp_path_factory.mktemp("pg-weekly")
    home = Home.at(str(tmp / "home")).ensure()
    simulate(
        days=14, per_day=30, seed=11, out_dir=str(home.landing), start=date(2026, 11, 16), label_share=0.6, n_users=80
    )
    with (
        fresh_database("retrain_mlflow") as mlflow_db,
        mlflow_server(mlflow_db, tmp / "mlflow-artifacts", tmp / "logs") as uri,
        deployment(tmp, home.root, {"MLFLOW_TRACKING_URI": uri}) as deploy,
    ):
        daemon_log = lambda: (deploy.log_dir / "daemon.log").read_text()[-3000:]  # noqa: E731
        # Week A is submitted first, so it is first in the queue; week B while A runs.
        for tag, week, config in (
            ("a", WEEK_A, ci_run_config()),
            ("b", WEEK_B, ci_run_config({"max_steps": B_STEPS, "save_steps": 1})),
        ):
            launcher = deploy.launch(week, config, tag)
            assert launcher.wait(timeout=300) == 0, (deploy.log_dir / f"launch-{tag}.log").read_text()[-3000:]
        with deploy.instance() as instance:

            def first_checkpoint():
                # A week that ended before week B checkpointed (a failed blocking check, a crash)
                # means the checkpoint will never come: say so now rather than after the bound.
                for tag in ("a", "b"):
                    record = launched_run(instance, tag)
                    if record is not None and record.dagster_run.status == dg.DagsterRunStatus.FAILURE:
                        raise AssertionError(
                            f"week {tag.upper()} failed before week B's first checkpoint: "
                            + "; ".join(run_failures(instance, record.dagster_run.run_id))
                            + f"\n{daemon_log()}"
                        )
                return complete_steps(home, WEEK_B)

            wait_for(first_checkpoint, RUN_BOUND_S, "week B's first checkpoint", on_timeout=daemon_log)
            a, b = launched_run(instance, "a"), launched_run(instance, "b")
            killed = kill_run_worker(instance, b.dagster_run.run_id)
            # Nothing writes once the worker and the trainer are dead: the step a retry must resume from.
            killed_at_step = complete_steps(home, WEEK_B)[-1]

            def b_failed():
                run = instance.get_run_by_id(b.dagster_run.run_id)
                return run if run.status == dg.DagsterRunStatus.FAILURE else None

            wait_for(b_failed, 180, "the killed run marked FAILURE", on_timeout=daemon_log)

            def retry_finished():
                runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/parent_run_id": b.dagster_run.run_id}))
                return runs[0] if runs and runs[0].is_finished else None

            retry = wait_for(
                retry_finished, RUN_BOUND_S, "the automatic re-run of week B", interval=5, on_timeout=daemon_log
            )
            a_id, b_id = a.dagster_run.run_id, b.dagster_run.run_id
            facts = {
                "a": instance.get_run_by_id(a_id),
                "b": instance.get_run_by_id(b_id),
                "retry": retry,
                "killed": killed,
                "killed_at_step": killed_at_step,
                "b_messages": [r.event_log_entry.message or "" for r in instance.get_records_for_run(b_id).records],
                "a_success": event_time(instance, a_id, dg.DagsterEventType.RUN_SUCCESS),
                "b_enqueued": event_time(instance, b_id, dg.DagsterEventType.RUN_ENQUEUED),
                "b_starting": event_time(instance, b_id, dg.DagsterEventType.RUN_STARTING),
                "materialized": {"a": materialized(instance, a_id), "retry": materialized(instance, retry.run_id)},
                "retry_grpo": grpo_metadata(instance, retry.run_id),
                "decision_b": latest_decision(instance, WEEK_B),
                "daemon_log": daemon_log(),
            }
        facts.update(
            champion=champion_info(uri),
            versions={
                "base": find_base_version(uri),
                WEEK_A: find_week_version(uri, WEEK_A),
                WEEK_B: find_week_version(uri, WEEK_B),
            },
            dagster_rows=dict(query(deploy.db, "select run_id, status from runs")),
            mlflow_aliases=sorted(query(mlflow_db, "select alias, version from registered_model_aliases")),
            mlflow_versions=query(mlflow_db, "select count(*) from model_versions")[0][0],
            b_result=json.loads(
                next((home.root / "runs" / WEEK_B).glob(f"run-{b_id[:8]}/grpo/result.json")).read_text()
            ),
            home=home,
        )
        yield facts


def test_both_weeks_train_gate_and_register_in_the_postgres_backed_mlflow_server(scenario):
    assert scenario["a"].status.value == "SUCCESS", scenario["daemon_log"]
    assert scenario["retry"].status.value == "SUCCESS", scenario["daemon_log"]
    for run in ("a", "retry"):
        assert {"grpo_candidate", "promotion_gate", "registered_model"} <= scenario["materialized"][run]
    versions = scenario["versions"]
    assert versions["base"][0] == 1 and versions[WEEK_A] == 2 and versions[WEEK_B] == 3
    # Each passing week serves as the canary beside the base model (week B's replaced week A's);
    # promoting it is the health sensor's, on served traffic.
    champion = scenario["champion"]
    assert (champion.version, champion.previous_version) == (1, None)
    # The registry lives in PostgreSQL (read here straight from the server's database).
    assert scenario["mlflow_aliases"] == [("canary", 3), ("champion", 1)]
    assert scenario["mlflow_versions"] == 3
    decision = scenario["decision_b"]  # as promotion_gate recorded it in the PostgreSQL event log
    assert decision.decision == "promote" and decision.report.baseline_kind == "champion"


def test_the_run_queue_holds_the_second_week_until_the_first_has_ended(scenario):
    assert scenario["b_enqueued"] < scenario["a_success"]  # B was queued while A was running
    assert scenario["b_starting"] >= scenario["a_success"]  # and launched only once A had ended
    # Every run is in the instance's PostgreSQL run storage, with its final status.
    rows = scenario["dagster_rows"]
    assert rows[scenario["a"].run_id] == "SUCCESS" and rows[scenario["retry"].run_id] == "SUCCESS"
    assert rows[scenario["b"].run_id] == "FAILURE"


def test_a_killed_run_worker_is_marked_failed_and_its_retry_resumes_from_the_checkpoint(scenario):
    assert any("training.grpo" in command for command in scenario["killed"]), scenario["killed"]
    assert scenario["b"].status.value == "FAILURE"
    assert any("unexpectedly" in m or "signal" in m for m in scenario["b_messages"]), scenario["b_messages"][-5:]
    retry = scenario["retry"]
    assert retry.tags["dagster/root_run_id"] == scenario["b"].run_id  # same checkpoint folder
    step = scenario["killed_at_step"]
    assert step >= 1 and scenario["b_result"]["resumed_from_step"] == step
    assert scenario["retry_grpo"]["resumed_from_step"] == step
    assert scenario["b_result"]["final_step"] == B_STEPS
