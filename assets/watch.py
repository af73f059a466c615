"""The live watch: one UTC day of the traffic the champion served, measured against what it was
evaluated to do (`monitoring.watch`), with alarms, the promotion pause and the MLflow log.

Its numbers and tables are the materialization's metadata; its two checks (action drift, reward
distribution) warn and never block: an alarm is acted on here (an incident, and for drift a pause
that `promotion_gate` turns into a hold), not by failing the run.
"""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.
import dagster as dg

from assets.configs import config_from_dataclass
from assets.partitions import daily_partitions
from assets.pause_log import InstancePauseLog
from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from assets.retries import CONTENTION_RETRY
from assets.weekdata import run_domain
from dataplane.served import records_served_on, served_days
from monitoring.watch import (
    DayWatch,
    EvaluatedMixError,
    Finding,
    WatchSettings,
    evaluated_mix,
    reference_day,
    watch_day,
)
from monitoring.watch_alarms import AlarmOutcome, sound_alarms
from monitoring.watch_log import log_watch_day
from tracking.containment import containment_of
from tracking.registry import champion_info

# The thresholds are declared once, on WatchSettings; the Dagster config is built from its fields.
WatchConfig = config_from_dataclass(WatchSettings, "WatchConfig", module=__name__)

WATCH_CHECKS = ("action_drift", "reward_distribution")
_BAR_WIDTH = 30


def _share_table(columns: dict[str, dict[str, float]]) -> str:
    names = sorted({n for shares in columns.values() for n in shares})
    lines = ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    lines += [f"| {n} | " + " | ".join(f"{c.get(n, 0.0):.4f}" for c in columns.values()) + " |" for n in names]
    return "\n".join(lines)


def _histogram_table(watch: DayWatch) -> str:
    hist = watch.reward_histogram
    most = max(hist.counts, default=0) or 1
    lines = ["| proxy reward | interactions | |", "|---|---|---|"]
    for lo, hi, n in zip(hist.edges, hist.edges[1:], hist.counts):
        lines.append(f"| [{lo:.2f}, {hi:.2f}) | {n} | {'█' * round(_BAR_WIDTH * n / most)} |")
    return "\n".join(lines)


def _check(finding: Finding) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=finding.name,
        passed=finding.status == "ok",
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "status": finding.status,
            "value": finding.value,
            "threshold": finding.threshold,
            "detail": finding.detail[:500],
            **{k: dg.MetadataValue.json(v) if isinstance(v, dict) else v for k, v in finding.extra.items()},
        },
    )


def _metadata(watch: DayWatch, outcome: AlarmOutcome, run_url: str) -> dict:
    mixes = {"served": watch.tool_mix, **({"evaluated": watch.evaluated_mix} if watch.evaluated_mix else {})}
    quantiles = {
        "day": watch.reward_quantiles,
        **({"reference": watch.reference_quantiles} if watch.reference_day else {}),
    }
    return {
        "champion": watch.champion,
        "interactions": watch.interactions,
        "with_gold": watch.judged_with_gold,
        "not_replayable": dg.MetadataValue.json(watch.skipped[:20]),
        "action_drift_tv": watch.action_drift.value,
        "action_drift": watch.action_drift.detail,
        "tool_mix": dg.MetadataValue.md(_share_table(mixes)),
        "reward_quantiles": dg.MetadataValue.md(_share_table(quantiles)),
        "reward_histogram": dg.MetadataValue.md(_histogram_table(watch)),
        "reference_day": watch.reference_day,
        "reward_distribution": watch.reward_shift.detail,
        "failure_modes": dg.MetadataValue.md(_share_table({"share": watch.failure_modes})),
        "alarms": dg.MetadataValue.json([f.name for f in watch.alarms]),
        "incidents": dg.MetadataValue.json(outcome.incidents),
        "promotions_paused": outcome.pause is not None,
        "pause": outcome.pause.summary if outcome.pause else "",
        "drift_acknowledged_by": outcome.acknowledged_by or "",
        "mlflow_run": dg.MetadataValue.url(run_url),
    }


@dg.asset(
    group_name="watch",
    kinds={"duckdb", "mlflow"},
    partitions_def=daily_partitions,
    retry_policy=CONTENTION_RETRY,
    check_specs=[dg.AssetCheckSpec(name, asset="live_watch", blocking=False) for name in WATCH_CHECKS],
)
def live_watch(
    context: dg.AssetExecutionContext,
    config: WatchConfig,
    home: HomeResource,
    store: DuckDBStore,
    mlflow: MLflowTracking,
):
    """The champion's traffic of one day: action drift, reward distribution, failure modes; drift pauses promotions."""
    h, day = home.home, context.partition_key
    domain = run_domain(context)
    model = mlflow.model_for(domain)  # each domain's champion is watched on its own traffic
    settings = WatchSettings(**config.model_dump())
    uri = mlflow.uri(h)
    champion = champion_info(uri, model)
    if champion is None:
        for name, limit in zip(WATCH_CHECKS, (settings.max_action_drift, settings.reward_max_ks)):
            yield _check(Finding(name, "not_measured", None, limit, "no champion yet: nothing serves to watch"))
        yield dg.MaterializeResult(metadata={"champion": "none", "interactions": 0})
        return
    served_by = f"{model}/{champion.version}"
    with store.connect(h, read_only=True) as con:
        records = records_served_on(con, served_by, day)
        reference_on = reference_day(served_days(con, served_by), day, settings.min_interactions)
        reference = records_served_on(con, served_by, reference_on) if reference_on else []
    try:
        evaluated = evaluated_mix(champion.tags, served_by, domain)
    except EvaluatedMixError as err:  # a bad tag stays bad on a retry
        raise dg.Failure(str(err), allow_retries=False) from err
    watch = watch_day(day, served_by, records, evaluated, reference_on, reference, settings)
    # An operator's containment changes what the champion's traffic shows (every conversation
    # handed over, or writes refused), so the day's report says which mode was in force.
    containment = containment_of(uri, model)
    outcome = sound_alarms(h, watch, InstancePauseLog(context.instance, context))
    run_id = log_watch_day(uri, watch, artifact_location=h.mlflow_artifacts.as_uri())
    for finding in watch.findings:
        yield _check(finding)
    context.log.info(
        f"{served_by} on {day}: {watch.interactions} interactions; {watch.action_drift.detail}; "
        f"{watch.reward_shift.detail}"
        + (f"; {outcome.pause.summary}" if outcome.pause else "")
        + (
            f"; contained ({containment.mode}) by {containment.by}: {containment.reason}"
            if containment.mode != "off"
            else ""
        )
    )
    yield dg.MaterializeResult(
        metadata={**_metadata(watch, outcome, mlflow.run_url(h, run_id)), "containment": containment.to_dict()}
    )
