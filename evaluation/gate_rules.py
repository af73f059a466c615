"""One function per promotion gate: the measured value, its threshold and the verdict.

Definitions (thresholds in `GateConfig`) are in `evaluation.gates`; each function reads
`GateInputs` only, so a gate can be tested on scripted outcomes without a model.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from evaluation.drift import largest_shifts, total_variation
from evaluation.gate_types import Gate, GateConfig, GateInputs, Verdict
from evaluation.stats import mcnemar_exact, paired_bootstrap_ci, roc_auc


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


def data_valid(inp: GateInputs) -> Gate:
    return _gate(
        "data_valid",
        1.0 if inp.data_valid else 0.0,
        1.0,
        "==",
        bool(inp.data_valid),
        inp.data_detail or ("validation suite passed" if inp.data_valid else "validation suite failed"),
    )


def shadow_non_inferiority(inp: GateInputs, cfg: GateConfig) -> Gate:
    cand, base = inp.candidate.shadow_success, inp.baseline.shadow_success
    if len(cand) == 0 or len(cand) != len(base):
        return _gate(
            "shadow_non_inferiority",
            None,
            cfg.shadow_margin,
            ">",
            False,
            f"shadow outcomes cannot be paired ({len(cand)} candidate vs {len(base)} baseline)",
        )
    ci = paired_bootstrap_ci(
        cand, base, n_resamples=cfg.bootstrap_resamples, confidence=cfg.shadow_confidence, seed=cfg.bootstrap_seed
    )
    return _gate(
        "shadow_non_inferiority",
        ci.low,
        cfg.shadow_margin,
        ">",
        ci.low > cfg.shadow_margin,
        f"{cfg.shadow_confidence:.0%} CI of success difference [{ci.low:+.4f}, {ci.high:+.4f}] "
        f"over {len(cand)} paired conversations",
        difference=ci.difference,
        ci_high=ci.high,
        n=len(cand),
    )


def calibration_improvement(inp: GateInputs, cfg: GateConfig) -> Gate:
    cand, base = inp.candidate.calibration_success, inp.baseline.calibration_success
    if len(cand) == 0 or len(cand) != len(base):
        return _gate(
            "calibration_improvement",
            None,
            cfg.calibration_min_margin,
            ">",
            False,
            f"calibration outcomes cannot be paired ({len(cand)} candidate vs {len(base)} baseline)",
        )
    delta = _rate(cand) - _rate(base)
    test = mcnemar_exact(cand, base)
    better = delta > cfg.calibration_min_margin
    significant = cfg.calibration_max_p is None or test.p_value <= cfg.calibration_max_p
    detail = (
        f"success {_rate(cand):.4f} vs {inp.baseline_kind} {_rate(base):.4f} "
        f"(McNemar p={test.p_value:.4g}, {test.only_a} won / {test.only_b} lost)"
    )
    if better and not significant:
        detail += f"; not significant at p <= {cfg.calibration_max_p}"
    return _gate(
        "calibration_improvement",
        delta,
        cfg.calibration_min_margin,
        ">",
        better and significant,
        detail,
        candidate=_rate(cand),
        baseline=_rate(base),
        p_value=test.p_value,
        n=len(cand),
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
        f"while verified success moved {success_delta:+.4f}: excess {excess:+.4f}" + (" -> alarm" if alarm else "")
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


def live_watch(inp: GateInputs) -> Gate:
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
