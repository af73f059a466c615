"""The champion-health circuit breaker's judgement: is the model in production still sound?

The promotion gate trusted the champion because of its shadow evaluation. Once it serves real
traffic, the interactions it served are judged by the same verifiable rules: each one is replayed
(`evaluation.replay`) and scored for verified success (only those carrying gold can be judged) and
for policy violations (`evaluation.failure_modes.episode_violations`: a write before the order's
owner was authenticated, a write on an order whose status does not allow it, a write without a
prior read of the record). The breaker trips when verified success falls more than `margin` below
the shadow estimate, or when the share of interactions with a violation rises more than
`violation_spike` above its baseline. `assess_champion_health` only decides, and says why with
evidence; `check_champion` reads the champion's latest served traffic, asks it, and on a trip rolls
the alias back and files an incident. The `champion_health` sensor in `orchestration/sensors.py`
is only its Dagster schedule, and the demo calls it the same way.

With fewer than `min_interactions` judged interactions nothing is concluded: the verdict is
healthy, with reason "insufficient data", because rolling back on noise is itself an outage.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from dataplane.home import Home
from dataplane.incidents import list_incidents, record_incident
from dataplane.served import latest_served
from dataplane.settings import setting
from dataplane.store import open_store
from evaluation.failure_modes import episode_violations
from evaluation.replay import ReplayError, recorded_episode
from tracking.registry import NoPreviousChampionError, champion_info, rollback
from training.rewards import GoldError, verified_success

__all__ = [
    "EVIDENCE_PER_FINDING",
    "INSUFFICIENT_DATA",
    "HealthConfigError",
    "HealthSettings",
    "HealthVerdict",
    "assess_champion_health",
    "champion_records",
    "check_champion",
    "judge_record",
]

EVIDENCE_PER_FINDING = 5
INSUFFICIENT_DATA = "insufficient data"


class HealthConfigError(ValueError):
    """A breaker setting out of range; names the setting, the value and the rule."""


@dataclass(frozen=True)
class HealthSettings:
    """The champion-health circuit breaker's thresholds; the defaults are the product's."""

    margin: float = setting(
        0.10, "roll back when verified success falls more than this (absolute) below the champion's shadow estimate"
    )
    min_interactions: int = setting(
        30, "fewest judged interactions (with gold, for the success check) before a check concludes anything"
    )
    violation_spike: float = setting(
        0.10, "roll back when the share of interactions with a policy violation rises more than this above its baseline"
    )
    window: int = setting(500, "the champion's latest served interactions each check judges")


@dataclass(frozen=True)
class HealthVerdict:
    """The breaker's decision with every number it rests on.

    `n` counts the champion's replayed interactions, `n_verified` those carrying gold (the base of
    `observed_success`). `evidence` maps each finding (`low_success`, and one key per violation
    rule) to a few interaction ids; `skipped` lists records that could not be judged, with why.
    """

    healthy: bool
    reason: str
    n: int
    observed_success: float | None
    expected_success: float
    margin: float
    violation_rate: float | None
    baseline: float | None
    violation_spike: float = HealthSettings.violation_spike
    n_verified: int = 0
    champion: str | None = None
    tripped: tuple[str, ...] = ()
    evidence: dict[str, list[str]] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for incidents and sensor metadata."""
        out = asdict(self)
        out["tripped"] = list(self.tripped)
        return out


def _share(value: Any, name: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= 1
    ):
        raise HealthConfigError(f"{name}={value!r} must be a number in [0, 1]")
    return float(value)


def _note(evidence: dict[str, list[str]], finding: str, interaction_id: Any) -> None:
    ids = evidence[finding]
    if len(ids) < EVIDENCE_PER_FINDING and str(interaction_id) not in ids:
        ids.append(str(interaction_id))


def judge_record(record: Mapping[str, Any], skipped: list[dict[str, Any]]) -> tuple[bool | None, list[str]] | None:
    """One served record replayed: (verified success, None without gold; the policy rules it
    violated). None when it cannot be replayed, with the record and why appended to `skipped`."""
    try:
        episode = recorded_episode(record)
        success = verified_success(episode) if episode.gold is not None else None
    except (ReplayError, GoldError) as exc:
        # Ingestion validated these records, so this is rare; it is reported, not hidden.
        skipped.append({"interaction_id": record.get("interaction_id"), "reason": f"{type(exc).__name__}: {exc}"})
        return None
    return success, sorted({v.rule for v in episode_violations(episode)})


def assess_champion_health(
    records: Iterable[Mapping[str, Any]],
    shadow_success_estimate: float,
    margin: float = HealthSettings.margin,
    min_interactions: int = HealthSettings.min_interactions,
    violation_baseline: float | None = None,
    violation_spike: float = HealthSettings.violation_spike,
    *,
    champion: str | None = None,
) -> HealthVerdict:
    """Judge newly ingested interactions served by the champion against its shadow estimate.

    `champion` is the `policy_version` the champion serves under; records of other versions are
    left out (listed in `skipped`). None takes every record as the champion's. Without a
    `violation_baseline` the baseline is 0: any violation share above `violation_spike` trips.
    Each check needs `min_interactions` judged interactions (the success check counts only those
    with gold); when neither check has enough, the verdict is healthy with reason
    "insufficient data". Raises HealthConfigError on out-of-range settings.
    """
    expected = _share(shadow_success_estimate, "shadow_success_estimate")
    margin = _share(margin, "margin")
    spike = _share(violation_spike, "violation_spike")
    baseline = _share(violation_baseline, "violation_baseline") if violation_baseline is not None else None
    if isinstance(min_interactions, bool) or not isinstance(min_interactions, int) or min_interactions < 1:
        raise HealthConfigError(f"min_interactions={min_interactions!r} must be an integer >= 1")

    evidence: dict[str, list[str]] = defaultdict(list)
    skipped: list[dict[str, Any]] = []
    n = violating = verified_n = successes = 0
    for record in records:
        rid = record.get("interaction_id")
        if champion is not None and record.get("policy_version") != champion:
            skipped.append({"interaction_id": rid, "reason": f"served by {record.get('policy_version')!r}"})
            continue
        judged = judge_record(record, skipped)
        if judged is None:
            continue
        success, rules = judged
        n += 1
        violating += bool(rules)
        for rule in rules:
            _note(evidence, rule, rid)
        if success is not None:
            verified_n += 1
            successes += success
            if not success:
                _note(evidence, "low_success", rid)

    observed = successes / verified_n if verified_n else None
    rate = violating / n if n else None
    tripped, reasons = [], []
    if verified_n >= min_interactions and observed is not None and observed < expected - margin:
        tripped.append("low_success")
        reasons.append(
            f"verified success {observed:.3f} is more than {margin:.2f} below the shadow "
            f"estimate {expected:.3f} ({verified_n} interactions with gold)"
        )
    reference = 0.0 if baseline is None else baseline
    if n >= min_interactions and rate is not None and rate > reference + spike:
        tripped.append("violation_spike")
        reasons.append(
            f"policy violations in {rate:.3f} of {n} interactions, more than {spike:.2f} above "
            f"the baseline {reference:.3f}"
        )
    if tripped:
        reason = "; ".join(reasons)
    elif n < min_interactions:
        reason = f"{INSUFFICIENT_DATA}: {n} champion interactions, {min_interactions} needed"
    elif verified_n < min_interactions:
        reason = (
            f"{INSUFFICIENT_DATA} for the success check ({verified_n} with gold, {min_interactions} "
            f"needed); violations within bounds"
        )
    else:
        reason = "verified success and policy violations within bounds"
    return HealthVerdict(
        healthy=not tripped,
        reason=reason,
        n=n,
        observed_success=observed,
        expected_success=expected,
        margin=margin,
        violation_rate=rate,
        baseline=baseline,
        violation_spike=spike,
        n_verified=verified_n,
        champion=champion,
        tripped=tuple(tripped),
        evidence=dict(evidence),
        skipped=skipped,
    )


def champion_records(store_path: str, policy_version: str, limit: int) -> list[dict]:
    """The latest `limit` interactions served by `policy_version`, read-only (newest first): with
    the landing sensor ingesting files as they land, that is yesterday's traffic, not last week's."""
    con = open_store(store_path, read_only=True)
    try:
        return latest_served(con, policy_version, limit)
    finally:
        con.close()


def check_champion(
    home: Home,
    store_path: str,
    tracking_uri: str,
    model_name: str,
    settings: HealthSettings = HealthSettings(),
) -> dict:
    """Judge the champion on the `settings.window` latest interactions it served; roll back and
    record an incident if it fails."""
    champion = champion_info(tracking_uri, model_name)
    if champion is None:
        return {"action": "none", "reason": "no champion yet"}
    served_by = f"{model_name}/{champion.version}"
    lineage = champion.lineage
    expected, baseline = lineage.shadow_success, lineage.violation_rate
    if expected is None:
        return {"action": "none", "reason": f"champion v{champion.version} carries no shadow_success tag"}
    records = champion_records(store_path, served_by, settings.window)
    # The newest interaction judged: shows which day of traffic the verdict rests on.
    latest = records[0]["ended_at"] if records else None
    verdict = assess_champion_health(
        records,
        expected,
        margin=settings.margin,
        min_interactions=settings.min_interactions,
        violation_spike=settings.violation_spike,
        violation_baseline=baseline,
        champion=served_by,
    )
    if verdict.healthy:
        return {"action": "none", "reason": verdict.reason, "n": verdict.n, "champion": served_by, "latest": latest}
    try:
        result = rollback(tracking_uri, model_name, moved_by=f"champion_health check: {verdict.reason}")
    except NoPreviousChampionError:
        return _degraded_without_fallback(home, served_by, verdict, latest)
    path = record_incident(
        home,
        "champion_rollback",
        f"champion {served_by} rolled back to v{result.to_version}: {verdict.reason}",
        {"verdict": verdict.to_dict(), "from_version": result.from_version, "to_version": result.to_version},
    )
    return {
        "action": "rollback",
        "from_version": result.from_version,
        "to_version": result.to_version,
        "reason": verdict.reason,
        "latest": latest,
        "incident": str(path),
    }


def _degraded_without_fallback(home: Home, served_by: str, verdict: HealthVerdict, latest: str | None) -> dict:
    """A degraded champion with no `previous_champion` to restore (the first champion, the base
    model): nothing is moved, and one `champion_degraded` incident per champion asks a person to
    decide (contain it, or wait for a candidate), however many ticks see it degraded."""
    filed = [
        i
        for i in list_incidents(home)
        if i["kind"] == "champion_degraded" and i["evidence"].get("champion") == served_by
    ]
    path = None
    if not filed:
        path = record_incident(
            home,
            "champion_degraded",
            f"champion {served_by} degraded and there is no previous champion to roll back to: {verdict.reason}",
            {"champion": served_by, "verdict": verdict.to_dict(), "latest": latest},
        )
    return {
        "action": "incident",
        "champion": served_by,
        "reason": f"{verdict.reason}; no previous champion to roll back to",
        "latest": latest,
        "incident": str(path) if path else filed[0]["id"],
        "already_filed": bool(filed),
    }
