"""MLflow registration: the base model as the first champion, and the week's candidate when promoted."""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.
import dagster as dg

from assets.handoffs import GRPOCandidate, PolicyBase, ValidatedWindow, week_evidence
from assets.partitions import weekly_partitions
from assets.resources import HomeResource, MLflowTracking
from assets.retries import CONTENTION_RETRY
from assets.weekdata import run_domain
from evaluation.decision import FirstChampion, PromotionDecision, RegisteredVersion, champion_lineage
from evaluation.reports import CalibrationReport, ShadowReport
from tracking.registry import (
    CANARY,
    ModelDigestError,
    ModelDirError,
    NotPromotableError,
    canary_info,
    champion_info,
    find_week_version,
    register_base_champion,
    register_candidate,
)


@dg.asset(
    group_name="registry",
    kinds={"mlflow"},
    partitions_def=weekly_partitions,
    pool="retrain",
    retry_policy=CONTENTION_RETRY,
)
def first_champion(
    context: dg.AssetExecutionContext,
    policy_base: PolicyBase,
    interaction_window: ValidatedWindow,
    calibration_report: CalibrationReport,
    shadow_report: ShadowReport,
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
    h, domain = home.home, interaction_window.domain
    model = mlflow.model_for(domain)
    if policy_base.source == "champion":
        version, reason = None, f"a champion exists (v{policy_base.champion_version})"
    elif not policy_base.acts:
        # A domain's first tiny model that does not call tools would serve nobody: no champion yet.
        version, reason = None, "the base model does not call tools: not registered, no champion yet"
    else:
        evidence = week_evidence(
            context.partition_key, interaction_window, policy_base, grpo_candidate, calibration_report, shadow_report
        )
        lineage = champion_lineage("base", evidence, context.run_id)
        try:
            version = register_base_champion(
                mlflow.uri(h),
                policy_base.path,
                context.partition_key,
                lineage,
                moved_by=f"first_champion asset, week {context.partition_key} (Dagster run {context.run_id})",
                name=model,
                run_id=grpo_candidate.mlflow_run_id,
                artifact_location=h.mlflow_artifacts.as_uri(),
            )
        except ModelDirError as err:
            raise dg.Failure(str(err), allow_retries=False) from err
        reason = "registered the base model" if version is not None else "a champion exists"
    champion = champion_info(mlflow.uri(h), model)
    context.log.info(reason)
    return dg.MaterializeResult(
        value=FirstChampion(version, reason),
        metadata={"registered_version": version, "reason": reason, "champion": champion.version if champion else None},
    )


@dg.asset(
    group_name="registry",
    kinds={"mlflow"},
    partitions_def=weekly_partitions,
    pool="retrain",
    retry_policy=CONTENTION_RETRY,
    output_required=False,
)
def registered_model(
    context: dg.AssetExecutionContext,
    promotion_gate: PromotionDecision,
    first_champion: FirstChampion,
    home: HomeResource,
    mlflow: MLflowTracking,
):
    """The MLflow model version of this week's candidate, serving as `canary` beside the champion
    (after `first_champion`, so in week one the canary serves beside the base model it beat). The
    health sensor promotes it to champion or drops it on the traffic it serves
    (`monitoring.canary`); with no champion at all (a base model that calls no tools) it becomes
    champion at once, as there is nothing to compare it with.

    Not materialized when the decision is not 'promote': the week is recorded by `promotion_gate`,
    and a held week is registered later by `retrain approve`.
    """
    if promotion_gate.decision != "promote":
        context.log.info(f"not registered: decision {promotion_gate.decision} ({promotion_gate.reason})")
        return
    h, model = home.home, mlflow.model_for(run_domain(context))
    try:
        version = register_candidate(
            mlflow.uri(h),
            promotion_gate.model_path,
            context.partition_key,
            promotion_gate.lineage,
            promotion_gate.report,
            moved_by=f"registered_model asset: gates promoted week {context.partition_key} (Dagster run {context.run_id})",
            name=model,
            run_id=promotion_gate.mlflow_run_id,
            artifact_location=h.mlflow_artifacts.as_uri(),
            serve_as=CANARY,
        )
    except (ModelDirError, NotPromotableError, ModelDigestError) as err:
        # Not transient: retrying cannot help, so fail at once (MLflow outages still retry). A folder
        # changed since the decision is one of these: what was judged is not what would be uploaded.
        raise dg.Failure(str(err), allow_retries=False) from err
    champion, canary = champion_info(mlflow.uri(h), model), canary_info(mlflow.uri(h), model)
    yield dg.MaterializeResult(
        value=RegisteredVersion(model, version),
        metadata={
            "model": model,
            "version": version,
            "serves_as": CANARY if canary and canary.version == version else "champion",
            "champion": champion.version if champion else None,
            "previous_champion": champion.previous_version if champion else None,
            "policy_version": f"{model}/{version}",
        },
    )


@dg.asset_check(asset=registered_model, blocking=True)
def serves_this_version(context: dg.AssetCheckExecutionContext, home: HomeResource, mlflow: MLflowTracking):
    """After a registration, `canary` (or, with no champion before it, `champion`) points at this
    week's version (runs only when one was registered)."""
    week, model = context.run.tags["dagster/partition"], mlflow.model_for(run_domain(context))
    uri = mlflow.uri(home.home)
    version = find_week_version(uri, week, model)
    champion, canary = champion_info(uri, model), canary_info(uri, model)
    serving = {alias: info.version for alias, info in (("champion", champion), (CANARY, canary)) if info is not None}
    return dg.AssetCheckResult(
        passed=version is not None and version in serving.values(),
        metadata={"week": week, "version": version, **serving},
    )
