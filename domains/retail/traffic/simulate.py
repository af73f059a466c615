"""Simulated production traffic: contract records, one folder per day (`retrain simulate`).

Each interaction samples a replay-verified scenario from the world, lets the production agent (the
scripted agent with its mistake rates, or any model policy) talk to a persona customer in a real
retail sandbox, and writes what happened as a schema-version-1 record: outcome from the
verifiable core (`training.rewards.outcome_of`), sentiment from the customer, gold on the share
of interactions whose outcome was verified, and a noisy human label on a few. Every random choice
comes from a generator seeded by (seed, day, index), so the same arguments write byte-identical
files, and a drift from day X leaves the days before it untouched.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from domains.retail.domain import RetailDomain
from domains.retail.traffic.agents import ScriptedAgent, scenario_row, validate_mistake_rates
from domains.retail.traffic.scenarios import (
    DEFAULT_INTENT_MIX,
    Scenario,
    ScenarioSampler,
    validate_intent_mix,
)
from domains.retail.traffic.serving import (
    LEVEL1_MIX,
    ServedTrafficError,
    check_level,
    draw,
    serve,
    serve_split,
    serves_canary,
)
from domains.retail.traffic.worldgen import generate_world
from domains.retail.world import load_world, validate_world
from training.rewards import outcome_of
from training.sandbox.rollout import Policy
from training.traffic import handoff
from training.traffic.handoff import HumanPart
from training.traffic.simulate import TrafficConfigError as EngineTrafficConfigError
from training.traffic.simulate import default_version, served_options, simulated_label, timestamp, with_human_part

DEFAULT_START = date(2026, 11, 2)
RECORDS_FILE = "interactions.jsonl"


# Presets for the CLI's --intent-shift-day / --degrade-day / --drift-day: returns, exchanges and
# requests outside the tools take over; every mistake five times as frequent as by default; and,
# for one day, an agent that hands half its conversations to a person (action drift: far more
# transfers, fewer reads and writes, in the tool-call mix).
SHIFTED_INTENT_MIX: dict[str, float] = {
    "order_status": 0.05,
    "cancel_order": 0.05,
    "return_items": 0.30,
    "exchange_items": 0.25,
    "modify_order_items": 0.05,
    "modify_order_address": 0.05,
    "modify_order_payment": 0.05,
    "modify_user_address": 0.05,
    "other": 0.15,
}
DEGRADED_MISTAKE_RATES: dict[str, float] = {
    "wrong_order": 0.15,
    "cancel_non_pending": 0.10,
    "unnecessary_escalation": 0.15,
    "looping": 0.10,
    "skipped_authentication": 0.15,
    "wrong_item": 0.15,
}
OVER_ESCALATING_RATES: dict[str, float] = {"unnecessary_escalation": 0.5}
# preset key -> (the Drift field it sets, its value, how many days it lasts: None for the rest)
_PRESET_KEYS = {
    "intent_mix_from_day": ("intent_mix", SHIFTED_INTENT_MIX, None),
    "degraded_agent_from_day": ("mistake_rates", DEGRADED_MISTAKE_RATES, None),
    "action_drift_day": ("mistake_rates", OVER_ESCALATING_RATES, 1),
}


class TrafficConfigError(EngineTrafficConfigError):
    """A bad argument to `simulate` (names the argument, the value and the rule)."""


class WorldNotFoundError(TrafficConfigError):
    """`world` names a folder that does not exist or lacks the world files."""


@dataclass(frozen=True)
class Drift:
    """From day index `from_day` (0-based) on, up to but not including `until_day` (None: to the
    end), replace the intent mix, the agent's mistake rates and/or the policy version: the shifts
    later tests must detect."""

    from_day: int
    intent_mix: dict[str, float] | None = None
    mistake_rates: dict[str, float] | None = None
    policy_version: str | None = None
    until_day: int | None = None

    def applies(self, day: int) -> bool:
        return day >= self.from_day and (self.until_day is None or day < self.until_day)

    @classmethod
    def coerce(cls, value: Drift | Mapping[str, Any]) -> Drift:
        if isinstance(value, Drift):
            drift = value
        elif isinstance(value, Mapping):
            unknown = sorted(set(value) - {"from_day", "until_day", "intent_mix", "mistake_rates", "policy_version"})
            if unknown or "from_day" not in value:
                raise TrafficConfigError(f"drift {dict(value)!r}: needs from_day, unknown keys {unknown}")
            drift = cls(**value)
        else:
            raise TrafficConfigError(f"drift must be a Drift or a mapping, got {type(value).__name__}")
        if isinstance(drift.from_day, bool) or not isinstance(drift.from_day, int) or drift.from_day < 0:
            raise TrafficConfigError(f"drift.from_day={drift.from_day!r} must be an integer >= 0")
        if drift.until_day is not None and (
            isinstance(drift.until_day, bool)
            or not isinstance(drift.until_day, int)
            or drift.until_day <= drift.from_day
        ):
            raise TrafficConfigError(f"drift.until_day={drift.until_day!r} must be an integer > from_day")
        if drift.intent_mix is not None:
            validate_intent_mix(drift.intent_mix)
        if drift.mistake_rates is not None:
            validate_mistake_rates(drift.mistake_rates)
        return drift


def coerce_drifts(drift: Drift | Mapping[str, Any] | Sequence[Drift | Mapping[str, Any]] | None) -> list[Drift]:
    """Drifts from a Drift, a Drift-shaped mapping, a list of either, or the preset mapping
    `{"intent_mix_from_day": X, "degraded_agent_from_day": Y, "action_drift_day": Z}` (each key
    optional; the first two last from their day on, action drift for its day only)."""
    if drift is None:
        return []
    if isinstance(drift, Mapping) and drift and set(drift) <= set(_PRESET_KEYS):
        drifts = []
        for key, day in drift.items():
            if day is None:
                continue
            name, value, lasting = _PRESET_KEYS[key]
            until = None if lasting is None or not isinstance(day, int) else day + lasting
            drifts.append(Drift.coerce({"from_day": day, "until_day": until, name: dict(value)}))
        return drifts
    if isinstance(drift, (Drift, Mapping)):
        return [Drift.coerce(drift)]
    if isinstance(drift, Sequence) and not isinstance(drift, str):
        return [Drift.coerce(d) for d in drift]
    raise TrafficConfigError(f"drift must be a Drift, a mapping or a list of them, got {type(drift).__name__}")


@dataclass(frozen=True)
class _Day:
    """The settings in force on one day, after drifts."""

    intent_mix: dict[str, float]
    agent: ScriptedAgent
    policy_version: str


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrafficConfigError(f"{name}={value!r} must be an integer >= 1")
    return value


def _share(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise TrafficConfigError(f"{name}={value!r} must be a number in [0, 1]")
    return float(value)


def _start_date(value: date | str | None, days: int) -> date:
    if value is None:  # the `days` days that ended yesterday (UTC): depends on the calendar
        return datetime.now(UTC).date() - timedelta(days=days)
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    try:
        return date.fromisoformat(str(value))
    except ValueError as err:
        raise TrafficConfigError(f"start={value!r} is not a date (YYYY-MM-DD)") from err


def resolve_world(world: Mapping[str, Any] | str | Path | None, n_users: int = 300) -> dict[str, Any]:
    """The world to sample from: a dict as given, a reference-format folder, or the generated default."""
    if world is None:
        return generate_world(n_users=n_users, seed=0)
    if isinstance(world, (str, Path)):
        folder = Path(world)
        if not folder.is_dir() or not all((folder / f"{n}.json").is_file() for n in ("users", "orders", "products")):
            raise WorldNotFoundError(f"world folder {str(folder)!r} is missing or lacks users/orders/products.json")
        return load_world(folder)
    world = dict(world)
    validate_world(world)
    return world


def record_outcome(episode: Any) -> str:
    """The contract's `outcome` of a conversation: what happened operationally.

    A transfer is an escalation even when it was the right call (the record's
    `escalation_was_necessary` says so); otherwise completed means verified success.
    """
    if episode.transferred:
        return "escalated"
    return "completed" if outcome_of(episode) == "completed" else "failed"


def _record(
    scenario: Scenario,
    conv: Any,
    person: HumanPart | None,
    rng: random.Random,
    interaction_id: str,
    started: datetime,
    policy_version: str,
    verified_share: float,
    label_share: float,
    flip_rate: float,
) -> dict[str, Any]:
    # The record's outcome and scores are the agent's: a person's part is judged in `handoff`.
    episode = conv.episode if person is None else person.agent_episode
    success = outcome_of(episode) == "completed"
    outcome = record_outcome(episode)
    talked = len(conv.messages) + (0 if person is None else len(person.messages))
    # Roughly half a minute per turn of the transcript, with jitter.
    ended = started + timedelta(seconds=20 + 12 * talked + rng.randrange(60))
    human_label = simulated_label(rng, success, label_share, flip_rate, ended)
    sentiment = conv.env.simulator.sentiment_delta if person is None else person.agent_sentiment
    record = {
        "interaction_id": interaction_id,
        "started_at": timestamp(started),
        "ended_at": timestamp(ended),
        "policy_version": policy_version,
        "customer_id": scenario.user_id,
        "intent": scenario.intent,
        "initial_state": scenario.initial_state,
        "user_scenario": scenario.user_scenario,
        "messages": conv.messages,
        "outcome": outcome,
        "escalation_was_necessary": (scenario.intent == "other") if episode.transferred else None,
        "actions_taken": len(episode.actions),
        "customer_sentiment_delta": round(float(sentiment), 4),
        "gold": scenario.gold if rng.random() < verified_share else None,
        "human_label": human_label,
        "schema_version": 1,
    }
    return with_human_part(record, person)


def _days(
    days: int,
    intent_mix: dict[str, float],
    rates: dict[str, float],
    policy_version: str,
    drifts: list[Drift],
    agent: ScriptedAgent | None = None,
) -> list[_Day]:
    out = []
    for day in range(days):
        mix, day_rates, version = intent_mix, rates, policy_version
        for drift in sorted(drifts, key=lambda d: d.from_day):
            if drift.applies(day):
                mix = validate_intent_mix(drift.intent_mix) if drift.intent_mix is not None else mix
                day_rates = (
                    validate_mistake_rates(drift.mistake_rates) if drift.mistake_rates is not None else day_rates
                )
                version = drift.policy_version or version
        out.append(_Day(mix, agent or ScriptedAgent(day_rates), version))
    return out


def _canary_share(canary: Policy | None, version: str | None, share: float, policy: Policy | None) -> float:
    """The share of conversations the canary serves (0 without one), once the arguments are checked."""
    if canary is None:
        if version is not None or share:
            raise TrafficConfigError("canary_version and canary_share need a canary policy to serve")
        return 0.0
    if policy is None:
        raise TrafficConfigError("a canary serves beside a model: pass the policy (the champion) too")
    if not isinstance(version, str) or not version:
        raise TrafficConfigError(f"canary_version={version!r} must name the version the canary serves as")
    return _share(share, "canary_share")


def simulate(
    days: int,
    per_day: int,
    seed: int = 0,
    out_dir: str | Path = "landing",
    start: date | str | None = DEFAULT_START,
    world: Mapping[str, Any] | str | Path | None = None,
    drift: Drift | Mapping[str, Any] | Sequence[Drift | Mapping[str, Any]] | None = None,
    policy_version: str | None = None,
    mistake_rates: Mapping[str, float] | None = None,
    intent_mix: Mapping[str, float] | None = None,
    verified_share: float = 0.9,
    label_share: float = 0.05,
    label_flip_rate: float = 0.1,
    n_users: int = 300,
    policy: Policy | None = None,
    level: int | None = None,
    tool_fault_rate: float | None = None,
    resolve_handovers: bool | None = None,
    canary: Policy | None = None,
    canary_version: str | None = None,
    canary_share: float = 0.0,
    agent: ScriptedAgent | None = None,
) -> dict[str, Any]:
    """Write `days` x `per_day` interactions to `out_dir/<YYYY-MM-DD>/interactions.jsonl`.

    `start` is the first day (default 2026-11-02, so the same arguments give the same bytes);
    None means the `days` days that ended yesterday (UTC). `drift`: see `coerce_drifts`.
    Returns a JSON-serialisable summary (files, counts by outcome, intent and mistake, success
    rate per day, throughput). `world` is a world dict, a reference-format folder, or None for
    the generated world (`n_users` users, always the same customers); `policy` replaces the
    scripted agent with a model policy, serving the whole shop unless `level=1` asks for the
    level-1 slice (its intents, a cooperative customer, no faults). `tool_fault_rate` and
    `resolve_handovers` (model-served traffic only) default to `ServedTraffic`'s.
    `canary` (a second model policy, recorded as `canary_version`) serves `canary_share` of the
    conversations beside `policy`, each chosen by `serving.serves_canary`. `agent` replaces the
    scripted agent of every day (e.g. one that `handles` only some intents); it takes no mistake
    rates from this call or its drifts. Raises TrafficConfigError on bad arguments.
    """
    days, per_day = _positive_int(days, "days"), _positive_int(per_day, "per_day")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TrafficConfigError(f"seed={seed!r} must be an integer")
    if policy_version is None:
        policy_version = default_version(RetailDomain.name, policy is not None)
    if not isinstance(policy_version, str) or not policy_version:
        raise TrafficConfigError(f"policy_version={policy_version!r} must be a non-empty string")
    shares = {
        k: _share(v, k)
        for k, v in (
            ("verified_share", verified_share),
            ("label_share", label_share),
            ("label_flip_rate", label_flip_rate),
        )
    }
    first = _start_date(start, days)
    drifts = coerce_drifts(drift)
    if agent is not None and (
        policy is not None or mistake_rates is not None or any(d.mistake_rates is not None for d in drifts)
    ):
        raise TrafficConfigError("agent= replaces the scripted agent: give it no policy and no mistake rates")
    schedule = _days(
        days,
        validate_intent_mix(intent_mix or (LEVEL1_MIX if level == 1 else DEFAULT_INTENT_MIX)),
        validate_mistake_rates(mistake_rates),
        policy_version,
        drifts,
        agent,
    )
    try:
        check_level(level, [i for d in schedule for i, share in d.intent_mix.items() if share > 0], policy)
    except ServedTrafficError as err:
        raise TrafficConfigError(str(err)) from None
    if policy is not None and (mistake_rates is not None or any(d.mistake_rates is not None for d in drifts)):
        # Mistake rates steer the scripted agent; a model makes its own mistakes. Silently ignoring
        # them would write a "drifted" day that did not drift.
        raise TrafficConfigError(
            "mistake rates (and the drifts that set them) apply to the scripted agent, not a policy"
        )
    try:
        fault_rate, resolve = served_options(policy, tool_fault_rate, resolve_handovers, faults=level != 1)
    except EngineTrafficConfigError as err:
        raise TrafficConfigError(str(err)) from None
    share = _canary_share(canary, canary_version, canary_share, policy)
    the_world = resolve_world(world, n_users=_positive_int(n_users, "n_users"))
    sampler, out = ScenarioSampler(the_world), Path(out_dir)
    counts: dict[str, Counter] = {k: Counter() for k in ("outcome", "intent", "mistake")}
    per_day_summary, files, customers, labelled, with_gold = [], [], set(), 0, 0
    began = time.perf_counter()
    for day_index, settings in enumerate(schedule):
        day = first + timedelta(days=day_index)
        day_rng = random.Random(f"traffic:{seed}:{day.isoformat()}:clock")
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        offsets = sorted(day_rng.randrange(0, 86_400 - 1_200) for _ in range(per_day))
        intents = day_rng.choices(list(settings.intent_mix), list(settings.intent_mix.values()), k=per_day)
        lines, day_outcomes = [], Counter()
        # Every conversation of the day is drawn first (its generator then goes on to the record's
        # own draws), so a model serves the whole day in one batched rollout.
        drawn = [
            draw(the_world, intent, random.Random(f"traffic:{seed}:{day.isoformat()}:{index}"), sampler, level)
            for index, intent in enumerate(intents)
        ]
        to_canary = [serves_canary(seed, day.isoformat(), index, share) for index in range(per_day)]
        if policy is None:
            conversations = [settings.agent.run(item.scenario, seed=item.seed) for item in drawn]
        elif canary is not None:
            conversations = serve_split(policy, canary, drawn, to_canary, tool_fault_rate=fault_rate)
        else:
            conversations = serve(policy, drawn, tool_fault_rate=fault_rate)
        people: list[HumanPart | None] = [None] * len(conversations)
        if resolve:
            rows = [{**scenario_row(i.scenario), "customer_id": i.scenario.user_id} for i in drawn]
            people = handoff.resolve_handovers("retail", list(zip(conversations, rows)))
        for index, (offset, intent, item, conv, person) in enumerate(
            zip(offsets, intents, drawn, conversations, people)
        ):
            rng, scenario = item.rng, item.scenario
            record = _record(
                scenario,
                conv,
                person,
                rng,
                f"sim-{seed}-{day.strftime('%Y%m%d')}-{index:05d}",
                midnight + timedelta(seconds=offset),
                canary_version if to_canary[index] else settings.policy_version,
                shares["verified_share"],
                shares["label_share"],
                shares["label_flip_rate"],
            )
            lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
            day_outcomes[record["outcome"]] += 1
            counts["intent"][intent] += 1
            counts["mistake"].update(conv.mistakes)
            customers.add(scenario.user_id)
            labelled += record["human_label"] is not None
            with_gold += record["gold"] is not None
        folder = out / day.isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RECORDS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(str(folder / RECORDS_FILE))
        counts["outcome"].update(day_outcomes)
        per_day_summary.append(
            {
                "date": day.isoformat(),
                "interactions": per_day,
                "policy_version": settings.policy_version,
                "canary_interactions": sum(to_canary),
                "completed_rate": day_outcomes["completed"] / per_day,
                "outcomes": dict(day_outcomes),
            }
        )
    seconds = time.perf_counter() - began
    total = days * per_day
    return {
        "days": days,
        "per_day": per_day,
        "seed": seed,
        "start": first.isoformat(),
        "out_dir": str(out),
        "interactions": total,
        "files": files,
        "customers": len(customers),
        "outcomes": dict(counts["outcome"]),
        "intents": dict(counts["intent"]),
        "mistakes": dict(counts["mistake"]),
        "completed_rate": counts["outcome"]["completed"] / total,
        "labelled": labelled,
        "with_gold": with_gold,
        "per_day_summary": per_day_summary,
        "drift": [asdict(d) for d in drifts],
        "seconds": round(seconds, 3),
        "interactions_per_second": round(total / seconds, 1) if seconds else None,
    }


def measure_throughput(
    n: int = 2_000, seed: int = 0, world: Mapping[str, Any] | str | Path | None = None
) -> dict[str, Any]:
    """Simulate `n` interactions (one day) into a temporary folder and report interactions per second.

    The timed span covers scenario sampling, the conversations, outcome scoring and writing the
    file; building the default world (milliseconds) is outside it. For bench/environment.py.
    """
    import tempfile

    the_world = resolve_world(world)
    with tempfile.TemporaryDirectory(prefix="retrain-traffic-") as tmp:
        summary = simulate(days=1, per_day=_positive_int(n, "n"), seed=seed, out_dir=tmp, world=the_world)
        written = sum(Path(f).stat().st_size for f in summary["files"])
    return {
        "interactions": summary["interactions"],
        "seconds": summary["seconds"],
        "interactions_per_second": summary["interactions_per_second"],
        "bytes_written": written,
        "mean_record_bytes": round(written / summary["interactions"]),
        "completed_rate": summary["completed_rate"],
    }
