"""Simulated production traffic for any domain (`retrain simulate --domain D`).

A domain whose traffic generator has a `simulate` of its own (retail: mistake rates, drift
presets, the level-1 shop) is simulated by it. Every other domain goes through the generic driver
here: each interaction samples a replay-verified scenario from the domain's generated world, lets
the serving agent (a model policy, else the domain's rules agent) talk to the domain's simulated
customer in the sandbox, and writes what happened as a schema-version-1 record, one folder a day.
Traffic a model serves is the whole shop by default (`ServedTraffic`): the domain's whole intent
mix, its customers' personas, back-end faults on a share of the calls, and a simulated person who
finishes every conversation the model hands over (`training.traffic.handoff`; the record's
`handoff` says who did what). Every random choice comes from a generator seeded by (seed, day, index), so the same arguments
write byte-identical files.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from dataplane.settings import default_of, setting
from domains.api import Domain
from domains.registry import DEFAULT_DOMAIN, agent_name, load_domain
from training.rewards import outcome_of
from training.sandbox.rollout import DEFAULT_MAX_TURNS, Policy, roll_out, start_conversation
from training.traffic import handoff
from training.traffic.handoff import HumanPart

DEFAULT_START = date(2026, 11, 2)
RECORDS_FILE = "interactions.jsonl"
RATERS = tuple(f"rater-{i:02d}" for i in range(1, 9))
_DRAWS = 20  # scenarios tried per conversation before the intent is declared unservable


class TrafficConfigError(ValueError):
    """A bad argument to `simulate` (names the argument, the value and the rule)."""


@dataclass(frozen=True)
class ServedTraffic:
    """What simulated traffic served by a model (`simulate(policy=...)`) is, unless told otherwise."""

    tool_fault_rate: float = setting(
        0.08,
        "share of the served conversations' back-end calls (reads, writes, identification) that fail with "
        "the sandbox's retryable error, drawn per call from the conversation's seed",
    )
    resolve_handovers: bool = setting(
        True,
        "a simulated person finishes every conversation the served model hands over; the record keeps "
        "both parts and says who did what (`handoff`)",
    )


def served_options(
    policy: Policy | None, tool_fault_rate: float | None, resolve_handovers: bool | None, faults: bool = True
) -> tuple[float, bool]:
    """(fault rate, whether hand-overs are resolved) of one simulation: `ServedTraffic`'s defaults
    for traffic a model serves (no faults where `faults` is False: a slice defined without them),
    nothing for a scripted agent's, which never retries a refused call."""
    if policy is None:
        if tool_fault_rate or resolve_handovers:
            raise TrafficConfigError(
                "tool_fault_rate and resolve_handovers apply to traffic a model serves: pass the policy"
            )
        return 0.0, False
    if tool_fault_rate is None:
        tool_fault_rate = default_of(ServedTraffic, "tool_fault_rate") if faults else 0.0
    if (
        isinstance(tool_fault_rate, bool)
        or not isinstance(tool_fault_rate, (int, float))
        or not 0.0 <= tool_fault_rate <= 1.0
    ):
        raise TrafficConfigError(f"tool_fault_rate={tool_fault_rate!r} must be a number in [0, 1]")
    resolve = default_of(ServedTraffic, "resolve_handovers") if resolve_handovers is None else resolve_handovers
    return float(tool_fault_rate), bool(resolve)


def default_version(domain: str, served_by_model: bool) -> str:
    """The `policy_version` simulated traffic records when the caller names none.

    Traffic a model serves is `<domain>-agent/1`: the registered model's first version, which is
    what the shipped model becomes when the first week registers it. The scripted rules agent's
    traffic is `<domain>-rules/1`, never under the registered model's name: the weekly supervised
    step learns from the conversations versions of that model served (`episodes_source: model`),
    and scripted conversations recorded under its name were imitated as if they were its own.
    """
    return f"{agent_name(domain)}/1" if served_by_model else f"{domain}-rules/1"


def with_human_part(record: dict[str, Any], part: HumanPart | None) -> dict[str, Any]:
    """`record` with the person's messages after the agent's and its `handoff` (as is without one)."""
    if part is None:
        return record
    return {**record, "messages": [*record["messages"], *part.messages], "handoff": part.handoff}


def simulate(domain: str = DEFAULT_DOMAIN, **options: Any) -> dict[str, Any]:
    """Write simulated traffic of `domain`; see the module docstring. Returns a JSON-serialisable
    summary; raises TrafficConfigError on bad arguments."""
    loaded = load_domain(domain)
    traffic = loaded.traffic()
    if traffic is None:
        raise TrafficConfigError(f"domain {domain!r} has no traffic generator, so it cannot be simulated")
    own = getattr(traffic, "simulate", None)
    if own is not None:
        return own(**options)
    return generic_simulate(loaded, traffic, **options)


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise TrafficConfigError(f"{name}={value!r} must be an integer >= 1")
    return value


def timestamp(moment: datetime) -> str:
    """A record's timestamp: UTC, seconds, with its offset written out as the contract asks."""
    return moment.strftime("%Y-%m-%dT%H:%M:%S+00:00")


def simulated_label(
    rng: random.Random, success: bool, label_share: float, flip_rate: float, ended: datetime
) -> dict[str, Any] | None:
    """The human label of one simulated interaction: drawn for `label_share` of them, each from one
    of `RATERS`, agreeing with the verifier except for `flip_rate` of them (a rater's mistake), and
    given minutes to hours after the conversation ended. Every domain's traffic draws it the same way,
    in the same order from `rng`, so a record's label depends only on its own generator."""
    if rng.random() >= label_share:
        return None
    return {
        "task_success": (not success) if rng.random() < flip_rate else success,
        "rater": rng.choice(RATERS),
        "labeled_at": timestamp(ended + timedelta(minutes=rng.randrange(5, 240))),
    }


def _first_day(start: date | str | None, days: int) -> date:
    """The first simulated day: as given, or (None) the `days` days that ended yesterday (UTC)."""
    if start is None:
        return datetime.now(UTC).date() - timedelta(days=days)
    if isinstance(start, date):
        return start
    try:
        return date.fromisoformat(str(start))
    except ValueError as err:
        raise TrafficConfigError(f"start={start!r} is not a date (YYYY-MM-DD)") from err


def _mix(mix: Mapping[str, float], domain: Domain) -> dict[str, float]:
    unknown = sorted(set(mix) - set(domain.intents))
    if unknown or not mix or any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise TrafficConfigError(
            f"intent_mix {dict(mix)!r}: intents of {domain.name!r} {list(domain.intents)}, shares >= 0"
        )
    return dict(mix)


def generic_simulate(
    domain: Domain,
    traffic: Any,
    days: int,
    per_day: int,
    seed: int = 0,
    out_dir: str | Path = "landing",
    start: date | str | None = DEFAULT_START,
    world: Mapping[str, Any] | str | Path | None = None,
    policy_version: str | None = None,
    policy: Policy | None = None,
    intent_mix: Mapping[str, float] | None = None,
    verified_share: float = 0.9,
    label_share: float = 0.05,
    label_flip_rate: float = 0.1,
    n_users: int = 300,
    max_turns: int = DEFAULT_MAX_TURNS,
    tool_fault_rate: float | None = None,
    resolve_handovers: bool | None = None,
    **unsupported: Any,
) -> dict[str, Any]:
    """The generic driver: `days` x `per_day` interactions into `out_dir/<YYYY-MM-DD>/interactions.jsonl`.

    With a `policy`, the served traffic's faults and hand-over resolution follow `served_options`."""
    used = sorted(k for k, v in unsupported.items() if v is not None)
    if used:
        raise TrafficConfigError(f"domain {domain.name!r} does not simulate {used} (its traffic has no own simulate)")
    days, per_day = _positive_int(days, "days"), _positive_int(per_day, "per_day")
    first = _first_day(start, days)
    fault_rate, resolve = served_options(policy, tool_fault_rate, resolve_handovers)
    agent = policy if policy is not None else domain.rules_agent()
    if agent is None:
        raise TrafficConfigError(f"domain {domain.name!r} has no rules agent: give a model to serve the traffic")
    version = policy_version or default_version(domain.name, policy is not None)
    if isinstance(world, (str, Path)):
        the_world = domain.load_world(world)
    else:
        the_world = dict(world) if world is not None else traffic.generate_world(_positive_int(n_users, "n_users"), 0)
    mix = _mix(intent_mix or traffic.intent_mix, domain)
    out = Path(out_dir)
    counts: dict[str, Counter] = {"outcome": Counter(), "intent": Counter()}
    files, per_day_summary, labelled, with_gold = [], [], 0, 0
    began = time.perf_counter()
    for day_index in range(days):
        day = first + timedelta(days=day_index)
        clock = random.Random(f"traffic:{domain.name}:{seed}:{day.isoformat()}:clock")
        midnight = datetime(day.year, day.month, day.day, tzinfo=UTC)
        offsets = sorted(clock.randrange(0, 86_400 - 1_200) for _ in range(per_day))
        intents = clock.choices(list(mix), list(mix.values()), k=per_day)
        drawn = []
        for index, intent in enumerate(intents):
            rng = random.Random(f"traffic:{domain.name}:{seed}:{day.isoformat()}:{index}")
            row = next((r for r in (traffic.sample(the_world, intent, rng) for _ in range(_DRAWS)) if r), None)
            if row is None:
                raise TrafficConfigError(f"no {intent!r} scenario in {_DRAWS} draws from this {domain.name} world")
            drawn.append((rng, {**row, "domain": domain.name}))
        conversations = []
        for index, (rng, row) in enumerate(drawn):
            task_id, conv_seed = f"{day.isoformat()}:{index}", rng.randrange(2**31)
            if hasattr(agent, "plan"):  # a rules agent scripts each conversation from its routed scenario
                agent.plan(task_id, row, conv_seed)
            conversations.append(
                start_conversation(
                    row, conv_seed, task_id=task_id, customer_id=row["customer_id"], tool_fault_rate=fault_rate
                )
            )
        roll_out(agent, conversations, max_turns=max_turns)
        people = (
            handoff.resolve_handovers(domain.name, list(zip(conversations, [row for _, row in drawn])))
            if resolve
            else [None] * len(conversations)
        )
        lines, outcomes = [], Counter()
        for index, ((rng, row), conv, offset, person) in enumerate(zip(drawn, conversations, offsets, people)):
            record = _record(
                row,
                conv,
                person,
                rng,
                f"sim-{domain.name}-{seed}-{day.strftime('%Y%m%d')}-{index:05d}",
                midnight + timedelta(seconds=offset),
                version,
                (verified_share, label_share, label_flip_rate),
            )
            lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
            outcomes[record["outcome"]] += 1
            counts["intent"][record["intent"]] += 1
            labelled += record["human_label"] is not None
            with_gold += record["gold"] is not None
        folder = out / day.isoformat()
        folder.mkdir(parents=True, exist_ok=True)
        (folder / RECORDS_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
        files.append(str(folder / RECORDS_FILE))
        counts["outcome"].update(outcomes)
        per_day_summary.append({"date": day.isoformat(), "interactions": per_day, "outcomes": dict(outcomes)})
    seconds = time.perf_counter() - began
    total = days * per_day
    return {
        "domain": domain.name,
        "days": days,
        "per_day": per_day,
        "seed": seed,
        "start": first.isoformat(),
        "out_dir": str(out),
        "interactions": total,
        "files": files,
        "policy_version": version,
        "outcomes": dict(counts["outcome"]),
        "intents": dict(counts["intent"]),
        "completed_rate": counts["outcome"]["completed"] / total,
        "labelled": labelled,
        "with_gold": with_gold,
        "per_day_summary": per_day_summary,
        "seconds": round(seconds, 3),
    }


def _record(
    row: Mapping[str, Any],
    conv: Any,
    person: HumanPart | None,
    rng: random.Random,
    interaction_id: str,
    started: datetime,
    policy_version: str,
    shares: tuple[float, float, float],
) -> dict[str, Any]:
    verified_share, label_share, flip_rate = shares
    # The record's outcome and scores are the model's: a person's part is judged in `handoff`.
    episode = conv.episode if person is None else person.agent_episode
    success = outcome_of(episode) == "completed"
    outcome = "escalated" if episode.transferred else ("completed" if success else "failed")
    talked = len(conv.messages) + (0 if person is None else len(person.messages))
    ended = started + timedelta(seconds=20 + 12 * talked + rng.randrange(60))
    human_label = simulated_label(rng, success, label_share, flip_rate, ended)
    sentiment = getattr(conv.env.simulator, "sentiment_delta", 0.0) if person is None else person.agent_sentiment
    record = {
        "interaction_id": interaction_id,
        "started_at": timestamp(started),
        "ended_at": timestamp(ended),
        "policy_version": policy_version,
        "customer_id": row["customer_id"],
        "domain": row["domain"],
        "intent": row["intent"],
        "initial_state": row["initial_state"],
        "user_scenario": row["user_scenario"],
        "messages": conv.messages,
        "outcome": outcome,
        "escalation_was_necessary": row.get("escalation_was_necessary") if episode.transferred else None,
        "actions_taken": len(episode.actions),
        "customer_sentiment_delta": round(float(sentiment), 4),
        "gold": row["gold"] if rng.random() < verified_share else None,
        "human_label": human_label,
        "schema_version": 1,
    }
    return with_human_part(record, person)
