"""Evaluation assets: held-out calibration and paired shadow replay, candidate against baseline."""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.
from contextlib import nullcontext
from dataclasses import replace
from datetime import timedelta
from functools import partial
from pathlib import Path

import dagster as dg

from assets.configs import config_from_dataclass, dataclass_kwargs
from assets.handoffs import GRPOCandidate, PolicyBase, WindowSplits
from assets.partitions import week_end, weekly_partitions
from assets.resources import Curriculum, DuckDBStore, HomeResource, MLflowTracking
from assets.weekdata import at_level, split_records
from dataplane.splits import split_of
from dataplane.window import window_ids
from evaluation.calibration_versions import RefreshSettings, WeekCalibration, spread_over_customers, week_calibration
from evaluation.eval_sets import EvalSetError, ShadowSet, build_shadow_set, shadow_counts
from evaluation.reports import EvalSettings, PairReport, PairRun, judge_calibration, judge_shadow
from evaluation.week_alignment import WeekAlignment, read_week_labels
from tracking.traces import TraceSettings, TrialTraces, tracing_to, week_traces
from training.rewards import RewardWeights

# Declared once, on the evaluation room's and tracking's settings dataclasses; the Dagster configs
# are built from their fields, defaults and help texts.
_TraceConfig = config_from_dataclass(TraceSettings, "_TraceConfig", module=__name__)
EvalConfig = config_from_dataclass(
    EvalSettings,
    "EvalConfig",
    base=_TraceConfig,
    module=__name__,
    doc="How candidate and baseline are rolled out (evaluation.reports.EvalSettings), and which trials "
    "become MLflow traces (tracking.traces.TraceSettings).",
)
CalibrationConfig = config_from_dataclass(
    RefreshSettings,
    "CalibrationConfig",
    base=EvalConfig,
    prefix="calibration_",
    module=__name__,
    doc="EvalConfig, plus when the week's first run freezes a new calibration version "
    "(evaluation.calibration_versions.RefreshSettings).",
)


def _split_fn(window_splits: WindowSplits):
    return partial(split_of, fractions=window_splits.fractions)


def _never_trained_on(splits: dict, evaluated: list[dict]) -> dg.AssetCheckResult:
    """No evaluated conversation's customer appears in the train split.

    Interaction ids cannot leak by construction (the sets are drawn from held-out splits); what can
    leak is a customer: a split rule that let one customer's conversations fall on both sides would
    let the candidate be judged on people it was trained on.
    """
    train_customers = {r["customer_id"] for r in splits["train"]}
    leaked = sorted(r["interaction_id"] for r in evaluated if r["customer_id"] in train_customers)
    return dg.AssetCheckResult(
        check_name="never_trained_on",
        passed=not leaked,
        metadata={
            "evaluated": len(evaluated),
            "customers": len({r["customer_id"] for r in evaluated}),
            "with_a_train_customer": len(leaked),
            "sample": dg.MetadataValue.json(leaked[:5]),
        },
    )


def run_reward_weights(grpo_candidate: GRPOCandidate) -> dict[str, float]:
    """The reward-weight overrides the candidate trained with; evaluation prices rewards the same way."""
    if not hasattr(grpo_candidate, "reward_weights"):
        # A candidate stored before its value carried the weights cannot be priced honestly.
        raise dg.Failure(
            f"grpo_candidate {grpo_candidate.path!r} does not say which reward weights trained it "
            "(materialized before they were recorded): retrain the week"
        )
    return dict(grpo_candidate.reward_weights)


def _week_traces(
    config: EvalConfig,
    split: str,
    week: str,
    uri: str,
    model: str,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
) -> TrialTraces | None:
    """The set's trace log into the week's MLflow run (the one training opened), or None when off."""
    if not config.log_traces:
        return None
    if policy_base.source == "champion" and policy_base.champion_version is not None:
        baseline = f"{model}/{policy_base.champion_version}"
    else:
        baseline = f"{model}/base:{Path(policy_base.path).name}"
    return week_traces(
        uri,
        grpo_candidate.mlflow_run_id,
        week=week,
        split=split,
        policy_versions={"candidate": f"{model}/candidate-{week}", "baseline": baseline},
        settings=TraceSettings(**dataclass_kwargs(config, TraceSettings)),
        seed=config.seed,
    )


def _trace_metadata(context: dg.AssetExecutionContext, traces: TrialTraces | None, uri: str) -> dict:
    """What was traced: per policy the traces sent, and how many the store holds after the flush
    (MLflow's export threads log a failed write and go on, so a shortfall is said here)."""
    if traces is None:
        return {"traces": dg.MetadataValue.json({"logged": False})}
    stored = traces.stored(uri)
    sent = sum(traces.logged.values())
    if stored < sent:
        context.log.warning(f"{traces.split}: {sent} traces sent to MLflow, {stored} stored")
    summary = {
        "experiment_id": traces.experiment_id,
        "run_id": traces.run_id,
        "sent": traces.logged,
        "stored": stored,
        "untraced_failures": traces.untraced_failures,
    }
    return {"traces": dg.MetadataValue.json(summary)}


def _report_metadata(report: PairReport) -> dict:
    """The comparison's numbers: the customer-clustered interval and sign test (what the gates
    read), the per-conversation ones beside them (which take trials as independent), and the
    trials that raised, counted by class and listed, so a broken week is visible on the asset."""
    cand, base = report.candidate.summary, report.baseline.summary
    ci, naive = report.clustered.ci, report.bootstrap_ci
    sign = report.clustered.sign
    rows = "\n".join(
        f"| {name} | {cand.get(name, float('nan')):.3f} | {base.get(name, float('nan')):.3f} |"
        for name in (
            "success_rate",
            "pass_hat_1",
            "pass_hat_2",
            "pass_hat_4",
            "actions_per_task",
            "policy_violation_rate",
            "reward_mean",
        )
        if name in cand
    )
    return {
        "pairs": report.pairs,
        "candidate_success": cand["success_rate"],
        "baseline_success": base["success_rate"],
        "difference": ci.difference,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "customers": report.clustered.clusters,
        "customers_won": sign.won,
        "customers_lost": sign.lost,
        "customer_sign_p": sign.p_value,
        "per_trial_ci_low": naive.low,
        "per_trial_ci_high": naive.high,
        "per_trial_mcnemar_p": report.mcnemar.p_value,
        "tool_call_tv": report.tool_call_tv,
        "errored_trials": cand["errored_trials"] + base["errored_trials"],
        "errored_by_class": dg.MetadataValue.json(
            {"candidate": report.candidate.errored_by_class, "baseline": report.baseline.errored_by_class}
        ),
        "errored_sample": dg.MetadataValue.json(
            {"candidate": report.candidate.errored, "baseline": report.baseline.errored}
        ),
        "candidate_vs_baseline": dg.MetadataValue.md("| metric | candidate | baseline |\n|---|---|---|\n" + rows),
    }


def _pair_run(
    config: EvalConfig,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
    curriculum: Curriculum,
    domain: str,
    traces: TrialTraces | None,
) -> PairRun:
    """Both policies with the run's settings and the candidate's reward weights (evaluation prices
    rewards as training did), in the curriculum's form (its tools; its tool results' form unless
    the config sets `compact`); each policy's trials traced as they end when `traces` is on."""
    settings = EvalSettings(**dataclass_kwargs(config, EvalSettings))
    if settings.compact is None:
        settings = replace(settings, compact=curriculum.compact_for(domain))
    weights = run_reward_weights(grpo_candidate)
    return PairRun(grpo_candidate.path, policy_base.path, settings, weights, curriculum.tools_for(domain), traces)


def _tasks_at_level(records: list[dict], curriculum: Curriculum, domain: str, what: str) -> list[dict]:
    """The set's records at the run's curriculum level; none is an error (nothing to judge on)."""
    level = curriculum.level_for(domain)
    tasks = at_level(records, level)
    if not tasks:
        raise dg.Failure(f"no {what} at curriculum level {level} among {len(records)} records")
    return tasks


def _tracing(uri: str, traces: TrialTraces | None):
    """Each policy's conversations are traced as soon as they end, and written before the step ends."""
    return tracing_to(uri) if traces is not None else nullcontext()


def _week_calibration(con, week: str, config: CalibrationConfig, window_splits: WindowSplits) -> WeekCalibration:
    """The calibration version the week is pinned to, frozen first when enough eligible
    interactions accrued; none to evaluate on fails the step."""
    try:
        return week_calibration(
            con,
            week,
            before=week_end(week),
            refresh_after=config.calibration_refresh_after,
            split_of=_split_fn(window_splits),
            domain=window_splits.domain,
        )
    except ValueError as err:  # EvalSetError, or a calibration_refresh_after below 1
        raise dg.Failure(f"week {week}: no calibration version to evaluate on: {err}") from err


@dg.asset(
    group_name="evaluation",
    kinds={"pytorch", "duckdb"},
    partitions_def=weekly_partitions,
    check_specs=[dg.AssetCheckSpec("never_trained_on", asset="calibration_report", blocking=True)],
)
def calibration_report(
    context: dg.AssetExecutionContext,
    config: CalibrationConfig,
    window_splits: WindowSplits,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
    home: HomeResource,
    store: DuckDBStore,
    curriculum: Curriculum,
    mlflow: MLflowTracking,
):
    """Candidate vs baseline on the week's calibration version, plus the week's reward alignment.

    The version is the one the week is pinned to (a re-run of the week uses it again); a new one is
    frozen first when enough eligible interactions accrued (`calibration_refresh_after`). Reward
    alignment scores the proxy reward against the labels of the interactions served this week.
    """
    h, week, domain = home.home, context.partition_key, window_splits.domain
    # Refused before a version is frozen: the candidate's reward weights price the rollouts and the alignment.
    run_reward_weights(grpo_candidate)
    end = week_end(week)
    with store.connect(h) as con:
        chosen = _week_calibration(con, week, config, window_splits)
        records = chosen.version.records(con)
        labels = read_week_labels(con, week, end - timedelta(days=7), end)
    yield _never_trained_on(split_records(h, store, window_splits), records)
    tasks = spread_over_customers(_tasks_at_level(records, curriculum, domain, "calibration task"), config.max_tasks)
    context.log.info(f"calibration {chosen.version.version}: {len(tasks)} tasks x {config.trials} trials")
    uri = mlflow.uri(h)
    traces = _week_traces(config, "calibration", week, uri, mlflow.model_for(domain), policy_base, grpo_candidate)
    with _tracing(uri, traces):  # one call rolls both policies out on the same tasks of the one version
        run = _pair_run(config, policy_base, grpo_candidate, curriculum, domain, traces)
        report, alignment = judge_calibration(run, chosen.version, len(records), tasks, labels)
    yield dg.MaterializeResult(
        value=report,
        metadata={
            **_report_metadata(report.pair),
            **_calibration_metadata(chosen),
            **_alignment_metadata(alignment),
            "reward_weights": dg.MetadataValue.json(RewardWeights.from_dict(report.reward_weights).to_dict()),
            **_trace_metadata(context, traces, uri),
        },
    )


def _calibration_metadata(chosen: WeekCalibration) -> dict:
    version = chosen.version
    how = "pinned by an earlier run of this week" if chosen.pinned_before else "pinned by this run"
    return {
        "calibration_version": version.version,
        "calibration_set_hash": version.set_hash,
        "calibration_rows": version.rows,
        "calibration_created_at": version.created_at.isoformat(),
        "calibration_pin": how + (" (frozen now)" if chosen.frozen_now else ""),
        "calibration_new_eligible": chosen.new_eligible,
    }


def _alignment_metadata(alignment: WeekAlignment) -> dict:
    summary = alignment.summary()
    return {
        "labels_week": alignment.week,
        "human_labels": summary["n"],
        "label_rows": summary["labels"],
        "raters": dg.MetadataValue.json(list(alignment.tally.raters)),
        "rater_disagreements": summary["disagreements"],
        "disagreements": dg.MetadataValue.json(alignment.tally.disagreements[:20]),
        "reward_alignment_auc": summary["auc"],
        "reward_alignment_note": summary["auc_undefined"] or "",
        "verified_success_agreement": summary["agreement"],
        "labels_not_replayable": summary["skipped"],
    }


def _shadow_set(con, week: str, size: int, window_splits: WindowSplits) -> tuple[ShadowSet, list[dict], dict]:
    """The week's shadow set, its records, and how many were found in the window and before it;
    no set to replay fails the step."""
    try:
        shadow = build_shadow_set(
            con, week, week_end(week), size=size, split_of=_split_fn(window_splits), domain=window_splits.domain
        )
    except EvalSetError as err:
        raise dg.Failure(f"shadow set: {err}") from err
    found = shadow_counts(shadow, window_ids(con, window_splits.week, window_splits.domain), size)
    return shadow, shadow.records(con), found


@dg.asset(
    group_name="evaluation",
    kinds={"pytorch", "duckdb"},
    partitions_def=weekly_partitions,
    check_specs=[dg.AssetCheckSpec("never_trained_on", asset="shadow_report", blocking=True)],
)
def shadow_report(
    context: dg.AssetExecutionContext,
    config: EvalConfig,
    window_splits: WindowSplits,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
    home: HomeResource,
    store: DuckDBStore,
    curriculum: Curriculum,
    mlflow: MLflowTracking,
):
    """Candidate vs baseline replaying recorded held-out conversations, paired per conversation.

    The set is drawn from the whole stored log up to the week's end, newest first (a short window is
    topped up with older conversations); its metadata says how many came from the window.
    """
    h, week, domain = home.home, context.partition_key, window_splits.domain
    with store.connect(h) as con:
        shadow, records, found = _shadow_set(con, week, config.shadow_size, window_splits)
    yield _never_trained_on(split_records(h, store, window_splits), records)
    context.log.info(
        f"shadow: {found['found']} conversations of {found['requested']} requested "
        f"({found['found_in_window']} in the window, {found['found_before_window']} before it), both policies"
    )
    records = _tasks_at_level(records, curriculum, domain, "shadow conversation")
    uri = mlflow.uri(h)
    traces = _week_traces(config, "shadow", week, uri, mlflow.model_for(domain), policy_base, grpo_candidate)
    with _tracing(uri, traces):
        run = _pair_run(config, policy_base, grpo_candidate, curriculum, domain, traces)
        report = judge_shadow(run, week, shadow.set_hash, records)
    yield dg.MaterializeResult(
        value=report,
        metadata={
            **_report_metadata(report.pair),
            "shadow_rows": report.rows,
            **{f"shadow_{name}": count for name, count in found.items()},
            **_trace_metadata(context, traces, uri),
        },
    )
