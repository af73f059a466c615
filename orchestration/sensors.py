"""Sensors: an incident for every failed retrain, the champion-health circuit breaker (which also
judges the canary serving beside the champion), and the landing sensor that ingests new log files as they land and asks for the live watch of their days.

A run fails only on an error (an exception, a failed data check); a week whose candidate the gates
reject or hold succeeds, so it files no incident.
"""

import hashlib
import json
from datetime import UTC, datetime

import dagster as dg

from assets.partitions import daily_partitions
from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from dataplane.incidents import record_incident
from dataplane.landing import ingest_landed
from dataplane.store import StoreLockedError
from monitoring.canary import check_canary
from monitoring.health import check_champion
from orchestration import environment
from orchestration.environment import CHAMPION_HEALTH_SWITCH, LIVE_WATCH_SWITCH, switched_on
from orchestration.jobs import daily_watch, domain_run_requests, weekly_retrain

# No `from __future__ import annotations`: Dagster reads resource types from live annotations.

# A sensor tick has about a minute (Dagster's gRPC timeout): a backlog of landed files (a first
# start on a full landing folder) is ingested over several ticks, each file in its own transaction.
LANDING_FILES_PER_TICK = 20


@dg.run_failure_sensor(
    monitored_jobs=[weekly_retrain], name="retrain_failure_incident", default_status=dg.DefaultSensorStatus.RUNNING
)
def retrain_failure_incident(context: dg.RunFailureSensorContext, home: HomeResource):
    """Record an incident (and post it to the home's webhook, RETRAIN_WEBHOOK_URL) whenever a weekly retrain fails."""
    run = context.dagster_run
    failed_steps = [e.step_key for e in context.get_step_failure_events()]
    record_incident(
        home.home,
        "run_failure",
        f"weekly_retrain run {run.run_id} for week {run.tags.get('dagster/partition')} failed",
        {
            "run_id": run.run_id,
            "week": run.tags.get("dagster/partition"),
            "failed_steps": failed_steps,
            "message": context.failure_event.message,
        },
    )


@dg.sensor(
    name="champion_health",
    minimum_interval_seconds=900,
    default_status=dg.DefaultSensorStatus.RUNNING
    if switched_on(CHAMPION_HEALTH_SWITCH)
    else dg.DefaultSensorStatus.STOPPED,
)
def champion_health(
    context: dg.SensorEvaluationContext, home: HomeResource, store: DuckDBStore, mlflow: MLflowTracking
):
    """Circuit breaker: roll `champion` back when the traffic it serves shows it degraded; then
    promote, drop or keep the canary on the traffic it served beside the champion (its decision is
    also an observation of `registered_model`, with the interval it rests on)."""
    h, canary = home.home, {}
    try:
        outcome = check_champion(
            h,
            store.resolved_path(h),
            mlflow.uri(h),
            mlflow.model_name,
            environment.health_settings(),
        )
        # After a rollback the canary waits a tick, to be judged beside the restored champion.
        if outcome["action"] != "rollback":
            canary = check_canary(
                h,
                store.resolved_path(h),
                mlflow.uri(h),
                mlflow.model_name,
                environment.canary_settings(),
                h.mlflow_artifacts.as_uri(),
            )
            outcome = {**outcome, "canary": {k: v for k, v in canary.items() if k != "verdict"}}
    except StoreLockedError as err:
        # A retrain holds the DuckDB writer lock; the next tick looks again.
        return dg.SkipReason(f"interaction store busy: {err}")
    text = json.dumps(outcome, sort_keys=True, default=str)
    context.update_cursor(text)
    if "verdict" not in canary:  # no canary was judged
        return dg.SkipReason(text)
    return dg.SensorResult(skip_reason=text, asset_events=[canary_observation(canary)])


def canary_observation(canary: dict) -> dg.AssetObservation:
    """The canary decision as metadata of `registered_model`, where the Dagster UI shows the versions."""
    verdict = canary["verdict"]
    numbers = (
        "n_canary",
        "n_champion",
        "days",
        "difference",
        "ci_low",
        "ci_high",
        "canary_success",
        "champion_success",
    )
    return dg.AssetObservation(
        asset_key="registered_model",
        metadata={
            "canary_decision": canary["action"],
            "canary": verdict["canary"],
            "champion": verdict["champion"],
            "reason": verdict["reason"],
            "mlflow_run_id": canary["mlflow_run_id"],
            **{name: verdict[name] for name in numbers if verdict.get(name) is not None},
        },
    )


def _watchable(days: dict[str, int], today: str) -> list[str]:
    """The days among `days` that have a daily partition: over (before today, UTC) and not before the first."""
    first = daily_partitions.get_first_partition_key() or today
    return [day for day in sorted(days) if first <= day < today]


@dg.sensor(
    name="landing_ingest",
    job=daily_watch,
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING if switched_on(LIVE_WATCH_SWITCH) else dg.DefaultSensorStatus.STOPPED,
)
def landing_ingest(context: dg.SensorEvaluationContext, home: HomeResource, store: DuckDBStore):
    """Ingest files new in `<home>/landing` into DuckDB, then watch every finished day they hold."""
    h = home.home
    try:
        batch = ingest_landed(store.resolved_path(h), h.landing, max_files=LANDING_FILES_PER_TICK)
    except StoreLockedError as err:
        # A run holds the DuckDB writer lock; the files are still new on the next tick.
        return dg.SkipReason(f"interaction store busy: {err}")
    if not batch.files:
        return dg.SkipReason(f"no new files in {h.landing}")
    counts = batch.summary.to_dict()
    context.log.info(
        f"ingested {len(batch.files)} landing files: accepted {counts['accepted']}, "
        f"duplicates {counts['duplicates']}, quarantined {counts['quarantined']}; days {batch.days}"
    )
    days = _watchable(batch.days, datetime.now(UTC).date().isoformat())
    cursor = json.dumps({"files": batch.files[-20:], "days": batch.days, "accepted": counts["accepted"]})
    if not days:
        return dg.SensorResult(
            skip_reason=f"ingested {len(batch.files)} files ({counts['accepted']} accepted); no finished day to watch",
            cursor=cursor,
        )
    # One run per day, scheduled domain and batch of files: a later file for the same day asks again.
    digest = hashlib.sha256("\n".join(batch.files).encode()).hexdigest()[:16]
    return dg.SensorResult(
        run_requests=[r for day in days for r in domain_run_requests(day, salt=f":{digest}")],
        cursor=cursor,
    )
