"""The canary's decisions as MLflow runs: one run per canary version and body of evidence.

`monitoring.canary` decides (promote, drop or wait) each time the health sensor looks; every
decision is written here, in the `canary` experiment, so the history of a canary (how much traffic
it had served, the interval each decision rested on) sits beside the registry it moved. A tick
that finds the same evidence as the last one (nothing new served) finds that run again instead of
adding one every fifteen minutes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tracking.registry import ensure_experiment, find_or_create_run, mlflow_client, mlflow_step

CANARY_EXPERIMENT = "canary"
MAX_REASON_CHARS = 4000  # under MLflow's 5,000-character tag value
# The verdict's numbers logged as metrics (the rest goes into the JSON artifact and the tags).
METRICS = (
    "n_canary",
    "n_champion",
    "days",
    "canary_success",
    "champion_success",
    "difference",
    "ci_low",
    "ci_high",
    "sign_p_value",
    "canary_violation_rate",
    "champion_violation_rate",
)


def log_canary_decision(
    tracking_uri: str, model_name: str, verdict: Mapping[str, Any], artifact_location: str | None = None
) -> str:
    """Record `verdict` (`CanaryVerdict.to_dict()`) and what was done on it; the run's id.

    The run is keyed by the model, the canary's version and the amount of evidence (conversations
    judged in each arm), so the same evidence judged twice lands in one run."""
    client = mlflow_client(tracking_uri)
    version = str(verdict["canary"]).rsplit("/", 1)[-1]
    key = {
        "model": model_name,
        "canary_version": version,
        "evidence": f"{verdict['n_canary']}-{verdict['n_champion']}",
    }
    with mlflow_step(tracking_uri, "log canary decision"):
        experiment = ensure_experiment(client, CANARY_EXPERIMENT, artifact_location)
        run = find_or_create_run(client, experiment, key, f"{model_name}: canary v{version}")
        client.set_tag(run, "decision", str(verdict["decision"]))
        client.set_tag(run, "reason", str(verdict["reason"])[:MAX_REASON_CHARS])
        client.set_tag(run, "champion", str(verdict["champion"]))
        for name in METRICS:
            if verdict.get(name) is not None:
                client.log_metric(run, name, float(verdict[name]))
        client.log_dict(run, dict(verdict), "canary_verdict.json")
        client.set_terminated(run)
    return run


def latest_canary_decision(tracking_uri: str, model_name: str) -> dict[str, Any] | None:
    """The newest recorded canary decision of `model_name` (its run, decision, reason, canary
    version and when), or None when none was recorded."""
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "read canary decisions"):
        experiment = client.get_experiment_by_name(CANARY_EXPERIMENT)
        if experiment is None:
            return None
        runs = client.search_runs(
            [experiment.experiment_id],
            f"tags.model = '{model_name}'",
            order_by=["attributes.start_time DESC"],
            max_results=1,
        )
    if not runs:
        return None
    tags = runs[0].data.tags
    return {
        "mlflow_run_id": runs[0].info.run_id,
        "canary_version": tags.get("canary_version"),
        "decision": tags.get("decision"),
        "reason": tags.get("reason"),
        "metrics": dict(runs[0].data.metrics),
    }
