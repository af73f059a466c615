"""Simulated airline traffic: worlds sampled from the vendored one, replay-verified scenarios.

>>> import random
>>> traffic = AirlineTraffic()
>>> world = traffic.generate_world(50, seed=1)
>>> row = traffic.sample(world, "change_baggage", random.Random(0))
>>> row["gold"]["actions"][0]["name"]
'update_reservation_baggages'
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

from dataplane.rowtext import stored_form
from domains.airline.environment import AirlineEnvironment
from domains.airline.traffic_scenarios import BUILDERS
from domains.airline.world import load_world, touched_subset

# The share of each intent in simulated production traffic (sums to 1).
DEFAULT_INTENT_MIX = {
    "book_reservation": 0.14,
    "change_flight": 0.14,
    "change_cabin": 0.1,
    "change_baggage": 0.12,
    "change_passengers": 0.08,
    "cancel_reservation": 0.18,
    "send_certificate": 0.08,
    "transfer": 0.08,
    "other": 0.08,
}
PERSONAS = ("polite", "terse", "confused", "angry", "demanding")
_TRIES = 60  # records drawn before a sample gives up (None: the world has no fit for the intent)


class AirlineTraffic:
    """The airline domain's `TrafficGenerator`."""

    def __init__(self) -> None:
        self.intent_mix: dict[str, float] = dict(DEFAULT_INTENT_MIX)

    def generate_world(self, n_customers: int, seed: int) -> dict[str, Any]:
        """`n_customers` users of the reference world (at most its 500), their reservations, every flight.

        Deterministic for a seed; records keep the reference world's order. A world of real
        records keeps the flights' statuses, prices and seats consistent with the reservations."""
        if n_customers < 1:
            raise ValueError(f"n_customers must be at least 1, not {n_customers}")
        source = load_world()
        chosen = set(random.Random(f"airline-world:{seed}").sample(sorted(source["users"]), min(n_customers, 500)))
        users = {uid: user for uid, user in source["users"].items() if uid in chosen}
        owned = {rid for user in users.values() for rid in user["reservations"]}
        reservations = {rid: r for rid, r in source["reservations"].items() if rid in owned and r["user_id"] in chosen}
        return {"users": users, "reservations": reservations, "flights": source["flights"]}

    def sample(self, world: Mapping[str, Any], intent: str, rng: random.Random) -> dict[str, Any] | None:
        """One scenario row of `intent` whose gold replays without error on its initial state, or None."""
        if intent not in BUILDERS:
            raise ValueError(f"unknown airline intent {intent!r}; known: {sorted(BUILDERS)}")
        builder, source = BUILDERS[intent]
        keys = sorted(world[source])
        if not keys:
            return None
        for _ in range(_TRIES):
            key = rng.choice(keys)
            owner = key if source == "users" else world["reservations"][key]["user_id"]
            if owner not in world["users"]:
                continue
            draft = builder(world, key, world["users"][owner], rng)
            if draft is None:
                continue
            state = touched_subset(world, draft.customer_id, draft.actions)
            outputs = _replayed(state, draft.actions)
            if outputs is None:
                continue
            return {
                "customer_id": draft.customer_id,
                "intent": intent,
                # In the store's layout (a full tool result shows a record's keys in the state's
                # order, and every replay of the conversation reads the stored state); laid out once
                # the draft is kept, since `_replayed` reads no key order.
                "initial_state": stored_form(state),
                "user_scenario": {
                    "instruction": f"Your user id is {draft.customer_id}. {draft.instruction}",
                    "known_info": {"user_id": draft.customer_id, **draft.known},
                    "persona": rng.choice(PERSONAS),
                },
                "gold": {"actions": draft.actions, "outputs": draft.outputs or outputs},
                "escalation_was_necessary": intent == "transfer",
            }
        return None


def _replayed(state: Mapping[str, Any], actions: list[dict[str, Any]]) -> list[str] | None:
    """None when a gold action fails (or a write changes nothing); else the facts to tell ([])."""
    env = AirlineEnvironment()
    env.reset(state, share_unchanged=True)
    for action in actions:
        result = env.call(action["name"], action["arguments"])
        if result.startswith(("Error", "Unknown action")) or result == "None":
            return None
    writes = [a for a in actions if a["name"] not in ("get_reservation_details", "transfer_to_human_agents")]
    if writes and env.state == state:
        return None
    return []
