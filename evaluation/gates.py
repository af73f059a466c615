"""Promotion gates: one property each, with its measured value, threshold and verdict.

A candidate becomes `champion` only when every gate passes. The baseline is the current champion,
or the base model when there is none yet (so the first candidate must beat the base model).

Verdicts: 'pass', 'fail' (the week's candidate is rejected) or 'hold' (a person must look).
Decision: any fail -> 'reject'; else any hold -> 'hold'; else 'promote'. `approve` lifts the
`tool_call_drift` hold only (APPROVABLE_HOLDS): failures, and holds for missing evidence, stay.
`live_watch` holds every week while the daily watch has paused promotions; only resuming
promotions (`retrain resume`, which records who and why) lifts it, and `approve` then carries
that record onto the week it registers.

Each gate is one entry of `gate_registry.GATES` (its rule text, also in `GATE_RULES`, its function
in `gate_rules`, the `GateConfig` thresholds it reads), which fixes their order. Two need more words:
reward_alignment is not measurable with too few human labels (or one class) and then follows
`on_insufficient_labels` ('hold' by default), never a silent pass, saying how many labels would lift
it; reward_hacking_alarm puts the held-out proxy-reward gain in verified successes' worth and fires
when it outruns the verified-success gain (`gate_rules.reward_hacking_alarm`).

The calibration and shadow comparisons resample customers, not trials (`evaluation.stats`): a
customer's several tasks and trials are not independent evidence. `errored_trials` holds a week in
which too many trials raised to trust the rest (`gate_rules.errored_trials`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from evaluation.gate_registry import GATE_NAMES, GATE_RULES, GATES, GateEntry
from evaluation.gate_rules import reward_rise
from evaluation.gate_types import (
    APPROVABLE_HOLDS,
    Decision,
    Gate,
    GateConfig,
    GateInputs,
    GateReport,
    PolicyOutcomes,
    Verdict,
)
from evaluation.metrics import policy_violation_rate, tool_call_distribution
from evaluation.rollout import Trial

__all__ = [
    "APPROVABLE_HOLDS",
    "GATE_NAMES",
    "GATE_RULES",
    "GATES",
    "ApprovalError",
    "Decision",
    "Gate",
    "GateConfig",
    "GateEntry",
    "GateInputs",
    "GateReport",
    "PolicyOutcomes",
    "Verdict",
    "approve",
    "evaluate_gates",
    "outcomes_from_trials",
    "reward_rise",
]


class ApprovalError(ValueError):
    """`approve` cannot promote the report: a gate failed, a hold it may not lift remains, or
    nothing approvable is held. The message names each gate and what would lift it."""


def _paired(candidate: Sequence[Trial], baseline: Sequence[Trial]) -> tuple[list[Trial], list[Trial]]:
    a, b = {t.key: t for t in candidate}, {t.key: t for t in baseline}
    if a.keys() != b.keys():
        missing = sorted(a.keys() ^ b.keys())[:5]
        raise ValueError(f"trials do not pair up: {len(a.keys() ^ b.keys())} unmatched, e.g. {missing}")
    keys = sorted(a)
    return [a[k] for k in keys], [b[k] for k in keys]


def outcomes_from_trials(
    candidate_calibration: Sequence[Trial],
    baseline_calibration: Sequence[Trial],
    candidate_shadow: Sequence[Trial],
    baseline_shadow: Sequence[Trial],
) -> tuple[PolicyOutcomes, PolicyOutcomes]:
    """(candidate, baseline) outcomes from rollouts, success flags and rewards paired by (record, trial).

    Violation rates and tool mixes cover calibration and shadow trials together; each trial's
    cluster (customer) and error class ride along for the clustered statistics and `errored_trials`.
    """
    cal_c, cal_b = _paired(candidate_calibration, baseline_calibration)
    sha_c, sha_b = _paired(candidate_shadow, baseline_shadow)

    def one(cal: list[Trial], sha: list[Trial]) -> PolicyOutcomes:
        every = [*cal, *sha]
        return PolicyOutcomes(
            [t.success for t in cal],
            [t.success for t in sha],
            policy_violation_rate(every),
            tool_call_distribution(every),
            [t.reward for t in cal],
            [t.reward for t in sha],
            [t.cluster for t in cal],
            [t.cluster for t in sha],
            [t.error_class for t in cal],
            [t.error_class for t in sha],
        )

    return one(cal_c, sha_c), one(cal_b, sha_b)


def evaluate_gates(inputs: GateInputs, config: GateConfig | None = None) -> GateReport:
    """Every registered gate (`GATES`), in their order."""
    cfg = config or GateConfig()
    return GateReport(tuple(entry.evaluate(inputs, cfg) for entry in GATES), inputs.baseline_kind, cfg)


def approve(report: GateReport, approver: str, resumed: Mapping[str, Any] | None = None) -> GateReport:
    """A person's approval of a held report: the approvable holds (APPROVABLE_HOLDS) become 'pass'.

    `resumed` is the record of the person who resumed promotions since the live watch paused them
    (`evaluation.pause.last_resume`: None while a pause is in force). With it, a `live_watch` hold
    becomes 'pass' naming who resumed and why; without it that hold stays, whatever the approver says.

    Raises ApprovalError, naming each gate in the way and what would lift it, when a gate failed
    (approval cannot overrule evidence), when any other hold remains (e.g. too few human labels:
    only more labels lift it; the live watch's pause: only `retrain resume` lifts it), or when
    nothing is held.
    """
    if not approver.strip():
        raise ApprovalError("an approval needs the approver's name")
    failed = [g for g in report.gates if g.verdict == "fail"]
    if failed:
        raise ApprovalError("cannot approve: gates failed: " + "; ".join(f"{g.name}: {g.detail}" for g in failed))
    held = [g for g in report.gates if g.verdict == "hold"]
    lifted = {g.name: f"{g.detail}; approved by {approver}" for g in held if g.name in APPROVABLE_HOLDS}
    if resumed is not None:
        lifted.update(
            {
                g.name: f"{g.detail}; promotions resumed by {resumed['lifted_by']} at {resumed['lifted_at']} "
                f"({resumed.get('reason', '')})"
                for g in held
                if g.name == "live_watch"
            }
        )
    remaining = [g for g in held if g.name not in lifted]
    if remaining:
        raise ApprovalError(
            "cannot promote: "
            + "; ".join(f"{g.name} held: {g.lift or g.detail}" for g in remaining)
            + (f" (approval lifts only {', '.join(APPROVABLE_HOLDS)})")
        )
    if not lifted:
        raise ApprovalError(f"nothing to approve: decision is {report.decision!r}")
    gates = tuple(
        replace(g, verdict="pass", detail=lifted[g.name], lift="") if g.name in lifted else g for g in report.gates
    )
    return replace(report, gates=gates, approved_by=approver)
