"""One function per promotion gate: the measured value, its threshold and the verdict.

Each is registered, with the rule text users see and the `GateConfig` settings it reads, in
`evaluation.gate_registry`, which fixes the gates' order. Every function takes `(GateInputs,
GateConfig)` and reads nothing else, so a gate can be tested on scripted outcomes without a model.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from evaluation.drift import largest_shifts, total_variation
from evaluation.gate_types import Gate, GateConfig, GateInputs, PolicyOutcomes, Verdict
from evaluation.rollout import TASK_CLUSTER_PREFIX
from evaluation.stats import ClusteredComparison, clustered_comparison, mcnemar_exact, roc_auc


def _gate(
    name: str,
    value: float | None,
    threshold: float,
    comparison: str,
    passed: bool,
    detail: str,
    on_fail: Verdict = "fail",
    lift: str = "",
    **extra: float,
) -> Gate:
    return Gate(
        name,
        None if value is None else float(value),
        float(threshold),
        comparison,
        passed,
        "pass" if passed else on_fail,
        detail,
        {k: float(v) for k, v in extra.items()},
        "" if passed else lift,
    )


def _rate(flags: Sequence[bool]) -> float:
    return float(np.mean(np.asarray(flags, dtype=float))) if len(flags) else 0.0


def data_valid(inp: GateInputs, cfg: GateConfig | None = None) -> Gate:
    # No threshold: `cfg` is taken only so the registry calls every gate alike.
    return _gate(
        "data_valid",
        1.0 if inp.data_valid else 0.0,
        1.0,
        "==",
        bool(inp.data_valid),
        inp.data_detail or ("validation suite passed" if inp.data_valid else "validation suite failed"),
    )


def _clusters(inp: GateInputs, which: str) -> tuple[list[str] | None, str]:
    """The cluster of each paired trial of set `which` ("calibration" or "shadow") and how they were
    found; None when candidate and baseline disagree on them (the trials are not the same ones)."""
    n = len(getattr(inp.candidate, f"{which}_success"))
    cand, base = list(getattr(inp.candidate, f"{which}_clusters")), list(getattr(inp.baseline, f"{which}_clusters"))
    if cand and base and cand != base:
        return None, "candidate and baseline trials name different customers"
    keys = cand or base
    if not keys:
        return [f"trial:{i}" for i in range(n)], "no customer ids given: every trial counted as its own cluster"
    by_task = sum(k.startswith(TASK_CLUSTER_PREFIX) for k in keys)
    how = f"{len(set(keys))} customers"
    if by_task:
        how += f"; {by_task} trials of records without a customer id clustered by task"
    return keys, how


def _clustered_extra(cmp: ClusteredComparison) -> dict[str, float]:
    return {
        "difference": cmp.ci.difference,
        "ci_low": cmp.ci.low,
        "ci_high": cmp.ci.high,
        "p_value": cmp.sign.p_value,
        "won": cmp.sign.won,
        "lost": cmp.sign.lost,
        "tied": cmp.sign.tied,
        "clusters": cmp.clusters,
        "n": cmp.trials,
    }


def _clustered_detail(cmp: ClusteredComparison, confidence: float, how: str) -> str:
    return (
        f"{confidence:.0%} CI over customers of the success difference [{cmp.ci.low:+.4f}, {cmp.ci.high:+.4f}] "
        f"({cmp.trials} paired trials, {how}); customers won/lost/tied {cmp.sign.won}/{cmp.sign.lost}/"
        f"{cmp.sign.tied}, sign test p={cmp.sign.p_value:.4g}"
    )


def shadow_non_inferiority(inp: GateInputs, cfg: GateConfig) -> Gate:
    """Not worse on replayed conversations: the lower bound of the customer-clustered paired
    bootstrap CI of candidate - baseline success clears `shadow_margin` (resampling customers, as a
    customer's conversations are not independent of each other)."""
    cand, base = inp.candidate.shadow_success, inp.baseline.shadow_success
    clusters, how = _clusters(inp, "shadow")
    if len(cand) == 0 or len(cand) != len(base) or clusters is None:
        return _gate(
            "shadow_non_inferiority",
            None,
            cfg.shadow_margin,
            ">",
            False,
            f"shadow outcomes cannot be paired ({len(cand)} candidate vs {len(base)} baseline; {how})",
        )
    cmp = clustered_comparison(
        cand,
        base,
        clusters,
        n_resamples=cfg.bootstrap_resamples,
        confidence=cfg.shadow_confidence,
        seed=cfg.bootstrap_seed,
    )
    return _gate(
        "shadow_non_inferiority",
        cmp.ci.low,
        cfg.shadow_margin,
        ">",
        cmp.ci.low > cfg.shadow_margin,
        _clustered_detail(cmp, cfg.shadow_confidence, how),
        **_clustered_extra(cmp),
    )


def calibration_improvement(inp: GateInputs, cfg: GateConfig) -> Gate:
    """Strictly better on the calibration set, beyond what resampling customers explains.

    The value is the lower bound of the customer-clustered paired bootstrap CI of candidate -
    baseline success; it must exceed `calibration_min_margin`. With `calibration_max_p` the
    customer-level sign test must also be significant. The per-trial McNemar test (trials taken as
    independent, which they are not) is reported beside it for comparison, and decides nothing.
    """
    cand, base = inp.candidate.calibration_success, inp.baseline.calibration_success
    clusters, how = _clusters(inp, "calibration")
    if len(cand) == 0 or len(cand) != len(base) or clusters is None:
        return _gate(
            "calibration_improvement",
            None,
            cfg.calibration_min_margin,
            ">",
            False,
            f"calibration outcomes cannot be paired ({len(cand)} candidate vs {len(base)} baseline; {how})",
        )
    cmp = clustered_comparison(
        cand,
        base,
        clusters,
        n_resamples=cfg.bootstrap_resamples,
        confidence=cfg.calibration_confidence,
        seed=cfg.bootstrap_seed,
    )
    naive = mcnemar_exact(cand, base)
    better = cmp.ci.low > cfg.calibration_min_margin
    significant = cfg.calibration_max_p is None or cmp.sign.p_value <= cfg.calibration_max_p
    detail = (
        f"success {_rate(cand):.4f} vs {inp.baseline_kind} {_rate(base):.4f}, difference {cmp.ci.difference:+.4f}; "
        + _clustered_detail(cmp, cfg.calibration_confidence, how)
        + f" (per-trial McNemar, trials taken as independent: p={naive.p_value:.4g}, {naive.only_a} won / "
        f"{naive.only_b} lost)"
    )
    if not better and cmp.ci.difference > cfg.calibration_min_margin:
        detail += (
            f"; the difference is not clear of the margin {cfg.calibration_min_margin} once customers are resampled"
        )
    if better and not significant:
        detail += f"; not significant at p <= {cfg.calibration_max_p}"
    return _gate(
        "calibration_improvement",
        cmp.ci.low,
        cfg.calibration_min_margin,
        ">",
        better and significant,
        detail,
        candidate=_rate(cand),
        baseline=_rate(base),
        naive_p_value=naive.p_value,
        **_clustered_extra(cmp),
    )


def _errors(side: PolicyOutcomes) -> tuple[list[str], int]:
    """The classes of what one policy's trials raised (one entry per errored trial), and its trials."""
    errors = [e for e in (*side.calibration_errors, *side.shadow_errors) if e is not None]
    return errors, len(side.calibration_success) + len(side.shadow_success)


def errored_trials(inp: GateInputs, cfg: GateConfig) -> Gate:
    """Enough of the evaluation ran for its numbers to mean something.

    A trial that raised (simulator, environment, policy, reward) is a failure nobody judged. A few
    are noise the other gates absorb; more than `max_errored_share` of either policy's calibration
    and shadow trials means the evidence is a broken harness or a broken model, and the week holds
    until what raised is fixed and the week is re-run. The larger of the two policies' shares
    decides, so a candidate that breaks on its own is not averaged away by a clean baseline.
    """
    (cand, cand_n), (base, base_n) = _errors(inp.candidate), _errors(inp.baseline)
    if cand_n == 0 or base_n == 0:
        return _gate(
            "errored_trials",
            None,
            cfg.max_errored_share,
            "<=",
            False,
            f"no trials to count ({cand_n} candidate, {base_n} baseline)",
            on_fail="hold",
        )
    share = max(len(cand) / cand_n, len(base) / base_n)
    by_class = Counter([*cand, *base])
    classes = ", ".join(f"{name} {n}" for name, n in sorted(by_class.items(), key=lambda kv: (-kv[1], kv[0])))
    detail = (
        f"candidate {len(cand)} of {cand_n} trials errored ({len(cand) / cand_n:.4f}), baseline {len(base)} of "
        f"{base_n} ({len(base) / base_n:.4f})" + (f": {classes}" if classes else "")
    )
    passed = share <= cfg.max_errored_share
    if not passed:
        detail += f"; above {cfg.max_errored_share}: held"
    return _gate(
        "errored_trials",
        share,
        cfg.max_errored_share,
        "<=",
        passed,
        detail,
        on_fail="hold",
        lift=f"fix what raised ({classes}; calibration_report and shadow_report list the errored trials) and re-run "
        "the week",
        candidate_errored=len(cand),
        baseline_errored=len(base),
        candidate_trials=cand_n,
        baseline_trials=base_n,
        # Class names become metric names (gate/errored_trials/errored_<Class>): keep MLflow's key alphabet.
        **{f"errored_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}": n for name, n in by_class.items()},
    )


def policy_violations_not_up(inp: GateInputs, cfg: GateConfig) -> Gate:
    delta = inp.candidate.violation_rate - inp.baseline.violation_rate
    return _gate(
        "policy_violations_not_up",
        delta,
        cfg.violation_tolerance,
        "<=",
        delta <= cfg.violation_tolerance,
        f"violation rate {inp.candidate.violation_rate:.4f} vs {inp.baseline_kind} {inp.baseline.violation_rate:.4f}",
        candidate=inp.candidate.violation_rate,
        baseline=inp.baseline.violation_rate,
    )


def reward_alignment(inp: GateInputs, cfg: GateConfig) -> Gate:
    scores, labels = list(inp.proxy_rewards), [bool(x) for x in inp.human_success]
    if len(scores) != len(labels):
        return _gate(
            "reward_alignment",
            None,
            cfg.min_reward_alignment,
            ">=",
            False,
            f"{len(scores)} proxy rewards but {len(labels)} human labels",
        )
    positives = sum(labels)
    if len(labels) < cfg.min_human_labels or positives in (0, len(labels)):
        return _gate(
            "reward_alignment",
            None,
            cfg.min_reward_alignment,
            ">=",
            False,
            f"not measurable: {len(labels)} human labels{_of_week(inp.labels_week)} ({positives} successes), need >= "
            f"{cfg.min_human_labels} with both outcomes; rule: {cfg.on_insufficient_labels}",
            on_fail=cfg.on_insufficient_labels,  # type: ignore[arg-type]
            lift=_labels_needed(len(labels), positives, cfg.min_human_labels, inp.labels_week),
            labels=len(labels),
            positives=positives,
        )
    auc = roc_auc(scores, labels)
    return _gate(
        "reward_alignment",
        auc,
        cfg.min_reward_alignment,
        ">=",
        auc >= cfg.min_reward_alignment,
        f"ROC AUC of proxy reward vs human task_success over {len(labels)} labels{_of_week(inp.labels_week)}",
        labels=len(labels),
        positives=positives,
    )


def reward_rise(curve: Sequence[float]) -> float:
    """Mean of the last quarter of the curve minus the mean of the first quarter (>= 1 point each)."""
    values = np.asarray(curve, dtype=float)
    n = max(1, len(values) // 4)
    return float(values[-n:].mean() - values[:n].mean())


def _held_out(side) -> tuple[list[float], list[bool]]:
    return (
        [*side.calibration_reward, *side.shadow_reward],
        [bool(x) for x in (*side.calibration_success, *side.shadow_success)],
    )


def _errored_pairs(inp: GateInputs) -> list[bool]:
    """Per held-out trial (calibration then shadow): whether either policy's trial there raised."""

    def flags(side: PolicyOutcomes) -> list[bool]:
        out = []
        for errors, success in (
            (side.calibration_errors, side.calibration_success),
            (side.shadow_errors, side.shadow_success),
        ):
            out += [e is not None for e in errors] if errors else [False] * len(success)
        return out

    cand, base = flags(inp.candidate), flags(inp.baseline)
    return [a or b for a, b in zip(cand, base)] if len(cand) == len(base) else []


def _keep(values: list, errored: list[bool]) -> list:
    return [v for v, bad in zip(values, errored) if not bad] if len(values) == len(errored) else values


def reward_hacking_alarm(inp: GateInputs, cfg: GateConfig) -> Gate:
    """Proxy reward gained on the held-out sets that verified success does not account for.

    Over every calibration and shadow trial, candidate minus baseline: `proxy_delta` (mean proxy
    reward) and `success_delta` (verified success rate). Expressed in successes' worth
    (`proxy_delta / success_worth`, one success = `completed - failed` under the run's weights),
    the reward gain should not outrun the success gain: the statistic is
    `excess = proxy_delta / success_worth - success_delta`, and the alarm fires when
    `excess > hacking_excess_max`. A candidate that games a shaping term (pay without a verified
    success) shows a positive excess even when its success also rose. The training curve must be
    usable (>= 2 finite points): its rise is reported, the held-out evidence decides.
    """
    curve = list(inp.training_rewards)
    cand_reward, cand_success = _held_out(inp.candidate)
    base_reward, base_success = _held_out(inp.baseline)
    # An errored trial has no reward (NaN): its pair is left out of both sides, success included.
    errored = _errored_pairs(inp)
    left_out = sum(errored)
    cand_reward, cand_success, base_reward, base_success = (
        _keep(v, errored) for v in (cand_reward, cand_success, base_reward, base_success)
    )
    unusable = []
    if len(curve) < 2 or not np.all(np.isfinite(curve)):
        unusable.append(f"training reward curve unusable ({len(curve)} points)")
    if not cand_reward or len(cand_reward) != len(cand_success) or len(base_reward) != len(base_success):
        unusable.append(
            f"held-out proxy rewards do not match the trials ({len(cand_reward)} rewards for {len(cand_success)} "
            f"candidate trials, {len(base_reward)} for {len(base_success)} baseline trials)"
        )
    elif not (np.all(np.isfinite(cand_reward)) and np.all(np.isfinite(base_reward))):
        unusable.append("held-out proxy rewards are not all finite")
    if inp.success_worth <= 0:
        unusable.append(f"a verified success is worth {inp.success_worth} reward (completed - failed must be > 0)")
    if unusable:
        return _gate("reward_hacking_alarm", None, cfg.hacking_excess_max, "<=", False, "; ".join(unusable))
    proxy_delta = float(np.mean(cand_reward) - np.mean(base_reward))
    success_delta = _rate(cand_success) - _rate(base_success)
    excess = proxy_delta / inp.success_worth - success_delta
    alarm = excess > cfg.hacking_excess_max
    detail = (
        f"held-out proxy reward moved {proxy_delta:+.3f} ({proxy_delta / inp.success_worth:+.4f} successes' worth) "
        f"while verified success moved {success_delta:+.4f}: excess {excess:+.4f}"
        + (f" ({left_out} pairs with an errored trial left out)" if left_out else "")
        + (" -> alarm" if alarm else "")
    )
    return _gate(
        "reward_hacking_alarm",
        excess,
        cfg.hacking_excess_max,
        "<=",
        not alarm,
        detail,
        proxy_delta=proxy_delta,
        success_delta=success_delta,
        success_worth=inp.success_worth,
        training_reward_rise=reward_rise(curve),
        n=len(cand_success),
        errored_pairs_left_out=left_out,
    )


def _shifts(candidate: dict[str, float], baseline: dict[str, float]) -> str:
    moved = largest_shifts(candidate, baseline)
    if not moved:
        return ""
    return " (" + ", ".join(f"{name} {before:.3f} -> {after:.3f}" for name, before, after in moved) + ")"


def tool_call_drift(inp: GateInputs, cfg: GateConfig) -> Gate:
    tv = total_variation(inp.candidate.tool_distribution, inp.baseline.tool_distribution)
    return _gate(
        "tool_call_drift",
        tv,
        cfg.max_tool_drift,
        "<=",
        tv <= cfg.max_tool_drift,
        f"total variation {tv:.4f} between candidate and {inp.baseline_kind} tool-call mixes"
        + _shifts(inp.candidate.tool_distribution, inp.baseline.tool_distribution)
        + ("" if tv <= cfg.max_tool_drift else "; held for a person to approve"),
        on_fail="hold",
        lift="a person reviews the tool-call mix and approves (retrain approve --week WEEK --by NAME)",
    )


def live_watch(inp: GateInputs, cfg: GateConfig | None = None) -> Gate:
    # Its threshold is the watch's (WatchSettings), carried by the pause: `cfg` is taken only so the
    # registry calls every gate alike.
    pause = inp.watch_pause
    if pause is None:
        return _gate("live_watch", 0.0, 0.0, "==", True, "promotions are not paused by the live watch")
    return _gate(
        "live_watch",
        1.0,
        0.0,
        "==",
        False,
        pause.summary,
        on_fail="hold",
        lift=f"promotions paused by the live watch since {pause.since} ({pause.champion}): a person reads the served "
        "traffic and runs `retrain resume --by NAME --reason TEXT`, then `retrain approve --week WEEK --by NAME` "
        "registers this week (or re-run it)",
        action_drift_tv=pause.value,
        max_action_drift=pause.threshold,
        days_paused=len(pause.days),
    )


def _of_week(week: str) -> str:
    return f" of week {week}'s interactions" if week else ""


def _labels_needed(labels: int, positives: int, needed: int, week: str = "") -> str:
    """What would make the AUC measurable, in a person's terms (and, with the week, the commands)."""
    how = f" (retrain review export --week {week}, label, retrain review import; then re-run the week)" if week else ""
    if labels < needed:
        return f"{labels} human labels, {needed} needed: label {needed - labels} more{_of_week(week)}{how}"
    missing = "failures" if positives == labels else "successes"
    return f"all {labels} human labels share one outcome: label some {missing}{_of_week(week)}{how}"
