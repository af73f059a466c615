"""Sensors: an incident for every failed retrain, the champion-health circuit breaker, and the
landing sensor that ingests new log files as they land and asks for the live watch of their days.

A run fails only on an error (an exception, a failed data check); a week whose candidate the gates
reject or hold succeeds, so it files no incident.
"""

import hashlib
import json
import os
from datetime import UTC, datetime

import dagster as dg

from assets.partitions import daily_partitions
from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from dataplane.home import Home
from dataplane.incidents import record_incident
from dataplane.landing import ingest_landed
from dataplane.served import latest_served
from dataplane.store import StoreLockedError, open_store
from evaluation.health import assess_champion_health
from evaluation.registry import champion_info, rollback
from orchestration.jobs import daily_watch, domain_run_requests, weekly_retrain
from orchestration.switches import CHAMPION_HEALTH_SWITCH, LIVE_WATCH_SWITCH, switched_on

# No `from __future__ import annotations`: Dagster reads resource types from live annotations.

HEALTH_WINDOW = int(os.environ.get("RETRAIN_HEALTH_WINDOW", "500"))
# A sensor tick has about a minute (Dagster's gRPC timeout): a backlog of landed files (a first
# start on a full landing folder) is ingested over several ticks, each file in its own transaction.
LANDING_FILES_PER_TICK = 20


@dg.run_failure_sensor(
    monitored_jobs=[weekly_retrain], name="retrain_failure_incident", default_status=dg.DefaultSensorStatus.RUNNING
)
def retrain_failure_incident(context: dg.RunFailureSensorContext, home: HomeResource):
    """Record an incident (and post it to RETRAIN_WEBHOOK_URL) whenever a weekly retrain fails."""
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


def champion_records(store_path: str, policy_version: str, limit: int) -> list[dict]:
    """The latest `limit` interactions served by `policy_version`, read-only (newest first): with
    the landing sensor ingesting files as they land, that is yesterday's traffic, not last week's."""
    con = open_store(store_path, read_only=True)
    try:
        return latest_served(con, policy_version, limit)
    finally:
        con.close()


def check_champion(
    home: Home,
    store_path: str,
    tracking_uri: str,
    model_name: str,
    margin: float = 0.10,
    min_interactions: int = 30,
    violation_spike: float = 0.10,
) -> dict:
    """Judge the champion on the traffic it served; roll back and record an incident if it fails."""
    champion = champion_info(tracking_uri, model_name)
    if champion is None:
        return {"action": "none", "reason": "no champion yet"}
    served_by = f"{model_name}/{champion.version}"
    lineage = champion.lineage
    expected, baseline = lineage.shadow_success, lineage.violation_rate
    if expected is None:
        return {"action": "none", "reason": f"champion v{champion.version} carries no shadow_success tag"}
    records = champion_records(store_path, served_by, HEALTH_WINDOW)
    # The newest interaction judged: shows which day of traffic the verdict rests on.
    latest = records[0]["ended_at"] if records else None
    verdict = assess_champion_health(
        records,
        expected,
        margin=margin,
        min_interactions=min_interactions,
        violation_spike=violation_spike,
        violation_baseline=baseline,
        champion=served_by,
    )
    if verdict.healthy:
        return {"action": "none", "reason": verdict.reason, "n": verdict.n, "champion": served_by, "latest": latest}
    result = rollback(tracking_uri, model_name)
    path = record_incident(
        home,
        "champion_rollback",
        f"champion {served_by} rolled back to v{result.to_version}: {verdict.reason}",
        {"verdict": verdict.to_dict(), "from_version": result.from_version, "to_version": result.to_version},
    )
    return {
        "action": "rollback",
        "from_version": result.from_version,
        "to_version": result.to_version,
        "reason": verdict.reason,
        "latest": latest,
        "incident": str(path),
    }


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
    """Circuit breaker: roll `champion` back when the traffic it serves shows it degraded."""
    h = home.home
    try:
        outcome = check_champion(
            h,
            store.resolved_path(h),
            mlflow.uri(h),
            mlflow.model_name,
            margin=float(os.environ.get("RETRAIN_HEALTH_MARGIN", "0.10")),
        )
    except StoreLockedError as err:
        # A retrain holds the DuckDB writer lock; the next tick looks again.
        return dg.SkipReason(f"interaction store busy: {err}")
    context.update_cursor(json.dumps(outcome, sort_keys=True, default=str))
    return dg.SkipReason(json.dumps(outcome, sort_keys=True, default=str))


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
