"""The canary's judgement: does the version serving beside the champion deserve to replace it?

A candidate that passed every gate is registered as `canary` (`tracking.registry`) and answers
`CanarySettings.share` of the served conversations. The two arms meet different customers, but on
the same days: a day's traffic mix (which intents, how hard) is shared, so the comparison pairs by
day. Each canary conversation's verified success (replayed as the live watch replays it,
`evaluation.replay.judge_record`; only conversations with gold count) is paired with the
champion's verified success rate on the same day, and the days are the clusters of
`evaluation.stats.clustered_comparison`: resampling whole days carries both arms' noise (a day's
champion rate is itself an estimate) and keeps the day-to-day swings out of the difference.

The decision, once the canary has `min_conversations` judged conversations over `min_days` days:
  - drop when the canary is clearly worse: the interval's upper bound below 0, or its share of
    conversations with a policy violation more than `violation_spike` above the champion's;
  - drop when it behaves unlike what was evaluated, with the live watch's thresholds
    (`monitoring.watch.WatchSettings`, measured once the canary has `min_interactions` judged
    conversations): its served tool-call mix drifts from the mix its evaluation recorded on the
    version (`evaluated_tool_mix`) by more than `max_action_drift`, or its proxy rewards on
    conversations with gold shift from the champion's on the same days beyond `reward_max_ks`
    (p below `reward_alarm_p`) *downwards* (a better canary's rewards shift up, and that is no
    reason to drop it);
  - promote when the interval's lower bound is above `-margin` (not worse by more than the margin,
    the shadow gate's non-inferiority rule, now on served traffic);
  - wait otherwise (the next served day adds evidence).
Before the minimum, it waits: acting on a handful of conversations is acting on noise.

`assess_canary` only decides; `check_canary` reads the served traffic, asks it, moves the aliases
(`promote_canary`, `drop_canary`, recorded as moved by the health sensor), files an incident on a
drop and logs the decision in MLflow. The `champion_health` sensor runs it after the champion's own
check; the demo calls it after each served week.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from dataplane.home import Home
from dataplane.incidents import record_incident
from dataplane.served import records_served_on, served_days
from dataplane.settings import setting
from dataplane.store import open_store
from domains.registry import DEFAULT_DOMAIN
from evaluation.decision import fold_unknown_tools
from evaluation.failure_modes import episode_violations
from evaluation.metrics import distribution
from evaluation.replay import ReplayError, judge_record
from evaluation.stats import clustered_comparison
from monitoring.health import HealthSettings
from monitoring.watch import Finding, WatchSettings, action_drift, evaluated_mix, reward_shift
from tracking.canary import log_canary_decision
from tracking.registry import CANARY_DROPPED_TAG, canary_info, champion_info, drop_canary, promote_canary
from training.rewards import GoldError

__all__ = ["CanaryConfigError", "CanarySettings", "CanaryVerdict", "assess_canary", "check_canary"]

PROMOTE, DROP, WAIT = "promote", "drop", "wait"
MOVED_BY = "health sensor (canary check)"
CONFIDENCE, RESAMPLES, SEED = 0.95, 2000, 0


class CanaryConfigError(ValueError):
    """A canary setting out of range; names the setting, the value and the rule."""


@dataclass(frozen=True)
class CanarySettings:
    """How much traffic a canary serves and when its comparison with the champion concludes."""

    share: float = setting(0.10, "share of served conversations the canary answers beside the champion")
    min_conversations: int = setting(
        40,
        "fewest canary conversations with gold (judged for verified success) before the canary is promoted or "
        "dropped; at 10% of the demo's 70 a day, about one week",
    )
    min_days: int = setting(
        7, "fewest days the canary has served before it is promoted or dropped: a whole week, and 7 day clusters"
    )
    margin: float = setting(
        0.05,
        "promote when the lower bound of canary minus champion verified success (95% day-clustered interval) "
        "is above minus this",
    )
    max_per_day: int = setting(
        200,
        "most conversations of each arm judged per day, spread evenly through the day: a check replays every "
        "one it judges, and at production volume all of them would not fit in a sensor tick",
    )

    def __post_init__(self) -> None:
        if isinstance(self.share, bool) or not isinstance(self.share, (int, float)) or not 0 <= self.share <= 1:
            raise CanaryConfigError(f"share={self.share!r} must be a number in [0, 1]")
        if isinstance(self.margin, bool) or not isinstance(self.margin, (int, float)) or not 0 <= self.margin <= 1:
            raise CanaryConfigError(f"margin={self.margin!r} must be a number in [0, 1]")
        for name in ("min_conversations", "min_days", "max_per_day"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise CanaryConfigError(f"{name}={value!r} must be an integer >= 1")


@dataclass(frozen=True)
class CanaryVerdict:
    """The decision with every number it rests on; `difference` is canary minus champion verified
    success over the canary's judged conversations, each against the champion's rate that day."""

    decision: str
    reason: str
    canary: str
    champion: str
    n_canary: int
    n_champion: int
    days: int
    canary_success: float | None = None
    champion_success: float | None = None
    difference: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    sign_p_value: float | None = None
    canary_violation_rate: float | None = None
    champion_violation_rate: float | None = None
    margin: float = CanarySettings.margin
    skipped: list[dict[str, Any]] = field(default_factory=list)
    action_drift: dict[str, Any] | None = None  # the live watch's Finding, on the canary's traffic
    reward_shift: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class _Arm:
    """One arm's judged conversations: verified successes by day, violations, the tools it called
    and the proxy rewards of those with gold."""

    successes: dict[str, list[bool]] = field(default_factory=dict)
    judged: int = 0
    violating: int = 0
    tools: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    domain: str = DEFAULT_DOMAIN

    def add(self, day: str, records: Sequence[Mapping[str, Any]], skipped: list[dict[str, Any]]) -> None:
        for record in records:
            try:
                judged = judge_record(record)
            except (ReplayError, GoldError) as exc:
                # Ingestion validated these records, so this is rare; it is reported, not hidden.
                skipped.append(
                    {"interaction_id": record.get("interaction_id"), "reason": f"{type(exc).__name__}: {exc}"}
                )
                continue
            self.judged += 1
            self.domain = judged.episode.domain
            self.violating += bool(episode_violations(judged.episode))
            self.tools += [entry.tool for entry in judged.episode.audit_log]
            if judged.trial is not None:
                self.successes.setdefault(day, []).append(judged.trial.success)
                self.rewards.append(judged.trial.reward)

    @property
    def n(self) -> int:
        return sum(len(day) for day in self.successes.values())

    def rate(self) -> float | None:
        n = self.n
        return sum(sum(day) for day in self.successes.values()) / n if n else None

    def violation_rate(self) -> float | None:
        return self.violating / self.judged if self.judged else None


def assess_canary(
    by_day: Mapping[str, tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]],
    canary: str,
    champion: str,
    settings: CanarySettings = CanarySettings(),
    violation_spike: float = HealthSettings.violation_spike,
    evaluated: Mapping[str, float] | None = None,
    watch: WatchSettings = WatchSettings(),
) -> CanaryVerdict:
    """Decide on the canary from `by_day`: for each day it served, (the canary's records, the
    champion's records) of that day; `evaluated` is the tool-call mix the canary's evaluation
    recorded (None: drift not measured). See the module docstring for the rule."""
    skipped: list[dict[str, Any]] = []
    arms = {canary: _Arm(), champion: _Arm()}
    for day, (canary_records, champion_records) in sorted(by_day.items()):
        arms[canary].add(day, canary_records, skipped)
        arms[champion].add(day, champion_records, skipped)
    ours, theirs = arms[canary], arms[champion]
    # Only days on which both arms have a judged conversation pair up.
    paired = sorted(set(ours.successes) & set(theirs.successes))
    a = [float(s) for day in paired for s in ours.successes[day]]
    b = [sum(theirs.successes[day]) / len(theirs.successes[day]) for day in paired for _ in ours.successes[day]]
    clusters = [day for day in paired for _ in ours.successes[day]]
    base = {
        "canary": canary,
        "champion": champion,
        "n_canary": len(a),
        "n_champion": sum(len(theirs.successes[day]) for day in paired),
        "days": len(paired),
        "canary_success": ours.rate(),
        "champion_success": theirs.rate(),
        "canary_violation_rate": ours.violation_rate(),
        "champion_violation_rate": theirs.violation_rate(),
        "margin": settings.margin,
        "skipped": skipped,
    }
    if len(a) < settings.min_conversations or len(paired) < settings.min_days:
        reason = (
            f"waiting for evidence: {len(a)} canary conversations with gold over {len(paired)} days, "
            f"{settings.min_conversations} over {settings.min_days} needed"
        )
        return CanaryVerdict(WAIT, reason, **base)
    comparison = clustered_comparison(a, b, clusters, n_resamples=RESAMPLES, confidence=CONFIDENCE, seed=SEED)
    ci = comparison.ci
    numbers = {
        "difference": ci.difference,
        "ci_low": ci.low,
        "ci_high": ci.high,
        "sign_p_value": comparison.sign.p_value,
    }
    interval = f"canary - champion {ci.difference:+.3f}, 95% CI [{ci.low:+.3f}, {ci.high:+.3f}] over {len(paired)} days"
    drift, shift = _behaviour(ours, theirs, evaluated, watch)
    numbers |= {"action_drift": asdict(drift), "reward_shift": asdict(shift)}
    spike = _violation_spike(ours.violation_rate(), theirs.violation_rate(), violation_spike)
    if ci.high < 0 or spike:
        why = spike or f"clearly worse: {interval}, upper bound below 0"
        return CanaryVerdict(DROP, why, **base, **numbers)
    if drift.status == "alarm":
        return CanaryVerdict(DROP, f"the canary does not act as it was evaluated: {drift.detail}", **base, **numbers)
    if shift.status == "alarm":
        return CanaryVerdict(DROP, f"the canary's rewards fell: {shift.detail}", **base, **numbers)
    if ci.low > -settings.margin:
        return CanaryVerdict(
            PROMOTE, f"not worse: {interval}, lower bound above -{settings.margin:.2f}", **base, **numbers
        )
    return CanaryVerdict(WAIT, f"undecided: {interval}", **base, **numbers)


def _behaviour(ours: _Arm, theirs: _Arm, evaluated: Mapping[str, float] | None, watch: WatchSettings):
    """(action drift of the canary's served tool calls from its evaluated mix, the shift of its
    proxy rewards from the champion's on the same days: an alarm only when they moved down)."""
    drift = action_drift(fold_unknown_tools(distribution(ours.tools), ours.domain), evaluated, ours.judged, watch)
    shift = reward_shift(ours.rewards, theirs.rewards, "the champion's conversations on the same days", watch)
    if shift.status == "alarm" and sum(ours.rewards) / len(ours.rewards) >= sum(theirs.rewards) / len(theirs.rewards):
        shift = Finding(
            shift.name,
            "ok",
            shift.value,
            shift.threshold,
            f"{shift.detail}; the shift is upwards (the canary's mean reward is not below the champion's)",
            shift.extra,
        )
    return drift, shift


def _domain_of(traffic: Mapping[str, tuple[Sequence[Mapping[str, Any]], Sequence[Mapping[str, Any]]]]) -> str:
    """The domain the canary served (its records name it; the default for records of old logs)."""
    return next((str(r["domain"]) for ours, _ in traffic.values() for r in ours if r.get("domain")), DEFAULT_DOMAIN)


def _violation_spike(canary: float | None, champion: float | None, spike: float) -> str | None:
    if canary is None or champion is None or canary <= champion + spike:
        return None
    return f"policy violations in {canary:.3f} of the canary's conversations, more than {spike:.2f} above the champion's {champion:.3f}"


def _spread(records: list[dict], most: int) -> list[dict]:
    """At most `most` of a day's records (in time order), every k-th: the whole day, not its morning."""
    step = max(1, -(-len(records) // most))  # ceil: the smallest stride that keeps at most `most`
    return records[::step]


def canary_traffic(
    store_path: str, canary: str, champion: str, max_per_day: int = CanarySettings.max_per_day
) -> dict[str, tuple[list[dict], list[dict]]]:
    """For every UTC day the canary served: (its records, the champion's records that day), each at
    most `max_per_day` spread through the day; read-only."""
    con = open_store(store_path, read_only=True)
    try:
        return {
            d.day: tuple(_spread(records_served_on(con, version, d.day), max_per_day) for version in (canary, champion))
            for d in served_days(con, canary)
        }
    finally:
        con.close()


def check_canary(
    home: Home,
    store_path: str,
    tracking_uri: str,
    model_name: str,
    settings: CanarySettings = CanarySettings(),
    artifact_location: str | None = None,
    watch: WatchSettings = WatchSettings(),
) -> dict[str, Any]:
    """Judge the canary against the champion on the traffic both served; promote it, drop it (with
    an incident) or wait. Every judgement is logged in MLflow (`tracking.canary`)."""
    canary = canary_info(tracking_uri, model_name)
    if canary is None:
        return {"action": "none", "reason": "no canary"}
    champion = champion_info(tracking_uri, model_name)
    if champion is None:
        return {"action": "none", "canary": canary.version, "reason": "no champion to compare the canary with"}
    if CANARY_DROPPED_TAG in canary.tags:
        # A drop interrupted between tagging the version and removing the alias: finish it.
        drop_canary(tracking_uri, model_name, moved_by=MOVED_BY, reason=canary.tags[CANARY_DROPPED_TAG])
        return {"action": DROP, "canary": canary.version, "reason": canary.tags[CANARY_DROPPED_TAG]}
    served_as = {alias: f"{model_name}/{info.version}" for alias, info in (("canary", canary), ("champion", champion))}
    traffic = canary_traffic(store_path, served_as["canary"], served_as["champion"], settings.max_per_day)
    verdict = assess_canary(
        traffic,
        served_as["canary"],
        served_as["champion"],
        settings,
        evaluated=evaluated_mix(canary.tags, served_as["canary"], _domain_of(traffic)),
        watch=watch,
    )
    outcome = {"action": verdict.decision, "canary": canary.version, "champion": champion.version}
    if verdict.decision == PROMOTE:
        promote_canary(tracking_uri, model_name, moved_by=f"{MOVED_BY}: {verdict.reason}")
    elif verdict.decision == DROP:
        drop_canary(tracking_uri, model_name, moved_by=f"{MOVED_BY}: {verdict.reason}", reason=verdict.reason)
        path = record_incident(
            home,
            "canary_dropped",
            f"canary {served_as['canary']} dropped, {served_as['champion']} keeps serving: {verdict.reason}",
            {"verdict": verdict.to_dict()},
        )
        outcome["incident"] = str(path)
    run = log_canary_decision(tracking_uri, model_name, verdict.to_dict(), artifact_location)
    return {**outcome, "reason": verdict.reason, "mlflow_run_id": run, "verdict": verdict.to_dict()}
