"""Sensors: an incident for every failed retrain, and the champion-health circuit breaker.

A run fails only on an error (an exception, a failed data check); a week whose candidate the gates
reject or hold succeeds, so it files no incident.
"""

import json
import os

import dagster as dg

from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from dataplane.home import Home
from dataplane.store import StoreLockedError, open_store
from evaluation.health import assess_champion_health
from evaluation.registry import champion_info, rollback
from orchestration.incidents import record_incident
from orchestration.jobs import weekly_retrain
from orchestration.switches import CHAMPION_HEALTH_SWITCH, switched_on

# No `from __future__ import annotations`: Dagster reads resource types from live annotations.

HEALTH_WINDOW = int(os.environ.get("RETRAIN_HEALTH_WINDOW", "500"))


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
    """The latest `limit` interactions served by `policy_version`, read-only."""
    con = open_store(store_path, read_only=True)
    try:
        rows = con.execute(
            "SELECT record FROM interactions WHERE policy_version = ? ORDER BY ended_at DESC, interaction_id LIMIT ?",
            [policy_version, limit],
        ).fetchall()
    finally:
        con.close()
    return [json.loads(row[0]) for row in rows]


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
    expected = champion.tags.get("shadow_success")
    if expected is None:
        return {"action": "none", "reason": f"champion v{champion.version} carries no shadow_success tag"}
    baseline = champion.tags.get("violation_rate")
    verdict = assess_champion_health(
        champion_records(store_path, served_by, HEALTH_WINDOW),
        float(expected),
        margin=margin,
        min_interactions=min_interactions,
        violation_spike=violation_spike,
        violation_baseline=None if baseline is None else float(baseline),
        champion=served_by,
    )
    if verdict.healthy:
        return {"action": "none", "reason": verdict.reason, "n": verdict.n, "champion": served_by}
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
