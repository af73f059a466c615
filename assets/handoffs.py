"""What the data and training assets hand each other: typed values instead of loose dicts.

Dagster's default IO manager pickles them, so each is a plain module-level dataclass; a consumer
reads `policy_base.path` and a typo fails at once instead of as a KeyError deep in a later step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from dataplane.ingest import IngestSummary
from dataplane.window import WindowInfo
from domains.registry import DEFAULT_DOMAIN
from evaluation.decision import WeekEvidence
from evaluation.reports import CalibrationReport, ShadowReport
from training.grpo_result import GRPOResult


@dataclass(frozen=True)
class RecentIngests:
    """Every ingest since a moment (the landing sensor's and the weekly run's), as
    `dataplane.landing.ingested_since` counts them: `quarantined` is the rows that stand."""

    files: int
    read: int
    accepted: int
    duplicates: int
    quarantined: int
    superseded: int

    @property
    def quarantine_rate(self) -> float:
        return self.quarantined / max(self.read, 1)


@dataclass(frozen=True)
class IngestedInteractions:
    """`raw_interactions`: what this run ingested, the interactions stored afterwards, and every
    ingest of the past week (what the window's quarantine-rate check judges)."""

    ingest: IngestSummary
    stored: int
    recent: RecentIngests


@dataclass(frozen=True)
class ValidatedWindow(WindowInfo):
    """`interaction_window`: the cut window and the verdict of its Great Expectations suite."""

    validation_success: bool
    validation_path: str
    failed_expectations: tuple[str, ...] = ()
    domain: str = DEFAULT_DOMAIN


@dataclass(frozen=True)
class WindowSplits:
    """`window_splits`: which window was split and how (splits are recomputed from the stored window)."""

    week: str
    counts: dict[str, int]
    fractions: tuple[float, float, float]
    window_hash: str
    domain: str = DEFAULT_DOMAIN


@dataclass(frozen=True)
class PolicyBase:
    """`policy_base`: the week's baseline (`path`, the model the candidate is judged against) and
    where training starts: the same model, or the canary serving beside the champion
    (`start_path`, `canary_version`)."""

    path: str
    source: Literal["champion", "base_model"]
    champion_version: int | None = None
    # False only for a domain with no agent yet whose tiny model does not call tools (policy_base's
    # check warned): GRPO has nothing to follow, so the update is skipped and the gates reject.
    acts: bool = True
    start_path: str | None = None
    canary_version: int | None = None

    @property
    def start(self) -> str:
        """The model the week's update trains from."""
        return self.start_path or self.path


@dataclass(frozen=True)
class GRPOCandidate:
    """`grpo_candidate`: the trained model, its MLflow run and its training reward curve."""

    path: str
    mlflow_run_id: str
    final_step: int
    reward_curve: list[float] = field(default_factory=list)
    level_mix: dict | None = None
    # The run's overrides of the reward playbook: evaluation prices proxy rewards with them too.
    reward_weights: dict[str, float] = field(default_factory=dict)

    @classmethod
    def trained(cls, result: GRPOResult, run_id: str, reward_weights: Mapping[str, float]) -> GRPOCandidate:
        """The candidate a finished GRPO run reported, in the week's MLflow run `run_id`, trained
        with `reward_weights` (which evaluation prices rewards with, as training did)."""
        return cls(
            path=result.model_path,
            mlflow_run_id=run_id,
            final_step=result.final_step,
            reward_curve=list(result.reward_curve),
            level_mix=result.level_mix,
            reward_weights=dict(reward_weights),
        )


def week_evidence(
    week: str,
    window: ValidatedWindow,
    base: PolicyBase,
    candidate: GRPOCandidate,
    calibration: CalibrationReport,
    shadow: ShadowReport,
) -> WeekEvidence:
    """What the week is judged on, from the assets that hand it over (the promotion gate and the
    first champion's lineage read the same)."""
    return WeekEvidence(
        week=week,
        domain=window.domain,
        window=window,
        validation_success=bool(window.validation_success),
        failed_expectations=tuple(window.failed_expectations),
        base_model=base.path,
        baseline_kind=base.source,
        candidate_path=candidate.path,
        candidate_run_id=candidate.mlflow_run_id,
        reward_curve=tuple(candidate.reward_curve),
        calibration=calibration,
        shadow=shadow,
        trained_from=base.start_path,
    )
