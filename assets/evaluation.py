"""Evaluation assets: held-out calibration and paired shadow replay, candidate against baseline."""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.
from functools import partial

import dagster as dg

from assets.handoffs import GRPOCandidate, PolicyBase, WindowSplits
from assets.partitions import week_end, weekly_partitions
from assets.resources import Curriculum, DuckDBStore, HomeResource
from assets.weekdata import at_level, split_records
from dataplane.splits import split_of
from dataplane.window import window_ids
from evaluation.eval_sets import (
    EvalSetError,
    build_shadow_set,
    calibration_eligible,
    current_calibration_set,
    freeze_calibration_set,
    shadow_counts,
)
from evaluation.replay import proxy_reward, reward_alignment
from evaluation.reports import CalibrationReport, PairReport, ShadowReport, evaluate_pair
from training.rewards import RewardWeights


class EvalConfig(dg.Config):
    """How candidate and baseline are rolled out (the same settings for both, the same customers)."""

    trials: int = 4  # k of pass^k: conversations per task, each with its own customer seed
    max_tasks: int = 200  # calibration tasks evaluated (the frozen set is larger when labels abound)
    shadow_size: int = 5000
    seed: int = 0
    max_turns: int = 12
    compact: bool = True  # short tool results, as the curriculum's first level trains with
    max_new_tokens: int = 128


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


def alignment_evidence(labelled: list[dict], reward_weights: dict[str, float]) -> tuple[list[float], list[bool], dict]:
    """Proxy reward (priced with the weights the candidate trained with) and human verdict of each
    labelled record, and the alignment summary under those same weights."""
    weights = RewardWeights.from_dict(reward_weights)
    rewards = [proxy_reward(r, weights) for r in labelled]
    human = [bool(r["human_label"]["task_success"]) for r in labelled]
    summary = {k: v for k, v in reward_alignment(labelled, weights).items() if k != "skipped"}
    return rewards, human, summary


def run_reward_weights(grpo_candidate: GRPOCandidate) -> dict[str, float]:
    """The reward-weight overrides the candidate trained with; evaluation prices rewards the same way."""
    if not hasattr(grpo_candidate, "reward_weights"):
        # A candidate stored before its value carried the weights cannot be priced honestly.
        raise dg.Failure(
            f"grpo_candidate {grpo_candidate.path!r} does not say which reward weights trained it "
            "(materialized before they were recorded): retrain the week"
        )
    return dict(grpo_candidate.reward_weights)


def _report_metadata(report: PairReport) -> dict:
    cand, base = report.candidate.summary, report.baseline.summary
    ci = report.bootstrap_ci
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
        "mcnemar_p": report.mcnemar.p_value,
        "tool_call_tv": report.tool_call_tv,
        "candidate_vs_baseline": dg.MetadataValue.md("| metric | candidate | baseline |\n|---|---|---|\n" + rows),
    }


@dg.asset(
    group_name="evaluation",
    kinds={"pytorch", "duckdb"},
    partitions_def=weekly_partitions,
    check_specs=[dg.AssetCheckSpec("never_trained_on", asset="calibration_report", blocking=True)],
)
def calibration_report(
    context: dg.AssetExecutionContext,
    config: EvalConfig,
    window_splits: WindowSplits,
    policy_base: PolicyBase,
    grpo_candidate: GRPOCandidate,
    home: HomeResource,
    store: DuckDBStore,
    curriculum: Curriculum,
):
    """Candidate vs baseline on the frozen calibration set, plus reward alignment with human labels."""
    h = home.home
    splits = split_records(h, store, window_splits)
    with store.connect(h) as con:
        frozen = current_calibration_set(con)
        if frozen is None:
            eligible = calibration_eligible(splits["calibration"], split_of=_split_fn(window_splits))
            if not eligible:
                raise dg.Failure(
                    "no calibration-split interaction with gold and a human label yet: "
                    "the calibration set cannot be frozen (label more interactions)"
                )
            frozen = freeze_calibration_set(con, eligible, split_of=_split_fn(window_splits))
        records = frozen.records(con)
    yield _never_trained_on(splits, records)
    evaluated = at_level(records, curriculum.level)[: config.max_tasks]
    if not evaluated:
        raise dg.Failure(f"no calibration task at curriculum level {curriculum.level} among {len(records)} records")
    context.log.info(f"calibration: {len(evaluated)} tasks x {config.trials} trials, candidate and baseline")
    # The reward the candidate was trained on prices both the rollouts and the alignment evidence.
    weights = run_reward_weights(grpo_candidate)
    pair = evaluate_pair(
        grpo_candidate.path,
        policy_base.path,
        evaluated,
        k=config.trials,
        seed=config.seed,
        max_turns=config.max_turns,
        compact=config.compact,
        max_new_tokens=config.max_new_tokens,
        tools=curriculum.tools,
        reward_weights=weights,
    )
    labelled = [r for r in records if r.get("human_label")]
    rewards, human, alignment = alignment_evidence(labelled, weights)
    report = CalibrationReport(pair, frozen.version, frozen.set_hash, len(records), rewards, human, alignment, weights)
    yield dg.MaterializeResult(
        value=report,
        metadata={
            **_report_metadata(pair),
            "calibration_version": frozen.version,
            "calibration_rows": len(records),
            "reward_alignment_auc": alignment.get("auc"),
            "human_labels": len(labelled),
            "reward_weights": dg.MetadataValue.json(RewardWeights.from_dict(weights).to_dict()),
        },
    )


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
):
    """Candidate vs baseline replaying recorded held-out conversations, paired per conversation.

    The set is drawn from the whole stored log up to the week's end, newest first (a short window is
    topped up with older conversations); its metadata says how many came from the window.
    """
    h = home.home
    splits = split_records(h, store, window_splits)
    with store.connect(h) as con:
        try:
            shadow = build_shadow_set(
                con,
                context.partition_key,
                week_end(context.partition_key),
                size=config.shadow_size,
                split_of=_split_fn(window_splits),
            )
        except EvalSetError as err:
            raise dg.Failure(f"shadow set: {err}") from err
        records = shadow.records(con)
        found = shadow_counts(shadow, window_ids(con, window_splits.week), config.shadow_size)
    yield _never_trained_on(splits, records)
    context.log.info(
        f"shadow: {found['found']} conversations of {found['requested']} requested "
        f"({found['found_in_window']} in the window, {found['found_before_window']} before it), candidate and baseline"
    )
    records = at_level(records, curriculum.level)
    if not records:
        raise dg.Failure(f"no shadow conversation at curriculum level {curriculum.level}")
    pair = evaluate_pair(
        grpo_candidate.path,
        policy_base.path,
        records,
        k=1,
        seed=config.seed,
        max_turns=config.max_turns,
        compact=config.compact,
        max_new_tokens=config.max_new_tokens,
        tools=curriculum.tools,
        reward_weights=run_reward_weights(grpo_candidate),
    )
    report = ShadowReport(pair, context.partition_key, shadow.set_hash, len(records))
    yield dg.MaterializeResult(
        value=report,
        metadata={
            **_report_metadata(pair),
            "shadow_rows": len(records),
            **{f"shadow_{name}": count for name, count in found.items()},
        },
    )
