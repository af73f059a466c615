"""The promotion gate (one blocking check per gate) and the MLflow registration it guards."""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.
import json

import dagster as dg

from assets.handoffs import GRPOCandidate, PolicyBase, ValidatedWindow, WindowSplits
from assets.partitions import weekly_partitions
from assets.resources import HomeResource, MLflowTracking
from assets.weekdata import week_dir
from evaluation.gates import GATE_NAMES, GateConfig, GateInputs, evaluate_gates
from evaluation.registry import (
    ModelDirError,
    NotPromotableError,
    champion_info,
    register_base_champion,
    register_candidate,
)
from evaluation.reports import outcomes
from evaluation.run_log import WeekRun, log_week_run


class GateSettings(dg.Config):
    """Gate thresholds (defaults: docs/ARCHITECTURE.md, "Gates")."""

    shadow_margin: float = -0.02
    calibration_min_margin: float = 0.0
    violation_tolerance: float = 0.0
    min_reward_alignment: float = 0.6
    min_human_labels: int = 20
    on_insufficient_labels: str = "hold"
    hacking_flat_tolerance: float = 0.0
    max_tool_drift: float = 0.05


def _dagster_run_url(run_id: str) -> str:
    """Where the week's Dagster run opens (RETRAIN_DAGSTER_UI_URL, default `dagster dev` locally)."""
    import os

    return f"{os.environ.get('RETRAIN_DAGSTER_UI_URL', 'http://127.0.0.1:3000').rstrip('/')}/runs/{run_id}"


def _gate_table(report) -> str:
    lines = ["| gate | value | threshold | verdict |", "|---|---|---|---|"]
    for g in report.gates:
        value = "n/a" if g.value is None else f"{g.value:.4f}"
        lines.append(f"| {g.name} | {value} | {g.comparison} {g.threshold} | {g.verdict} |")
    return "\n".join(lines)


def _run_metrics(calibration: dict, shadow: dict) -> tuple[dict, dict]:
    """Numeric summaries per set and policy, and each policy's tool-call mix (the baseline logged as champion)."""
    metrics = {
        name: {
            policy: {
                k: float(v)
                for k, v in rep[side]["summary"].items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            for policy, side in (("candidate", "candidate"), ("champion", "baseline"))
        }
        for name, rep in (("calibration", calibration), ("shadow", shadow))
    }
    tools = {}
    for policy, side in (("candidate", "candidate"), ("champion", "baseline")):
        counts = calibration[side]["tool_counts"]
        tools[policy] = {t: n / max(1, sum(counts.values())) for t, n in counts.items()}
    return metrics, tools


@dg.asset(
    group_name="evaluation",
    kinds={"mlflow"},
    partitions_def=weekly_partitions,
    check_specs=[dg.AssetCheckSpec(f"gate_{name}", asset="promotion_gate", blocking=True) for name in GATE_NAMES],
)
def promotion_gate(
    context: dg.AssetExecutionContext,
    config: GateSettings,
    interaction_window: ValidatedWindow,
    window_splits: WindowSplits,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
    calibration_report: dict,
    shadow_report: dict,
    home: HomeResource,
    mlflow: MLflowTracking,
):
    """The promotion decision with every gate's value, threshold and verdict (logged to MLflow even on reject)."""
    import pandas as pd

    h = home.home
    candidate, baseline = outcomes(calibration_report, shadow_report)
    report = evaluate_gates(
        GateInputs(
            candidate,
            baseline,
            data_valid=bool(interaction_window.validation_success),
            proxy_rewards=calibration_report["proxy_rewards"],
            human_success=calibration_report["human_success"],
            training_rewards=grpo_candidate.reward_curve,
            baseline_kind="champion" if policy_base.source == "champion" else "base_model",
            data_detail=", ".join(interaction_window.failed_expectations),
        ),
        GateConfig(**config.model_dump()),
    )
    metrics, tools = _run_metrics(calibration_report, shadow_report)
    samples = [{"policy": side, **s} for side in ("candidate", "baseline") for s in calibration_report[side]["samples"]]
    run_id = log_week_run(
        mlflow.uri(h),
        WeekRun(
            week=context.partition_key,
            window_hash=interaction_window.content_hash,
            window_frame=pd.DataFrame({"rows": [interaction_window.rows]}),
            gate_report=report,
            params={
                "candidate_path": grpo_candidate.path,
                "baseline_path": policy_base.path,
                "baseline_source": policy_base.source,
                "window_rows": interaction_window.rows,
            },
            metrics=metrics,
            tool_distribution=tools,
            failure_modes={
                "candidate": calibration_report["candidate"]["failure_modes"],
                "champion": calibration_report["baseline"]["failure_modes"],
            },
            reward_curve=grpo_candidate.reward_curve,
            samples=samples,
            validation={"success": interaction_window.validation_success},
            tags={"dagster_run_id": context.run_id, "dagster_run_url": _dagster_run_url(context.run_id)},
        ),
        run_id=grpo_candidate.mlflow_run_id,
        artifact_location=h.mlflow_artifacts.as_uri(),
    )
    lineage = {
        "week": context.partition_key,
        "window_hash": interaction_window.content_hash,
        "validation": "passed" if interaction_window.validation_success else "failed",
        "run_id": run_id,
        "dagster_run_id": context.run_id,
        "window_rows": interaction_window.rows,
        "calibration_rows": calibration_report["set"]["rows"],
        "shadow_rows": shadow_report["set"]["rows"],
        "shadow_success": shadow_report["candidate"]["summary"]["success_rate"],
        "violation_rate": candidate.violation_rate,
        "base_model": policy_base.path,
    }
    request = {"model_path": grpo_candidate.path, "lineage": lineage, "report": report.to_dict()}
    (week_dir(h, context.partition_key) / "promotion_request.json").write_text(
        json.dumps(request, indent=2, default=str)
    )
    for gate in report.gates:
        yield dg.AssetCheckResult(
            check_name=f"gate_{gate.name}",
            passed=gate.verdict == "pass",
            severity=dg.AssetCheckSeverity.ERROR,
            metadata={
                "value": gate.value,
                "threshold": gate.threshold,
                "comparison": gate.comparison,
                "verdict": gate.verdict,
                "detail": gate.detail[:500],
            },
        )
    yield dg.MaterializeResult(
        value={"decision": report.decision, "report": report.to_dict(), "lineage": lineage, "mlflow_run_id": run_id},
        metadata={
            "decision": report.decision,
            "baseline_kind": report.baseline_kind,
            "mlflow_run_id": run_id,
            "mlflow_run": dg.MetadataValue.url(mlflow.run_url(h, run_id)),
            "gates": dg.MetadataValue.md(_gate_table(report)),
        },
    )


_REGISTRY_RETRY = dg.RetryPolicy(max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL)


@dg.asset(
    group_name="registry",
    kinds={"mlflow"},
    partitions_def=weekly_partitions,
    pool="retrain",
    retry_policy=_REGISTRY_RETRY,
)
def first_champion(
    context: dg.AssetExecutionContext,
    policy_base: PolicyBase,
    interaction_window: ValidatedWindow,
    calibration_report: dict,
    shadow_report: dict,
    grpo_candidate: GRPOCandidate,
    home: HomeResource,
    mlflow: MLflowTracking,
):
    """The base model as the first champion while the registry has none (then a no-op).

    Runs whatever the gates decide: it is the model that serves until a candidate beats it, and
    registering it gives the next candidate a champion to beat and the health sensor an estimate
    (its own shadow success) to hold it to. The candidate still becomes champion only through
    `registered_model`, after every gate passed against this same base model.
    """
    h = home.home
    if policy_base.source == "champion":
        version, reason = None, f"a champion exists (v{policy_base.champion_version})"
    else:
        _, base = outcomes(calibration_report, shadow_report)
        lineage = {
            "window_hash": interaction_window.content_hash,
            "base_model": policy_base.path,
            "shadow_success": shadow_report["baseline"]["summary"]["success_rate"],
            "calibration_success": calibration_report["baseline"]["summary"]["success_rate"],
            "violation_rate": base.violation_rate,
            "dagster_run_id": context.run_id,
        }
        try:
            version = register_base_champion(
                mlflow.uri(h),
                policy_base.path,
                context.partition_key,
                lineage,
                name=mlflow.model_name,
                run_id=grpo_candidate.mlflow_run_id,
                artifact_location=h.mlflow_artifacts.as_uri(),
            )
        except ModelDirError as err:
            raise dg.Failure(str(err), allow_retries=False) from err
        reason = "registered the base model" if version is not None else "a champion exists"
    champion = champion_info(mlflow.uri(h), mlflow.model_name)
    context.log.info(reason)
    return dg.MaterializeResult(
        value={"version": version, "reason": reason},
        metadata={"registered_version": version, "reason": reason, "champion": champion.version if champion else None},
    )


@dg.asset(
    group_name="registry",
    kinds={"mlflow"},
    partitions_def=weekly_partitions,
    pool="retrain",
    retry_policy=_REGISTRY_RETRY,
    check_specs=[dg.AssetCheckSpec("champion_is_this_version", asset="registered_model", blocking=True)],
)
def registered_model(
    context: dg.AssetExecutionContext,
    promotion_gate: dict,
    grpo_candidate: GRPOCandidate,
    first_champion: dict,
    home: HomeResource,
    mlflow: MLflowTracking,
):
    """The MLflow model version of this week's candidate, with `champion` moved to it (after
    `first_champion`, so in week one the base model it beat becomes `previous_champion`)."""
    h = home.home
    try:
        version = register_candidate(
            mlflow.uri(h),
            grpo_candidate.path,
            context.partition_key,
            promotion_gate["lineage"],
            promotion_gate["report"],
            name=mlflow.model_name,
            run_id=promotion_gate["mlflow_run_id"],
            artifact_location=h.mlflow_artifacts.as_uri(),
        )
    except (ModelDirError, NotPromotableError) as err:
        # Not transient: retrying cannot help, so fail at once (MLflow outages still retry).
        raise dg.Failure(str(err), allow_retries=False) from err
    champion = champion_info(mlflow.uri(h), mlflow.model_name)
    yield dg.AssetCheckResult(
        check_name="champion_is_this_version",
        passed=champion is not None and champion.version == version,
        metadata={"version": version, "champion": champion.version if champion else None},
    )
    yield dg.MaterializeResult(
        value={"name": mlflow.model_name, "version": version},
        metadata={
            "model": mlflow.model_name,
            "version": version,
            "previous_champion": champion.previous_version if champion else None,
            "policy_version": f"{mlflow.model_name}/{version}",
        },
    )
