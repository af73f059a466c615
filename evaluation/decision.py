"""A week's promotion decision, assembled in plain code, and what a model version is registered with.

`decide_week` runs every gate on what the week was judged on (`WeekEvidence`), compares the
failure modes with last week's decision, summarises the evidence and builds the candidate's
lineage; `promotion_gate` only turns the result into Dagster checks and metadata, and the week's
MLflow run is written from the same decision (`tracking.run_log.decision_week_run`).

The decision (`PromotionDecision`) is handed to registration as the asset's value and recorded as
JSON in its materialization metadata (`to_dict`), which is where `retrain approve`, `retrain run`
and the demo read it back (`from_dict`): one record of the decision, kept by the orchestrator.

`ChampionLineage` is the evidence a version was judged on, as one typed value. `champion_lineage`
builds it, for the week's candidate and for the base model registered as the first champion
(`first_champion`). The registry writes it as the version's tags (`to_tags`); the health check,
the live watch and the demo read it back from a champion's tags (`from_tags`), so every tag name
and how its value is written lives here, once. Every field but the shadow estimate's inputs may be
None: versions registered before a field existed carry no tag for it, and the base model has no
week, run, digest or approval of its own (`to_tags` writes no tag for a None field: the
registry's `week` tag is what finds a week's candidate, so the base model must not carry one).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

from dataplane.hashing import model_digest
from dataplane.window import WindowInfo
from domains.registry import DEFAULT_DOMAIN
from evaluation.failure_modes import ModeJump, compare_weeks
from evaluation.gates import Decision, GateConfig, GateInputs, GateReport, WatchPause, evaluate_gates
from evaluation.reports import CalibrationReport, ShadowReport, outcomes
from training.rewards import RewardWeights
from training.sandbox.environment import tool_names

# The model-version tag holding the tool-call mix the champion showed when it was evaluated
# (the live watch's reference for the traffic it serves).
EVALUATED_MIX_TAG = "evaluated_tool_mix"
# Calls to tools that do not exist count as one name: a model can invent any number of names,
# which would make the tag unbounded, and one invented name is as wrong as another.
UNKNOWN_TOOL = "unknown_tool"


class LineageTagError(ValueError):
    """A version tag of the lineage whose value is not of its type; names the tag and the value."""


def fold_unknown_tools(mix: Mapping[str, float], domain: str = DEFAULT_DOMAIN) -> dict[str, float]:
    """The mix with every name that is not a tool of the domain's sandbox summed under UNKNOWN_TOOL."""
    known = set(tool_names(domain))
    out: dict[str, float] = {}
    for name, share in mix.items():
        key = name if name in known else UNKNOWN_TOOL
        out[key] = out.get(key, 0.0) + share
    return dict(sorted(out.items()))


@dataclass(frozen=True)
class ChampionLineage:
    """The tags of a registered version. Field names are the tag names (`model_digest` is
    MODEL_DIGEST_KEY, `evaluated_tool_mix` EVALUATED_MIX_TAG)."""

    window_hash: str | None = None
    window_rows: int | None = None
    validation: str | None = None  # "passed" or "failed": the window's Great Expectations suite
    base_model: str | None = None
    dagster_run_id: str | None = None
    domain: str | None = None
    # The health sensor's reference: what the version scored on shadow, and its violation rate.
    shadow_success: float | None = None
    violation_rate: float | None = None
    calibration_success: float | None = None
    calibration_rows: int | None = None
    calibration_version: str | None = None
    calibration_set_hash: str | None = None
    shadow_rows: int | None = None
    evaluated_tool_mix: dict[str, float] | None = None
    # A week's candidate only: its week, the MLflow run the decision logged, the digest of the
    # folder the gates judged (registration uploads only a copy with this digest) and, once a
    # person approved a held week, who.
    week: str | None = None
    run_id: str | None = None
    model_digest: str | None = None
    approved_by: str | None = None
    # A candidate trained from the canary rather than from `base_model`: that canary's folder.
    trained_from: str | None = None

    def to_tags(self) -> dict[str, str]:
        """One string tag per field that is set (mappings as sorted JSON)."""
        return {
            name: json.dumps(value, sort_keys=True) if isinstance(value, dict) else str(value)
            for name, value in asdict(self).items()
            if value is not None
        }

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> ChampionLineage:
        """The lineage a version's tags carry; other tags are ignored, a missing one is None, and a
        value that does not parse as its field's type raises LineageTagError naming it."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            raw = tags.get(f.name)
            if raw is None:
                continue
            try:
                values[f.name] = _parse(f.name, raw)
            except (ValueError, TypeError, AttributeError) as err:
                raise LineageTagError(f"tag {f.name}={raw[:200]!r} is not a {f.type}: {err}") from err
        return cls(**values)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ChampionLineage:
        """Rebuild one saved with `to_dict` (or the dict a decision recorded before this type
        existed, whose keys were these names); unknown keys are ignored."""
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


_FLOATS = {"shadow_success", "violation_rate", "calibration_success"}
_INTS = {"window_rows", "calibration_rows", "shadow_rows"}


def _parse(name: str, raw: str) -> Any:
    if name in _FLOATS:
        return float(raw)
    if name in _INTS:
        return int(raw)
    if name == EVALUATED_MIX_TAG:
        return {str(k): float(v) for k, v in json.loads(raw).items()}
    return raw


@dataclass(frozen=True)
class WeekEvidence:
    """What a week is judged on: its window and the verdict of its suite, the base model and the
    candidate trained from it (with the MLflow run training opened for the week), and both
    evaluation reports. `baseline_kind` names what the candidate is compared with: the champion,
    or the base model while there is none."""

    week: str
    domain: str
    window: WindowInfo
    validation_success: bool
    failed_expectations: tuple[str, ...]
    base_model: str
    baseline_kind: Literal["champion", "base_model"]
    candidate_path: str
    candidate_run_id: str
    reward_curve: tuple[float, ...]
    calibration: CalibrationReport
    shadow: ShadowReport
    trained_from: str | None = None  # the canary's folder when training started there, not at base_model


def champion_lineage(
    role: Literal["candidate", "base"], evidence: WeekEvidence, dagster_run_id: str
) -> ChampionLineage:
    """The lineage of the week's candidate (`role="candidate"`: its side of the reports, its
    week, the week's MLflow run and the digest of its folder) or of the base model it was judged
    against (`role="base"`: the baseline's side; no week, run or digest, which registration takes
    on the bytes it uploads)."""
    calibration, shadow, domain = evidence.calibration, evidence.shadow, evidence.domain
    candidate, baseline = outcomes(calibration.pair, shadow.pair)
    is_candidate = role == "candidate"
    side, policy = (candidate, "candidate") if is_candidate else (baseline, "baseline")
    return ChampionLineage(
        window_hash=evidence.window.content_hash,
        window_rows=evidence.window.rows,
        validation="passed" if evidence.validation_success else "failed",
        base_model=evidence.base_model,
        dagster_run_id=dagster_run_id,
        domain=domain,
        shadow_success=float(getattr(shadow.pair, policy).summary["success_rate"]),
        violation_rate=float(side.violation_rate),
        calibration_success=float(getattr(calibration.pair, policy).summary["success_rate"]),
        calibration_rows=calibration.rows,
        calibration_version=calibration.version,
        calibration_set_hash=calibration.set_hash,
        shadow_rows=shadow.rows,
        evaluated_tool_mix=fold_unknown_tools(side.tool_distribution, domain),
        week=evidence.week if is_candidate else None,
        run_id=evidence.candidate_run_id if is_candidate else None,
        model_digest=model_digest(evidence.candidate_path) if is_candidate else None,
        trained_from=evidence.trained_from if is_candidate else None,
    )


@dataclass(frozen=True)
class PromotionDecision:
    """`metrics` is `{set: {policy: summary}}` (policies `candidate` and `baseline`);
    `failure_modes` the candidate's calibration failure-mode shares; `failure_mode_rises` the
    modes whose share rose by more than 10 points since the previous week's decision."""

    week: str
    report: GateReport
    model_path: str
    lineage: ChampionLineage
    mlflow_run_id: str
    metrics: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    failure_modes: dict[str, float] = field(default_factory=dict)
    failure_mode_rises: tuple[ModeJump, ...] = ()

    @property
    def decision(self) -> Decision:
        return self.report.decision

    @property
    def reason(self) -> str:
        return self.report.reason

    def approved(self, report: GateReport) -> PromotionDecision:
        """The same week with a person's approved report (see `evaluation.gates.approve`)."""
        return replace(self, report=report, lineage=replace(self.lineage, approved_by=report.approved_by))

    def to_dict(self) -> dict[str, Any]:
        return {
            "week": self.week,
            "decision": self.decision,
            "reason": self.reason,
            "report": self.report.to_dict(),
            "model_path": self.model_path,
            "lineage": self.lineage.to_dict(),
            "mlflow_run_id": self.mlflow_run_id,
            "metrics": self.metrics,
            "failure_modes": self.failure_modes,
            "failure_mode_rises": [asdict(j) for j in self.failure_mode_rises],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PromotionDecision:
        """Rebuild a decision saved with `to_dict`; a missing field is a KeyError naming it."""
        report = GateReport.from_dict(data["report"])
        return cls(
            week=data["week"],
            report=report,
            model_path=data["model_path"],
            lineage=ChampionLineage.from_dict(data["lineage"]),
            mlflow_run_id=data["mlflow_run_id"],
            metrics=dict(data.get("metrics") or {}),
            failure_modes=dict(data.get("failure_modes") or {}),
            failure_mode_rises=tuple(ModeJump(**j) for j in data.get("failure_mode_rises") or ()),
        )


@dataclass(frozen=True)
class FirstChampion:
    """What `first_champion` did this week: the base model's version when it registered it (None
    when a champion already existed), and why."""

    version: int | None
    reason: str


@dataclass(frozen=True)
class RegisteredVersion:
    """The model version a promoted week registered and made `champion`."""

    name: str
    version: int


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
    watch_pause: WatchPause | None,
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
