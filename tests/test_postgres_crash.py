"""A run worker killed with SIGKILL in the middle of training, on the production Dagster instance.

deploy/dagster.yaml on PostgreSQL, with its daemon: the week is launched through the queue, and
once the out-of-process trainer (`python -m training.grpo`, launched through Pipes) has written a
complete checkpoint, the run worker and everything under it are killed with SIGKILL, as losing
the node would. The code server that spawned the worker sees it die and marks the run failed;
the daemon's run retries (`retry_on_asset_or_op_failure: false`: crashes only) re-run it from the
failed step under the same root run, so the trainer resumes from the checkpoint instead of step 0.
MLflow is the embedded store here; the tracking server on PostgreSQL is covered by the other
postgres tests.
"""

from __future__ import annotations

import json
import signal
from datetime import date

import psutil
import pytest

from tests.helpers_postgres import ci_run_config, deployment, launched_run, require_postgres, wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(1200)]

WEEK = "2026-11-16"
MAX_STEPS = 6


def worker_pid(instance, run_id: str) -> int | None:
    """The run worker's pid, from the engine event its process logs when it starts."""
    import dagster as dg

    for record in instance.get_records_for_run(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT).records:
        event = record.event_log_entry.dagster_event
        pid = event.engine_event_data.metadata.get("pid") if event and event.engine_event_data else None
        if pid is not None and "Started process for run" in (event.message or ""):
            return int(pid.value)
    return None


def complete_checkpoint(home) -> str | None:
    """A checkpoint the trainer has finished writing (trainer_state.json is written last)."""
    found = sorted(home.root.glob(f"runs/{WEEK}/run-*/grpo/checkpoint-*/trainer_state.json"))
    return str(found[0].parent) if found else None


def last_complete_step(home) -> int:
    states = (home.root / "runs" / WEEK).glob("run-*/grpo/checkpoint-*/trainer_state.json")
    return max(json.loads(path.read_text())["global_step"] for path in states)


def test_a_killed_run_worker_is_marked_failed_and_its_retry_resumes_from_the_checkpoint(tmp_path):
    import dagster as dg

    from dataplane.home import Home
    from training.traffic.simulate import simulate

    require_postgres()
    home = Home.from_env(str(tmp_path / "home")).ensure()
    simulate(
        days=7, per_day=30, seed=11, out_dir=str(home.landing), start=date(2026, 11, 16), label_share=0.6, n_users=80
    )
    config = ci_run_config({"max_steps": MAX_STEPS, "save_steps": 1})
    with deployment(tmp_path, home.root, {}) as deploy:
        launcher = deploy.launch(WEEK, config, "crash")
        assert launcher.wait(timeout=300) == 0, (deploy.log_dir / "launch-crash.log").read_text()[-3000:]
        daemon_log = lambda: (deploy.log_dir / "daemon.log").read_text()[-3000:]  # noqa: E731
        with deploy.instance() as instance:
            wait_for(lambda: complete_checkpoint(home), 900, "a complete GRPO checkpoint", on_timeout=daemon_log)
            first = launched_run(instance, "crash").dagster_run
            pid = worker_pid(instance, first.run_id)
            assert pid is not None, "no 'Started process for run' engine event"
            worker = psutil.Process(pid)
            trainers = [p for p in worker.children(recursive=True) if "training.grpo" in " ".join(p.cmdline())]
            assert trainers, "the trainer was not running under the run worker"
            for process in [worker, *worker.children(recursive=True)]:
                process.send_signal(signal.SIGKILL)
            # Nothing writes once the worker and the trainer are dead: this is the step a retry must resume from.
            killed_at_step = last_complete_step(home)

            def failed():
                run = instance.get_run_by_id(first.run_id)
                return run if run.status == dg.DagsterRunStatus.FAILURE else None

            wait_for(failed, 180, "the killed run marked FAILURE", on_timeout=daemon_log)
            messages = [r.event_log_entry.message for r in instance.get_records_for_run(first.run_id).records]
            assert any("unexpectedly" in (m or "") or "signal" in (m or "") for m in messages), messages[-5:]

            def retried():
                runs = instance.get_runs(filters=dg.RunsFilter(tags={"dagster/parent_run_id": first.run_id}))
                return runs[0] if runs and runs[0].is_finished else None

            retry = wait_for(retried, 900, "the automatic re-run finished", interval=5, on_timeout=daemon_log)
            assert retry.status == dg.DagsterRunStatus.SUCCESS, daemon_log()
            assert retry.tags["dagster/root_run_id"] == first.run_id
            [materialization] = [
                r
                for r in instance.get_records_for_run(
                    retry.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION
                ).records
                if r.asset_key == dg.AssetKey("grpo_candidate")
            ]
            metadata = materialization.event_log_entry.dagster_event.materialization.metadata
    result = json.loads(next((home.root / "runs" / WEEK).glob(f"run-{first.run_id[:8]}/grpo/result.json")).read_text())
    assert killed_at_step >= 1 and result["resumed_from_step"] == killed_at_step
    assert metadata["resumed_from_step"].value == result["resumed_from_step"]
    assert result["final_step"] == MAX_STEPS
