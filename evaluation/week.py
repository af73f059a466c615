"""A week's promotion decision, assembled in plain code: the gates, the failure-mode comparison
with last week, the evidence summary and the candidate's lineage.

`promotion_gate` hands in what the week was judged on (`WeekEvidence`), the thresholds, last
week's decision and the live watch's pause; it only turns the result into Dagster checks and
metadata. The week's MLflow run is written from the same decision (`evaluation.run_log.decision_week_run`).
"""

from __future__ import annotations

from evaluation.decision import PromotionDecision
from evaluation.failure_modes import compare_weeks
from evaluation.gates import GateConfig, GateInputs, evaluate_gates
from evaluation.lineage import WeekEvidence, champion_lineage
from evaluation.pause import Pause
from evaluation.reports import CalibrationReport, ShadowReport, outcomes
from training.rewards import RewardWeights


def evidence_summaries(calibration: CalibrationReport, shadow: ShadowReport) -> dict:
    """Numeric summaries per set and policy ({set: {policy: {metric: value}}})."""
    return {
        name: {
            policy: {
                k: float(v)
                for k, v in getattr(rep.pair, policy).summary.items()
                if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            for policy in ("candidate", "baseline")
        }
        for name, rep in (("calibration", calibration), ("shadow", shadow))
    }


def decide_week(
    evidence: WeekEvidence,
    gate_config: GateConfig,
    *,
    previous: PromotionDecision | None,
    watch_pause: Pause | None,
    dagster_run_id: str,
) -> PromotionDecision:
    """Every gate on the week's evidence, the modes that rose since `previous` (last week's
    decision of the domain, None: nothing to compare), and the lineage registration will carry."""
    calibration = evidence.calibration
    candidate, baseline = outcomes(calibration.pair, evidence.shadow.pair)
    report = evaluate_gates(
        GateInputs(
            candidate,
            baseline,
            data_valid=bool(evidence.validation_success),
            proxy_rewards=calibration.proxy_rewards,
            human_success=calibration.human_success,
            training_rewards=list(evidence.reward_curve),
            baseline_kind="champion" if evidence.baseline_kind == "champion" else "base_model",
            data_detail=", ".join(evidence.failed_expectations),
            success_worth=RewardWeights.from_dict(calibration.reward_weights).success_worth(),
            labels_week=calibration.alignment.get("labels_week", ""),
            watch_pause=watch_pause,
        ),
        gate_config,
    )
    modes = dict(calibration.pair.candidate.failure_modes)
    rises = tuple(compare_weeks(previous.failure_modes, modes, gate_config.failure_mode_jump)) if previous else ()
    return PromotionDecision(
        evidence.week,
        report,
        evidence.candidate_path,
        champion_lineage("candidate", evidence, dagster_run_id),
        evidence.candidate_run_id,
        evidence_summaries(calibration, evidence.shadow),
        modes,
        rises,
    )
