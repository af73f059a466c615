"""Metrics over a policy's trials: success, pass^k, recovery, effort, tool mix, rewards.

A tool-call mix is a distribution over tool names, and its shift between two policies is their
total variation distance (`total_variation`): a candidate whose mix moves far from the champion's
is behaving differently in ways the success metrics may not show yet (e.g. it stopped
authenticating, or talks instead of acting), so the `tool_call_drift` gate holds such a run for a
person, and the live watch compares the champion's served mix with its evaluated one.

The trial metrics are pure functions of `Trial`s (their episodes and flags), so the same numbers come
out of a calibration run, a shadow replay or a test. `summarize` gives them stable flat names for
MLflow, so weeks and candidate/champion compare side by side.

An errored trial (`Trial.error`) is a failure in every rate, with an empty episode (no actions,
calls or violations observed); its reward is undefined, so reward means are over the scored trials
only. `errored_trials` counts them, by class in `errored_by_class`.
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from evaluation.failure_modes import failure_mode_shares, policy_violations
from evaluation.rollout import Trial

PASS_KS = (1, 2, 3, 4)


def distribution(names: Iterable[str]) -> dict[str, float]:
    """Shares of each name among all occurrences, sorted by name; empty input gives {}."""
    counts = Counter(names)
    total = sum(counts.values())
    return {name: counts[name] / total for name in sorted(counts)} if total else {}


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Total variation distance: half the L1 distance over the union of keys.

    0 for identical distributions, 1 for disjoint ones. Each input must sum to 1 (within 1e-6),
    except that an empty mapping stands for "no calls at all": the distance to an empty
    distribution is 1 unless both are empty (0).

    >>> total_variation({"a": 0.5, "b": 0.5}, {"a": 1.0})
    0.5
    """
    for label, dist in (("p", p), ("q", q)):
        total = sum(dist.values())
        if dist and abs(total - 1.0) > 1e-6:
            raise ValueError(f"{label} is not a distribution: its shares sum to {total}")
        if any(v < 0 for v in dist.values()):
            raise ValueError(f"{label} has a negative share: {dict(dist)}")
    if not p and not q:
        return 0.0
    if not p or not q:
        return 1.0
    # fsum: the correctly rounded sum does not depend on the (hash-seeded) order of the keys, so the
    # same two distributions give the same distance in every process.
    return 0.5 * math.fsum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def largest_shifts(p: Mapping[str, float], q: Mapping[str, float], top: int = 3) -> list[tuple[str, float, float]]:
    """The `top` names whose share moved most from `q` to `p`, as (name, share in q, share in p):
    what a person reviewing a drift reads first.

    >>> largest_shifts({"a": 0.75, "b": 0.25}, {"a": 0.5, "c": 0.5}, top=2)
    [('c', 0.5, 0.0), ('a', 0.5, 0.75)]
    """
    names = sorted(set(p) | set(q), key=lambda k: (-abs(p.get(k, 0.0) - q.get(k, 0.0)), k))
    return [(k, q.get(k, 0.0), p.get(k, 0.0)) for k in names[:top] if p.get(k, 0.0) != q.get(k, 0.0)]


def success_rate(trials: Sequence[Trial]) -> float:
    """Fraction of trials that are a verified success (0.0 for no trials would hide a bug: raises)."""
    if not trials:
        raise ValueError("success rate of no trials is undefined")
    return sum(t.success for t in trials) / len(trials)


def successes_by_task(trials: Iterable[Trial]) -> dict[str, list[bool]]:
    """Per record id, its trials' success flags in trial order."""
    by_task: dict[str, list[tuple[int, bool]]] = defaultdict(list)
    for t in trials:
        by_task[t.record_id].append((t.trial, t.success))
    return {rid: [ok for _, ok in sorted(flags)] for rid, flags in by_task.items()}


def pass_hat_k(trials: Sequence[Trial], k: int) -> float:
    """pass^k: the chance that k trials of a task, drawn without replacement, all succeed.

    Unbiased estimator from tau-bench: per task with n trials and c successes, C(c, k) / C(n, k),
    averaged over tasks. Needs at least k trials of every task (ValueError otherwise). pass^1 is
    the success rate; pass^k falls with k unless the policy is consistent.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    by_task = successes_by_task(trials)
    if not by_task:
        raise ValueError("pass^k of no trials is undefined")
    short = {rid: len(flags) for rid, flags in by_task.items() if len(flags) < k}
    if short:
        raise ValueError(f"pass^{k} needs {k} trials per task; these have fewer: {dict(list(short.items())[:5])}")
    return sum(math.comb(sum(f), k) / math.comb(len(f), k) for f in by_task.values()) / len(by_task)


def pass_hat_ks(trials: Sequence[Trial], ks: Iterable[int] = PASS_KS) -> dict[int, float]:
    """pass^k for every k in `ks` that the trials support (k <= the fewest trials of a task)."""
    by_task = successes_by_task(trials)
    if not by_task:
        return {}
    most = min(len(f) for f in by_task.values())
    return {k: pass_hat_k(trials, k) for k in ks if k <= most}


def recovery_rate(trials: Sequence[Trial]) -> float | None:
    """Among trials with at least one failed tool call (an `Error:` result), the fraction that
    still succeeded; None when no trial had a failed call (nothing to recover from)."""
    hit = [t for t in trials if any(e.error for e in t.episode.audit_log)]
    return sum(t.success for t in hit) / len(hit) if hit else None


def actions_per_task(trials: Sequence[Trial]) -> float:
    """Mean number of agent actions per trial (tool calls other than talking and thinking)."""
    if not trials:
        raise ValueError("actions per task of no trials is undefined")
    return sum(len(t.episode.actions) for t in trials) / len(trials)


def tool_call_distribution(trials: Iterable[Trial]) -> dict[str, float]:
    """Share of each tool name among all calls in all trials (talking and thinking included:
    a policy that starts chatting instead of acting is a shift the gate should see)."""
    return distribution(e.tool for t in trials for e in t.episode.audit_log)


def tool_call_shift(candidate: Iterable[Trial], champion: Iterable[Trial]) -> float:
    """Total variation distance between two policies' tool-call distributions."""
    return total_variation(tool_call_distribution(candidate), tool_call_distribution(champion))


def errored_by_class(trials: Iterable[Trial]) -> dict[str, int]:
    """How many trials raised, by the exception's class name (sorted by name)."""
    return dict(sorted(Counter(t.error_class for t in trials if t.error_class is not None).items()))


def reward_totals(trials: Sequence[Trial]) -> dict[str, float]:
    """Mean total reward and the mean of each weighted reward term over the scored trials (an
    errored trial has no reward to average)."""
    trials = [t for t in trials if not t.errored]
    if not trials:
        raise ValueError("reward totals of no scored trials are undefined")
    sums: dict[str, float] = defaultdict(float)
    for t in trials:
        for name, value in t.reward_terms.items():
            sums[name] += value
    out = {"reward_mean": sum(t.reward for t in trials) / len(trials)}
    out.update({f"reward_term_{name}": total / len(trials) for name, total in sorted(sums.items())})
    return out


def policy_violation_rate(trials: Sequence[Trial]) -> float:
    """Fraction of trials (successful or not) with at least one policy violation."""
    if not trials:
        raise ValueError("violation rate of no trials is undefined")
    return sum(bool(policy_violations(t)) for t in trials) / len(trials)


def paired_outcomes(candidate: Iterable[Trial], champion: Iterable[Trial]) -> tuple[list[bool], list[bool]]:
    """Success flags of the two policies aligned by (record id, trial); both sides must match."""
    a = {t.key: t.success for t in candidate}
    b = {t.key: t.success for t in champion}
    if a.keys() != b.keys():
        missing = sorted(a.keys() ^ b.keys())[:5]
        raise ValueError(f"trials do not pair up: {len(a.keys() ^ b.keys())} unmatched, e.g. {missing}")
    keys = sorted(a)
    return [a[key] for key in keys], [b[key] for key in keys]


def summarize(trials: Sequence[Trial]) -> dict[str, Any]:
    """Every scalar metric under a stable flat name (`success_rate`, `pass_hat_2`, ...).

    Optional quantities that are undefined for these trials (recovery with no failed call,
    pass^k beyond the trials run, rewards when every trial errored) are left out rather than
    reported as a misleading 0. `errored_trials` is always there; `errored_<Class>` per class.
    """
    out: dict[str, Any] = {
        "trials": len(trials),
        "tasks": len({t.record_id for t in trials}),
        "success_rate": success_rate(trials),
        "actions_per_task": actions_per_task(trials),
        "turns_per_task": sum(t.turns for t in trials) / len(trials),
        "tool_error_rate": sum(t.tool_errors for t in trials) / max(1, sum(t.tool_calls for t in trials)),
        "policy_violation_rate": policy_violation_rate(trials),
    }
    out.update({f"pass_hat_{k}": value for k, value in pass_hat_ks(trials).items()})
    recovery = recovery_rate(trials)
    if recovery is not None:
        out["recovery_rate"] = recovery
    errors = errored_by_class(trials)
    out["errored_trials"] = sum(errors.values())
    # Class names become metric names: anything outside MLflow's key alphabet is replaced.
    out.update({f"errored_{re.sub(r'[^A-Za-z0-9_.-]', '_', name)}": n for name, n in errors.items()})
    if out["errored_trials"] < len(trials):
        out.update(reward_totals(trials))
    out.update({f"failure_share_{mode}": share for mode, share in failure_mode_shares(trials).items()})
    out.update({f"ended_by_{kind}": n / len(trials) for kind, n in _count(t.ended_by for t in trials).items()})
    return out


def _count(values: Iterable[str]) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for value in values:
        counts[value] += 1
    return dict(sorted(counts.items()))
