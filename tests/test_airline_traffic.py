"""Simulated airline traffic: deterministic worlds, and scenarios whose gold replays cleanly."""

from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from domains.airline import domain
from domains.api import TrafficGenerator


@pytest.fixture(scope="module")
def traffic():
    generator = domain.traffic()
    assert isinstance(generator, TrafficGenerator)
    return generator


@pytest.fixture(scope="module")
def world(traffic):
    return traffic.generate_world(150, seed=3)


def test_worlds_are_deterministic_valid_and_sized(traffic, world):
    assert traffic.generate_world(150, seed=3) == world
    assert traffic.generate_world(150, seed=4)["users"] != world["users"]
    assert len(world["users"]) == 150 and len(world["flights"]) == 300
    domain.validate_initial_state(world)  # every reservation's owner is in the world
    assert all(r["user_id"] in world["users"] for r in world["reservations"].values())
    with pytest.raises(ValueError):
        traffic.generate_world(0, seed=1)


def test_the_intent_mix_covers_every_intent(traffic):
    assert set(traffic.intent_mix) == set(domain.intents)
    assert sum(traffic.intent_mix.values()) == pytest.approx(1.0)


def test_two_hundred_scenarios_over_every_intent_replay_without_errors(traffic, world):
    rng = random.Random(11)
    counts: Counter[str] = Counter()
    for number in range(200):
        intent = domain.intents[number % len(domain.intents)]
        row = traffic.sample(world, intent, rng)
        assert row is not None, f"no {intent} scenario in this world"
        assert row["intent"] == intent and row["escalation_was_necessary"] == (intent == "transfer")
        state = row["initial_state"]
        domain.validate_initial_state(state)
        assert row["customer_id"] in state["users"]
        before = json.dumps(state)
        final, errors = domain.replay(state, row["gold"]["actions"])
        assert not errors, (intent, errors)
        assert json.dumps(state) == before
        writes = [a for a in row["gold"]["actions"] if domain.spec(a["name"]).kind == "write"]
        assert (final != state) == bool(writes), intent
        # The gold, read as a transcript, is classified as the intent it was drawn for.
        transcript = [{"role": "assistant", "tool_calls": row["gold"]["actions"]}]
        assert domain.classify_intent(transcript) == intent
        scenario = row["user_scenario"]
        assert scenario["persona"] in domain.personas
        assert domain.scenario_facts(scenario).identity == {"user_id": row["customer_id"]}
        json.dumps(row)
        counts[intent] += 1
    assert set(counts) == set(domain.intents)


def test_sampling_is_deterministic_for_a_seed(traffic, world):
    first = traffic.sample(world, "change_flight", random.Random(5))
    assert first == traffic.sample(world, "change_flight", random.Random(5))
    with pytest.raises(ValueError, match="unknown airline intent"):
        traffic.sample(world, "teleport", random.Random(5))
