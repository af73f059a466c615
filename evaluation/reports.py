"""Candidate vs baseline on one evaluation set, as a compact report.

The evaluation assets hand these dataclasses to the promotion gate (and, through it, to MLflow),
so they carry exactly what the gates and the run log need — paired success flags and proxy
rewards, violation and tool-call counts, metric summaries, failure-mode shares, a few sample
transcripts — never the episodes' world states, which would make a 5,000-conversation shadow
report hundreds of megabytes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dataplane.settings import setting
from evaluation.eval_sets import CalibrationSet
from evaluation.failure_modes import failure_mode_shares, policy_violations, primary_failure_mode
from evaluation.gates import PolicyOutcomes
from evaluation.metrics import summarize, total_variation
from evaluation.rollout import Trial, run_rollouts
from evaluation.stats import (
    BootstrapCI,
    ClusteredComparison,
    McNemarResult,
    clustered_comparison,
    mcnemar_exact,
    paired_bootstrap_ci,
)
from evaluation.week_alignment import WeekAlignment, WeekLabels, measure_alignment
from training.policies import HFPolicy
from training.sandbox.rollout import SERVING_MAX_TURNS

SAMPLES_PER_POLICY = 3
# Errored trials named in a report (record, trial, error), so the first ones can be looked up.
ERRORED_LISTED = 20


@dataclass(frozen=True)
class EvalSettings:
    """How candidate and baseline are rolled out on the week's sets: the same settings for both,
    the same customers (the evaluation assets' config is built from these fields)."""

    trials: int = setting(4, "k of pass^k: conversations per calibration task, each with its own customer seed")
    max_tasks: int = setting(
        200, "calibration tasks evaluated (the frozen version is larger, so a curriculum level still finds enough)"
    )
    shadow_size: int = setting(5000, "recorded held-out conversations replayed by the shadow set, newest first")
    seed: int = setting(0, "seeds the customers, the policies' sampling and the bootstrap")
    # Serving's cap: an unfinished conversation is cut at the same turn in production and here.
    max_turns: int = setting(SERVING_MAX_TURNS, "turns after which an unfinished conversation is cut")
    # None follows the run's curriculum (training.curriculum.compact_at): a policy is judged in the
    # form its GRPO rows showed it; the week's evaluation assets resolve it.
    compact: bool | None = setting(
        None, "short tool results (None: as the run's curriculum level trains, short below level 4)"
    )
    max_new_tokens: int = setting(128, "tokens a policy may generate per turn")


@dataclass(frozen=True)
class PolicyReport:
    """One policy's trials on one set, in (record, trial) order: `success[i]` and `rewards[i]`
    (the proxy reward; NaN for an errored trial) belong to `keys[i]`, as do `clusters[i]` (the
    customer, or `task:<id>`) and `errors[i]` (the class of what the trial raised, None when it
    ran). `errored` lists the first errored trials with their messages."""

    keys: list[str]
    success: list[bool]
    rewards: list[float]
    violations: int
    trials: int
    tool_counts: dict[str, int]
    summary: dict[str, Any]
    failure_modes: dict[str, float]
    samples: list[dict[str, Any]]
    clusters: list[str] = field(default_factory=list)
    errors: list[str | None] = field(default_factory=list)
    errored: list[dict[str, Any]] = field(default_factory=list)

    @property
    def errored_by_class(self) -> dict[str, int]:
        return dict(sorted(Counter(e for e in self.errors if e is not None).items()))


@dataclass(frozen=True)
class PairReport:
    """Candidate and baseline on the same conversations, and the paired statistics of their success.

    `clustered` resamples and tests customers (what the gates use); `mcnemar` and `bootstrap_ci`
    take every conversation as independent, and are kept to show how much that overstates.
    """

    candidate: PolicyReport
    baseline: PolicyReport
    mcnemar: McNemarResult
    bootstrap_ci: BootstrapCI
    tool_call_tv: float
    clustered: ClusteredComparison | None = None

    @property
    def pairs(self) -> int:
        return len(self.candidate.keys)


@dataclass(frozen=True)
class CalibrationReport:
    """The comparison on the week's calibration version, that version's identity (`version`,
    `set_hash`, `rows`, its `interaction_ids`), and the week's reward-alignment evidence:
    `proxy_rewards[i]` (under `reward_weights`, the weights the candidate trained with) and
    `human_success[i]` describe the same interaction labelled in the week; `alignment` summarises
    them (which week, how many labels and raters, disagreements, the AUC)."""

    pair: PairReport
    version: str
    set_hash: str
    rows: int
    proxy_rewards: list[float]
    human_success: list[bool]
    alignment: dict[str, Any]
    reward_weights: dict[str, float] = field(default_factory=dict)
    interaction_ids: tuple[str, ...] = ()


@dataclass(frozen=True)
class ShadowReport:
    """The week's shadow replay comparison and the set's identity."""

    pair: PairReport
    week: str
    set_hash: str
    rows: int


def policy_report(trials: Sequence[Trial]) -> PolicyReport:
    """One policy's trials reduced to what gates, metrics and plots read."""
    if not trials:
        raise ValueError("a policy report needs at least one trial")
    ordered = sorted(trials, key=lambda t: t.key)
    return PolicyReport(
        keys=[f"{t.record_id}#{t.trial}" for t in ordered],
        success=[bool(t.success) for t in ordered],
        rewards=[float(t.reward) for t in ordered],
        violations=sum(bool(policy_violations(t)) for t in ordered),
        trials=len(ordered),
        tool_counts=dict(Counter(e.tool for t in ordered for e in t.episode.audit_log)),
        summary=summarize(ordered),
        failure_modes=failure_mode_shares(ordered),
        samples=[_sample(t) for t in ordered[:SAMPLES_PER_POLICY]],
        clusters=[t.cluster for t in ordered],
        errors=[t.error_class for t in ordered],
        errored=[{"record_id": t.record_id, "trial": t.trial, "error": t.error} for t in ordered if t.errored][
            :ERRORED_LISTED
        ],
    )


def _sample(trial: Trial) -> dict[str, Any]:
    transcript = "\n".join(
        f"{m.get('role')}: {m.get('content') or ''} {' '.join(c['name'] for c in m.get('tool_calls') or [])}".rstrip()
        for m in trial.messages
        if m.get("role") != "system"
    )
    return {
        "record_id": trial.record_id,
        "trial": trial.trial,
        "success": trial.success,
        "failure_mode": primary_failure_mode(trial) or "",
        "transcript": transcript[:4000],
    }


def _shares(counts: Mapping[str, int]) -> dict[str, float]:
    total = sum(counts.values())
    return {name: n / total for name, n in sorted(counts.items())} if total else {}


def compare(candidate: Sequence[Trial], baseline: Sequence[Trial], seed: int = 0) -> PairReport:
    """Both policies' reports plus the paired statistics of their success difference (clustered by
    customer, and per conversation)."""
    cand, base = policy_report(candidate), policy_report(baseline)
    if cand.keys != base.keys:
        raise ValueError("candidate and baseline trials do not pair up by (record, trial)")
    if cand.clusters != base.clusters:
        raise ValueError("candidate and baseline trials of one (record, trial) name different customers")
    return PairReport(
        cand,
        base,
        mcnemar_exact(cand.success, base.success),
        paired_bootstrap_ci(cand.success, base.success, seed=seed),
        total_variation(_shares(cand.tool_counts), _shares(base.tool_counts)),
        clustered_comparison(cand.success, base.success, cand.clusters, seed=seed),
    )


def outcomes(calibration: PairReport, shadow: PairReport) -> tuple[PolicyOutcomes, PolicyOutcomes]:
    """(candidate, baseline) gate inputs; violations and tool mixes pool both evaluation sets."""

    def one(cal: PolicyReport, sha: PolicyReport) -> PolicyOutcomes:
        counts = Counter(cal.tool_counts) + Counter(sha.tool_counts)
        return PolicyOutcomes(
            cal.success,
            sha.success,
            (cal.violations + sha.violations) / (cal.trials + sha.trials),
            _shares(counts),
            cal.rewards,
            sha.rewards,
            cal.clusters,
            sha.clusters,
            cal.errors,
            sha.errors,
        )

    return one(calibration.candidate, shadow.candidate), one(calibration.baseline, shadow.baseline)


def evaluate_pair(
    candidate_path: str,
    baseline_path: str,
    records: Sequence[Mapping[str, Any]],
    *,
    compact: bool,
    k: int = 1,
    seed: int = EvalSettings.seed,
    max_turns: int = EvalSettings.max_turns,
    max_new_tokens: int = EvalSettings.max_new_tokens,
    batch_size: int | None = None,
    tools: tuple[str, ...] | None = None,
    reward_weights: Mapping[str, float] | None = None,
    on_trials: Callable[[str, list[Trial]], None] | None = None,
) -> PairReport:
    """Roll both policies out on `records` with the same customers (seeds), the same tool list
    (`tools`, None: all) and the same tool-result form (`compact`, no default: the curriculum's,
    `training.curriculum.compact_at`) and compare them; each trial's proxy reward is priced with
    `reward_weights` (the run's overrides of the playbook; None: the playbook).

    `on_trials(side, trials)` sees each policy's trials as soon as they are rolled out, before they
    are reduced to the report (the week's traces, `tracking.traces.TrialTraces`)."""
    if not records:
        raise ValueError("no records to evaluate on")
    trials = {}
    for side, path in (("candidate", candidate_path), ("baseline", baseline_path)):
        policy = HFPolicy(path, name=side, max_new_tokens=max_new_tokens, seed=seed, batch_size=batch_size, tools=tools)
        trials[side] = run_rollouts(
            policy,
            records,
            k=k,
            seed=seed,
            max_turns=max_turns,
            compact=compact,
            tools=tools,
            reward_weights=reward_weights,
        )
        if on_trials is not None:
            on_trials(side, trials[side])
    return compare(trials["candidate"], trials["baseline"], seed=seed)


@dataclass(frozen=True)
class PairRun:
    """Candidate and baseline as the week's evaluation rolls them out: the same settings, tools
    (None: all) and reward pricing for both, `reward_weights` being the ones the candidate trained
    with; `on_trials` sees each policy's trials as they end (`evaluate_pair`)."""

    candidate_path: str
    baseline_path: str
    settings: EvalSettings
    reward_weights: Mapping[str, float]
    tools: tuple[str, ...] | None = None
    on_trials: Callable[[str, list[Trial]], None] | None = None

    def __post_init__(self) -> None:
        if self.settings.compact is None:
            raise ValueError("PairRun: settings.compact is None; resolve it from the curriculum (compact_at) first")

    def evaluate(self, records: Sequence[Mapping[str, Any]], k: int) -> PairReport:
        return evaluate_pair(
            self.candidate_path,
            self.baseline_path,
            records,
            k=k,
            seed=self.settings.seed,
            max_turns=self.settings.max_turns,
            compact=self.settings.compact,
            max_new_tokens=self.settings.max_new_tokens,
            tools=self.tools,
            reward_weights=self.reward_weights,
            on_trials=self.on_trials,
        )


def judge_calibration(
    run: PairRun, version: CalibrationSet, rows: int, tasks: Sequence[Mapping[str, Any]], labels: WeekLabels
) -> tuple[CalibrationReport, WeekAlignment]:
    """The week's calibration report: both policies on `tasks` of `version` (which holds `rows`
    interactions), `settings.trials` conversations each, and the reward alignment on the week's
    `labels`, priced with the run's reward weights. The alignment is returned for what the asset
    shows of it."""
    pair = run.evaluate(tasks, k=run.settings.trials)
    alignment = measure_alignment(labels, run.reward_weights)
    report = CalibrationReport(
        pair,
        version.version,
        version.set_hash,
        rows,
        alignment.proxy_rewards,
        alignment.human_success,
        alignment.summary(),
        dict(run.reward_weights),
        version.interaction_ids,
    )
    return report, alignment


def judge_shadow(run: PairRun, week: str, set_hash: str, records: Sequence[Mapping[str, Any]]) -> ShadowReport:
    """The week's shadow report: both policies replaying each recorded conversation of the shadow
    set (`set_hash`) once, with its recorded customer."""
    return ShadowReport(run.evaluate(records, k=1), week, set_hash, len(records))
