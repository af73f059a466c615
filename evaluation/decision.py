"""A week's promotion decision: the gate report, what would be registered, and the evidence summary.

The promotion asset hands it to registration as its value and records it as JSON in its
materialization metadata (`to_dict`), which is where `retrain approve`, `retrain run` and the demo
read it back (`from_dict`): one record of the decision, kept by the orchestrator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from evaluation.failure_modes import ModeJump
from evaluation.gate_types import Decision, GateReport
from evaluation.lineage import ChampionLineage


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
