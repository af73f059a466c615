"""Traffic served by a model: a day's customers drawn first, then every conversation in one batch.

`simulate(policy=...)` records what a model (e.g. the registered champion) actually does with the
day's customers: by default the whole shop (every intent of the mix, every persona, back-end
faults, a person finishing what the model hands over: `training.traffic.simulate.ServedTraffic`).
At `level=1` the shop is the one a level-1 policy is trained and judged on
(`training.tiny.level1`): order-status and cancellation requests of a cooperative customer who
states identity and request in the first message, compact tool results and the level-1 tools. A
scenario that has no level-1 form (two orders, too many actions) is drawn again from the same
generator, so the day stays reproducible.

A canary (`serve_split`) serves beside the model: `serves_canary` sends each conversation to it
or not by a draw of its own, seeded by (seed, day, index), so the split is reproducible and the
conversation itself (customer, scenario, seeds, label) is the one it would have been without a
canary; only who answers it changes.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from domains.retail.level1 import LEVEL1_INTENTS, LEVEL1_TOOLS, as_level1
from domains.retail.traffic.agents import scenario_conversation, scenario_row
from domains.retail.traffic.scenarios import Scenario, ScenarioSampler, sample_scenario
from training.sandbox.rollout import SERVING_MAX_TURNS, Conversation, Policy, roll_out, start_conversation

SERVED_LEVELS = (None, 1)
LEVEL1_MIX = {intent: 1.0 for intent in LEVEL1_INTENTS}  # the level-1 shop's requests, alike
_LEVEL1_DRAWS = 50  # scenarios tried per conversation before the intent is declared unservable


class ServedTrafficError(ValueError):
    """Model-served traffic cannot be drawn as asked (names the setting and the rule)."""


@dataclass(frozen=True)
class Drawn:
    """One conversation of the day before it is held: its generator (the record's later draws
    come from it), the scenario (restated at level 1), the level-1 task row, the customer seed."""

    rng: random.Random
    scenario: Scenario
    task: dict[str, Any] | None
    seed: int


def check_level(level: int | None, intents: Sequence[str], policy: Policy | None) -> None:
    if level not in SERVED_LEVELS:
        raise ServedTrafficError(f"level={level!r}: served traffic is drawn as recorded (None) or at level 1")
    if level is None:
        return
    if policy is None:
        raise ServedTrafficError("level=1 traffic is a model's: pass the policy that serves it")
    outside = sorted(set(intents) - set(LEVEL1_INTENTS))
    if outside:
        raise ServedTrafficError(f"level=1 serves only {list(LEVEL1_INTENTS)}; the intent mix also has {outside}")


def draw(world: dict[str, Any], intent: str, rng: random.Random, sampler: ScenarioSampler, level: int | None) -> Drawn:
    scenario = sample_scenario(world, intent, rng, sampler=sampler)
    task = None
    if level == 1:
        for _ in range(_LEVEL1_DRAWS):
            task = as_level1(scenario_row(scenario))
            if task is not None:
                break
            scenario = sample_scenario(world, intent, rng, sampler=sampler)
        else:
            raise ServedTrafficError(f"no level-1 form among {_LEVEL1_DRAWS} {intent!r} scenarios of this world")
        scenario = replace(scenario, user_scenario=task["user_scenario"])
    return Drawn(rng, scenario, task, rng.randrange(2**31))


def serve(
    policy: Policy, drawn: Sequence[Drawn], max_turns: int = SERVING_MAX_TURNS, tool_fault_rate: float = 0.0
) -> list[Conversation]:
    """Hold every drawn conversation with `policy`, in one batched rollout; `tool_fault_rate` of
    the back-end calls fail with the sandbox's retryable error (see `start_conversation`).

    A model answers every live conversation's next turn in one generate call (`roll_out` keeps the
    batch at the policy's `max_live`): what makes a day of model-served traffic affordable on a CPU.
    Conversations are independent, so batching changes no transcript.
    """
    conversations = [_open(item, tool_fault_rate) for item in drawn]
    roll_out(policy, conversations, max_turns)
    return conversations


def _open(item: Drawn, tool_fault_rate: float) -> Conversation:
    if item.task is None:
        return scenario_conversation(item.scenario, item.seed, tool_fault_rate)
    return start_conversation(
        item.task,
        item.seed,
        customer_id=item.scenario.user_id,
        compact=True,
        tools=LEVEL1_TOOLS,
        tool_fault_rate=tool_fault_rate,
    )


def serves_canary(seed: int, day: str, index: int, share: float) -> bool:
    """Whether conversation `index` of `day` goes to the canary: true for about `share` of them.

    The draw has a generator of its own, not the conversation's: taking it from the conversation's
    would shift every later draw (scenario, customer seed, label) of the canary's conversations."""
    return share > 0 and random.Random(f"traffic:{seed}:{day}:{index}:canary").random() < share


def serve_split(
    policy: Policy,
    canary: Policy,
    drawn: Sequence[Drawn],
    to_canary: Sequence[bool],
    max_turns: int = SERVING_MAX_TURNS,
    tool_fault_rate: float = 0.0,
) -> list[Conversation]:
    """Hold each drawn conversation with `canary` where `to_canary` says so, else with `policy`:
    one batched rollout per model (`serve`), the conversations returned in the day's order."""
    if len(to_canary) != len(drawn):
        raise ServedTrafficError(f"{len(to_canary)} canary flags for {len(drawn)} conversations")
    arms = {
        arm: serve(model, [item for item, flag in zip(drawn, to_canary) if flag is arm], max_turns, tool_fault_rate)
        for arm, model in ((False, policy), (True, canary))
    }
    iterators = {arm: iter(conversations) for arm, conversations in arms.items()}
    return [next(iterators[flag]) for flag in to_canary]
