"""Running a week from the command line, on the same Dagster instance the UI shows."""

from __future__ import annotations

import fcntl
import getpass
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import dagster as dg

from assets.decisions import latest_decision, run_decision
from assets.partitions import WeekError, week_key, weekly_partitions
from assets.pause_log import InstancePauseLog
from assets.weekdata import DOMAIN_TAG
from dataplane.home import Home
from domains.registry import DEFAULT_DOMAIN
from evaluation.decision import PromotionDecision
from evaluation.gate_floors import check_run_config, resolve_floors
from evaluation.gates import approve
from monitoring.pause import ResumeError, last_resume, resume_promotions
from orchestration import environment
from orchestration.definitions import build_definitions
from orchestration.instance import prepare_dagster_home
from orchestration.run_config import load_run_config, scheduled_run_config
from tracking.canary import latest_canary_decision
from tracking.containment import set_containment
from tracking.registry import (
    CANARY,
    canary_info,
    champion_info,
    check_decision_digest,
    register_candidate,
    rollback,
)
from tracking.run_log import record_approval


class RetrainBusyError(RuntimeError):
    """Another retrain holds the home folder's run lock."""


@dataclass
class WeekRun:
    """A finished run: `success` is False only on an error; a rejected week succeeds, and its
    `decision` (None when the run did not reach the gate) says what the gates decided."""

    week: str
    run_id: str
    success: bool
    materialized: list[str]
    decision: PromotionDecision | None = None


@contextmanager
def run_lock(home: Home) -> Iterator[None]:
    """One retrain per home folder at a time; a second one is refused at once, not queued silently."""
    path = home.root / "retrain.lock"
    handle = open(path, "a+")  # noqa: SIM115 - held open for the lock's lifetime
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError as err:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            raise RetrainBusyError(
                f"another retrain is running on {home.root} ({holder}); wait for it to finish"
            ) from err
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()}")
        handle.flush()
        yield
    finally:
        handle.close()


def checked_week(week: str) -> str:
    key = week_key(week)
    first = weekly_partitions.get_first_partition_key()
    if first is None or key < first:
        raise WeekError(f"week {key} is before the first partition {first} (RETRAIN_START_DATE)")
    return key


def run_week(
    week: str,
    config_file: str | None = None,
    run_config: dict | None = None,
    home: Home | None = None,
    terse: bool = True,
    domain: str = DEFAULT_DOMAIN,
) -> WeekRun:
    """Materialise every asset of `weekly_retrain` for one week of `domain`, in this process.

    `terse` swaps Dagster's debug console logger for one progress line per step (the full event
    log is still in the instance, so the UI shows everything)."""
    home = (home or environment.home()).ensure()
    key = checked_week(week)
    instance_dir = prepare_dagster_home(home)
    # No config given: the preset RETRAIN_RUN_CONFIG names, as the schedule's runs get it (the
    # progress logger added below would otherwise make the config non-empty and hide the preset).
    config = dict(run_config or load_run_config(config_file) or scheduled_run_config() or {})
    # A config that loosens a gate is refused before anything runs (promotion_gate refuses it too,
    # for runs launched elsewhere, but only after training and evaluation).
    check_run_config(config, resolve_floors(instance_dir))
    if terse and "loggers" not in config:
        config["loggers"] = {"progress": {}}
    with run_lock(home), dg.DagsterInstance.get() as instance:
        job = build_definitions().resolve_job_def("weekly_retrain")
        result = job.execute_in_process(
            partition_key=key,
            instance=instance,
            run_config=config,
            raise_on_error=False,
            tags={DOMAIN_TAG: domain},
        )
    done = sorted({e.asset_key.to_user_string() for e in result.get_asset_materialization_events()})
    return WeekRun(key, result.run_id, result.success, done, run_decision(result, key))


def mlflow_target(home: Home, domain: str = DEFAULT_DOMAIN) -> tuple[str, str]:
    """(tracking URI, registered model name of `domain`), read by the Dagster resource itself."""
    tracking = environment.mlflow_tracking()
    return tracking.uri(home), tracking.model_for(domain)


class NoDecisionError(FileNotFoundError):
    """A week without a promotion decision to approve."""


def week_decision(week: str, home: Home | None = None, domain: str = DEFAULT_DOMAIN) -> PromotionDecision:
    """The latest promotion decision Dagster recorded for the week holding `week` of `domain`."""
    home = (home or environment.home()).ensure()
    key = checked_week(week)
    prepare_dagster_home(home)
    with dg.DagsterInstance.get() as instance:
        decision = latest_decision(instance, key, domain)
    if decision is None:
        option = "" if domain == DEFAULT_DOMAIN else f" --domain {domain}"
        raise NoDecisionError(
            f"week {key} of {domain} has no promotion decision in the Dagster instance at {home.dagster_home}: "
            f"run it first (retrain run{option} --week {key})"
        )
    return decision


def approve_week(week: str, approver: str, home: Home | None = None, domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """Register a week's held candidate after a person reviewed it, without retraining; it serves
    as `canary` beside the champion, as a week promoted by the gates does (`registered_model`).

    Only the candidate's tool-call drift can be approved. A `live_watch` hold is lifted only once a
    person has resumed promotions (`resume_watch`); that record is carried onto the approved report.
    A failed gate, or any other hold (too few human labels, a pause still in force), raises
    ApprovalError naming it and what would lift it, and nothing is registered.
    """
    home = (home or environment.home()).ensure()
    decision = week_decision(week, home, domain)
    with dg.DagsterInstance.get() as instance:  # week_decision prepared the home's instance
        resumed = last_resume(InstancePauseLog(instance))
    approved = decision.approved(approve(decision.report, approver, resumed=resumed))
    uri, name = mlflow_target(home, domain)
    # The folder must still be the one the gates judged before the approval is recorded anywhere.
    check_decision_digest(uri, approved.model_path, approved.week, approved.lineage)
    record_approval(uri, approved.mlflow_run_id, decision.report, approved.report)
    version = register_candidate(
        uri,
        approved.model_path,
        approved.week,
        approved.lineage,
        approved.report,
        moved_by=f"retrain approve by {approver} (OS user {getpass.getuser()})",
        name=name,
        run_id=approved.mlflow_run_id,
        artifact_location=home.mlflow_artifacts.as_uri(),
        serve_as=CANARY,
    )
    return {"week": approved.week, "version": version, "approved_by": approver}


def resume_watch(by: str, reason: str, home: Home | None = None) -> dict[str, Any]:
    """Lift the live watch's promotion pause after a person reviewed the served traffic, recording
    who resumed promotions and why: a `promotion_pause` event on the home's Dagster instance, beside the pause.

    Raises ResumeError without a name or a reason, and when nothing is paused."""
    home = (home or environment.home()).ensure()
    prepare_dagster_home(home)
    with dg.DagsterInstance.get() as instance:
        lifted = resume_promotions(InstancePauseLog(instance), by, reason)
    if lifted is None:
        raise ResumeError("nothing to resume: promotions are not paused by the live watch")
    return {"resumed": lifted}


def contain_champion(
    mode: str, by: str, reason: str, home: Home | None = None, domain: str = DEFAULT_DOMAIN
) -> dict[str, Any]:
    """Set the containment mode of `domain`'s registered model (`tracking.containment`): what every
    server of its champion obeys from its next conversation on; the state now in force."""
    home = (home or environment.home()).ensure()
    uri, name = mlflow_target(home, domain)
    state = set_containment(uri, name, mode, by, reason, artifact_location=home.mlflow_artifacts.as_uri())
    return {"model": name, **state.to_dict()}


def canary_state(home: Home | None = None, domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """`domain`'s champion and canary (version, week, who set it) and the latest canary decision."""
    uri, name = mlflow_target((home or environment.home()).ensure(), domain)

    def described(info) -> dict[str, Any] | None:
        if info is None:
            return None
        return {"version": info.version, "week": info.week, "set_by": info.tags.get(f"{info.alias}_set_by")}

    return {
        "model": name,
        "champion": described(champion_info(uri, name)),
        "canary": described(canary_info(uri, name)),
        "latest_decision": latest_canary_decision(uri, name),
    }


def rollback_champion(home: Home | None = None, domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """Make `previous_champion` of `domain`'s model the champion again (one step back per call)."""
    uri, name = mlflow_target((home or environment.home()).ensure(), domain)
    return asdict(rollback(uri, name, moved_by=f"retrain rollback (OS user {getpass.getuser()})"))
