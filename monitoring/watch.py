"""The live watch's numbers for one UTC day of the traffic the champion served.

Every interaction the champion served that day is replayed and judged (`evaluation.replay`),
and three things are measured, each against a reference:

- **action drift**: the served tool-call mix (each tool's share of the calls in the replayed
  audit logs, talking included: the measure the `tool_call_drift` gate takes over evaluation
  trials) against the champion's *evaluated* mix, the one measured when it was evaluated and
  carried on its model version as the `evaluated_tool_mix` tag. A total variation above
  `max_action_drift` is an alarm (the caller pauses promotions). A champion registered before
  the tag existed has no evaluated mix: drift is then reported as not measured, never guessed.
- **reward distribution**: quantiles and a histogram of the proxy reward (playbook weights) of the
  day's interactions that carry gold (without gold the reward's core cannot be verified, so it
  would read as a failure), against the champion's reference day: its first served day with at
  least `min_interactions` of them. A two-sample Kolmogorov-Smirnov distance above
  `reward_max_ks` with a p-value below `reward_alarm_p` is an alarm: both, because a large
  distance between small samples is noise and a tiny one between large samples is no news.
- **failure modes**: the share of each mode (`evaluation.failure_modes`) among those same
  interactions.

A measure with fewer than `min_interactions` interactions behind it is "not measured", saying so:
the tool mix of a few hundred conversations moves by 0.03-0.05 in total variation from sampling
alone (measured on simulated traffic: 300 a day, up to 0.043; 500 a day, up to 0.033).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
from scipy.stats import ks_2samp

from dataplane.served import ServedDay
from dataplane.settings import setting
from domains.registry import DEFAULT_DOMAIN
from evaluation.decision import EVALUATED_MIX_TAG, fold_unknown_tools
from evaluation.failure_modes import failure_mode_shares
from evaluation.metrics import distribution, total_variation
from evaluation.replay import JudgedRecord, ReplayError, judge_record
from training.rewards import GoldError

QUANTILES = {"p10": 0.10, "p25": 0.25, "p50": 0.50, "p75": 0.75, "p90": 0.90}
Status = Literal["ok", "alarm", "not_measured"]


@dataclass(frozen=True)
class WatchSettings:
    """The live watch's thresholds; the defaults are the product's."""

    max_action_drift: float = setting(
        0.05,
        "largest total variation between the served tool-call mix and the champion's evaluated "
        "mix; above it promotions pause until a person runs `retrain resume`",
    )
    min_interactions: int = setting(
        400,
        "fewest interactions behind a measure (all the day's for action drift, those with gold for "
        "rewards and failure modes, on the day and on the reference day) before it is judged",
    )
    reward_max_ks: float = setting(
        0.10, "largest Kolmogorov-Smirnov distance of the day's proxy rewards from the reference day's"
    )
    reward_alarm_p: float = setting(
        0.01, "a reward shift beyond reward_max_ks alarms only when its KS p-value is below this"
    )
    histogram_bins: int = setting(10, "bins of the proxy-reward histogram")

    def __post_init__(self) -> None:
        for name in ("max_action_drift", "reward_max_ks", "reward_alarm_p"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name}={value!r} must be in [0, 1]")
        for name in ("min_interactions", "histogram_bins"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)!r} must be >= 1")


@dataclass(frozen=True)
class Finding:
    """One measure's verdict: `value` against `threshold` (None when not measured), and why."""

    name: str
    status: Status
    value: float | None
    threshold: float
    detail: str
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Histogram:
    """Counts per bin; bin i is [edges[i], edges[i + 1]) (the last bin includes its right edge)."""

    edges: list[float]
    counts: list[int]


@dataclass(frozen=True)
class DayWatch:
    """One day of the champion's traffic, measured. `interactions` counts the day's records,
    `judged_with_gold` those whose reward and failure mode are defined; `skipped` lists records
    that could not be replayed, with why."""

    day: str
    champion: str
    interactions: int
    judged_with_gold: int
    tool_mix: dict[str, float]
    evaluated_mix: dict[str, float] | None
    action_drift: Finding
    reward_quantiles: dict[str, float]
    reward_histogram: Histogram
    reference_day: str | None
    reference_quantiles: dict[str, float]
    reward_shift: Finding
    failure_modes: dict[str, float]
    skipped: list[dict[str, Any]] = field(default_factory=list)

    @property
    def findings(self) -> tuple[Finding, Finding]:
        return (self.action_drift, self.reward_shift)

    @property
    def alarms(self) -> list[Finding]:
        return [f for f in self.findings if f.status == "alarm"]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class EvaluatedMixError(ValueError):
    """The champion's `evaluated_tool_mix` tag is not a tool-call distribution; names the version."""


def evaluated_mix(tags: Mapping[str, str], champion: str, domain: str = DEFAULT_DOMAIN) -> dict[str, float] | None:
    """The evaluated tool-call mix on a champion's version tags; None when the tag is missing."""
    raw = tags.get(EVALUATED_MIX_TAG)
    if raw is None:
        return None
    try:
        mix = json.loads(raw)
        total_variation(mix, mix)  # the check that it is a distribution
    except (json.JSONDecodeError, TypeError, AttributeError, ValueError) as err:
        raise EvaluatedMixError(f"{champion}: tag {EVALUATED_MIX_TAG} is not a tool-call distribution: {err}") from err
    return fold_unknown_tools({str(k): float(v) for k, v in mix.items()}, domain)


def judge_day(records: Iterable[Mapping[str, Any]]) -> tuple[list[JudgedRecord], list[dict[str, Any]]]:
    """Every record judged under the playbook's weights, and those that could not be, with why."""
    judged, skipped = [], []
    for record in records:
        try:
            judged.append(judge_record(record))
        except (ReplayError, GoldError) as err:
            skipped.append({"interaction_id": record.get("interaction_id"), "reason": f"{type(err).__name__}: {err}"})
    return judged, skipped


def served_tool_mix(judged: Sequence[JudgedRecord]) -> dict[str, float]:
    domain = judged[0].episode.domain if judged else DEFAULT_DOMAIN
    return fold_unknown_tools(distribution(e.tool for j in judged for e in j.episode.audit_log), domain)


def gold_rewards(judged: Sequence[JudgedRecord]) -> list[float]:
    return [j.reward for j in judged if j.trial is not None]


def reference_day(days: Sequence[ServedDay], before: str, min_interactions: int) -> str | None:
    """The champion's first served day before `before` with enough interactions carrying gold."""
    return next((d.day for d in days if d.day < before and d.with_gold >= min_interactions), None)


def action_drift(
    served: Mapping[str, float], evaluated: Mapping[str, float] | None, n: int, settings: WatchSettings
) -> Finding:
    """The served tool-call mix against the evaluated one (see the module docstring)."""
    limit = settings.max_action_drift
    if evaluated is None:
        return Finding(
            "action_drift",
            "not_measured",
            None,
            limit,
            f"the champion's version carries no {EVALUATED_MIX_TAG} tag (registered before the live watch): "
            "its evaluated tool-call mix is unknown, so action drift is not measured",
        )
    if n < settings.min_interactions:
        return Finding(
            "action_drift", "not_measured", None, limit, f"{n} interactions, {settings.min_interactions} needed"
        )
    tv = total_variation(served, evaluated)
    moves = sorted(
        ((tool, served.get(tool, 0.0) - evaluated.get(tool, 0.0)) for tool in set(served) | set(evaluated)),
        key=lambda item: (-abs(item[1]), item[0]),
    )
    status: Status = "alarm" if tv > limit else "ok"
    verdict = ">" if status == "alarm" else "<="
    return Finding(
        "action_drift",
        status,
        tv,
        limit,
        f"action drift TV={tv:.4f} {verdict} {limit} between the served and the evaluated tool-call mix "
        f"over {n} interactions",
        {"largest_moves": {tool: round(delta, 4) for tool, delta in moves[:5]}},
    )


def reward_quantiles(rewards: Sequence[float]) -> dict[str, float]:
    if not rewards:
        return {}
    values = np.quantile(np.asarray(rewards, dtype=float), list(QUANTILES.values()))
    return {name: float(v) for name, v in zip(QUANTILES, values)}


def reward_histogram(rewards: Sequence[float], bins: int) -> Histogram:
    if not rewards:
        return Histogram([], [])
    counts, edges = np.histogram(np.asarray(rewards, dtype=float), bins=bins)
    return Histogram([float(e) for e in edges], [int(c) for c in counts])


def reward_shift(
    rewards: Sequence[float], reference: Sequence[float], reference_on: str | None, settings: WatchSettings
) -> Finding:
    """The day's proxy rewards against the reference day's: a two-sample KS test."""
    limit, need = settings.reward_max_ks, settings.min_interactions
    if reference_on is None:
        return Finding(
            "reward_distribution",
            "not_measured",
            None,
            limit,
            f"no reference yet: the champion has no earlier served day with {need} interactions carrying gold",
        )
    if len(rewards) < need or len(reference) < need:
        return Finding(
            "reward_distribution",
            "not_measured",
            None,
            limit,
            f"{len(rewards)} interactions with gold on the day and {len(reference)} on the reference day "
            f"{reference_on}; {need} needed on each",
        )
    test = ks_2samp(rewards, reference)
    distance, p = float(test.statistic), float(test.pvalue)
    alarm = distance > limit and p < settings.reward_alarm_p
    return Finding(
        "reward_distribution",
        "alarm" if alarm else "ok",
        distance,
        limit,
        f"proxy-reward KS distance {distance:.4f} (p={p:.3g}) from the reference day {reference_on} "
        + (f"> {limit} with p < {settings.reward_alarm_p}" if alarm else "within bounds"),
        {"p_value": p, "n": len(rewards), "reference_n": len(reference)},
    )


def watch_day(
    day: str,
    champion: str,
    records: Sequence[Mapping[str, Any]],
    evaluated: Mapping[str, float] | None,
    reference_on: str | None,
    reference_records: Sequence[Mapping[str, Any]],
    settings: WatchSettings | None = None,
) -> DayWatch:
    """Measure one day of `champion`'s traffic (see the module docstring)."""
    settings = settings or WatchSettings()
    judged, skipped = judge_day(records)
    mix = served_tool_mix(judged)
    rewards = gold_rewards(judged)
    reference = gold_rewards(judge_day(reference_records)[0]) if reference_on else []
    trials = [j.trial for j in judged if j.trial is not None]
    return DayWatch(
        day=day,
        champion=champion,
        interactions=len(records),
        judged_with_gold=len(trials),
        tool_mix=mix,
        evaluated_mix=None if evaluated is None else dict(evaluated),
        action_drift=action_drift(mix, evaluated, len(judged), settings),
        reward_quantiles=reward_quantiles(rewards),
        reward_histogram=reward_histogram(rewards, settings.histogram_bins),
        reference_day=reference_on,
        reference_quantiles=reward_quantiles(reference),
        reward_shift=reward_shift(rewards, reference, reference_on, settings),
        failure_modes=failure_mode_shares(trials) if trials else {},
        skipped=skipped,
    )
