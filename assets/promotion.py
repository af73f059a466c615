"""The promotion gate: every gate's verdict as a check, the decision as the asset's value.

A rejection is an ordinary week: the run succeeds with the decision, each gate's verdict and the
reason recorded here and on the week's MLflow run, and registration (assets.registration) skips.
Only an error (an exception, a failed data check upstream) fails the run.
"""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.

import dagster as dg

from assets.configs import config_from_dataclass
from assets.decisions import decision_metadata, latest_decision, previous_week
from assets.handoffs import GRPOCandidate, PolicyBase, ValidatedWindow, week_evidence
from assets.partitions import weekly_partitions
from assets.pause_log import InstancePauseLog
from assets.resources import HomeResource, MLflowTracking
from evaluation.decision import PromotionDecision, decide_week
from evaluation.gate_floors import (
    GateFloorsFileError,
    LoosenedGateError,
    apply_floors,
    floors_summary,
    resolve_floors,
    run_config_gates,
)
from evaluation.gates import GATE_NAMES, GATE_RULES, GateConfig, GateReport
from evaluation.reports import CalibrationReport, ShadowReport
from monitoring.pause import active_pause
from tracking.run_log import decision_week_run, log_week_run

# The thresholds are declared once, on GateConfig; the Dagster config is built from its fields. What a
# run sets is bounded by the deployment's floors (evaluation.gate_floors): it may tighten, never loosen.
GateSettings = config_from_dataclass(GateConfig, "GateSettings", module=__name__)


def floored_gate_config(
    context: dg.AssetExecutionContext, config: dg.Config, floors_file: str | None = None
) -> tuple[GateConfig, dict]:
    """The run's gate thresholds (the deployment's floors, from `floors_file` else the instance's,
    tightened by what the run config names) and the floors with their source; a run config that
    loosens a gate fails the step, naming the setting."""
    try:
        floors = resolve_floors(context.instance.root_directory, floors_file)
        # Only the settings the run config names: an unset one takes its floor, not the product default.
        # Dagster leaves a value equal to the default out of `model_fields_set`, so the run's own
        # config is read too: naming the product's default where the floor is stricter loosens the gate.
        named = set(config.model_fields_set) | set(run_config_gates(context.run.run_config))
        requested = {name: getattr(config, name) for name in named}
        return apply_floors(requested, floors), floors_summary(floors)
    except (LoosenedGateError, GateFloorsFileError) as err:
        raise dg.Failure(str(err), allow_retries=False) from err


def _gate_table(report: GateReport) -> str:
    lines = ["| gate | value | threshold | verdict |", "|---|---|---|---|"]
    for g in report.gates:
        value = "n/a" if g.value is None else f"{g.value:.4f}"
        lines.append(f"| {g.name} | {value} | {g.comparison} {g.threshold} | {g.verdict} |")
    return "\n".join(lines)


def _gate_check(gate) -> dg.AssetCheckResult:
    # Non-blocking: a gate that does not pass decides the week (reject or hold), it is not an error.
    return dg.AssetCheckResult(
        check_name=f"gate_{gate.name}",
        passed=gate.verdict == "pass",
        severity=dg.AssetCheckSeverity.ERROR if gate.verdict == "fail" else dg.AssetCheckSeverity.WARN,
        metadata={
            "value": gate.value,
            "threshold": gate.threshold,
            "comparison": gate.comparison,
            "verdict": gate.verdict,
            "detail": gate.detail[:500],
            "lift": gate.lift,
            "rule": GATE_RULES[gate.name],
            **gate.extra,  # the statistic's parts (e.g. proxy_delta, success_delta)
        },
    )


def _evidence_metadata(report: GateReport) -> dict:
    """The customer-clustered intervals the calibration and shadow gates decided on, and the share
    of trials that raised, as numbers of their own (the gate table shows only each gate's value)."""
    out = {}
    for name, prefix in (("calibration_improvement", "calibration"), ("shadow_non_inferiority", "shadow")):
        extra = report.gate(name).extra
        for bound in ("ci_low", "ci_high"):
            if bound in extra:  # absent when the outcomes could not be paired (the gate says why)
                out[f"{prefix}_{bound}"] = extra[bound]
    errored = report.gate("errored_trials")
    if errored.value is not None:
        out["errored_trials_share"] = errored.value
    return out


def _failure_mode_check(decision: PromotionDecision, previous: PromotionDecision | None) -> dg.AssetCheckResult:
    rises = {j.mode: round(j.jump, 4) for j in decision.failure_mode_rises}
    return dg.AssetCheckResult(
        check_name="failure_modes_week_over_week",
        passed=not rises,
        severity=dg.AssetCheckSeverity.WARN,
        metadata={
            "previous_week": previous.week if previous else None,
            "rises": dg.MetadataValue.json(rises),
            "rule": "a mode's share of calibration trials up by more than 10 points since last week: investigate",
        },
    )


GATE_CHECKS = [dg.AssetCheckSpec(f"gate_{name}", asset="promotion_gate", blocking=False) for name in GATE_NAMES]
FAILURE_MODE_CHECK = dg.AssetCheckSpec("failure_modes_week_over_week", asset="promotion_gate", blocking=False)


@dg.asset(
    group_name="evaluation",
    kinds={"mlflow"},
    partitions_def=weekly_partitions,
    check_specs=[*GATE_CHECKS, FAILURE_MODE_CHECK],
)
def promotion_gate(
    context: dg.AssetExecutionContext,
    config: GateSettings,
    interaction_window: ValidatedWindow,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
    calibration_report: CalibrationReport,
    shadow_report: ShadowReport,
    home: HomeResource,
    mlflow: MLflowTracking,
):
    """The promotion decision with every gate's value, threshold and verdict (logged to MLflow on every decision)."""
    gate_config, floors = floored_gate_config(context, config, home.gate_floors)
    h, week, domain = home.home, context.partition_key, interaction_window.domain
    evidence = week_evidence(week, interaction_window, policy_base, grpo_candidate, calibration_report, shadow_report)
    previous = latest_decision(context.instance, previous_week(week), domain)
    pause = active_pause(InstancePauseLog(context.instance))
    decision = decide_week(evidence, gate_config, previous=previous, watch_pause=pause, dagster_run_id=context.run_id)
    record = decision_week_run(
        decision, evidence, dagster_run_id=context.run_id, dagster_run_url=home.dagster_run_url(context.run_id)
    )
    run_id = log_week_run(
        mlflow.uri(h),
        record,
        run_id=decision.mlflow_run_id,
        artifact_location=h.mlflow_artifacts.as_uri(),
        experiment_name=mlflow.experiment_for(domain),
    )
    report = decision.report
    for gate in report.gates:
        yield _gate_check(gate)
    yield _failure_mode_check(decision, previous)
    context.log.info(f"week {week}: {decision.decision} ({decision.reason})")
    yield dg.MaterializeResult(
        value=decision,
        metadata={
            "decision": decision.decision,
            "domain": domain,
            "reason": decision.reason,
            "baseline_kind": report.baseline_kind,
            "mlflow_run_id": run_id,
            "mlflow_run": dg.MetadataValue.url(mlflow.run_url(h, run_id)),
            "gates": dg.MetadataValue.md(_gate_table(report)),
            "gate_floors": dg.MetadataValue.json(floors),
            **_evidence_metadata(report),
            **decision_metadata(decision),
        },
    )
