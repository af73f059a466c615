"""Customer scenarios sampled over every intent of the contract, with gold verified by replay.

A scenario is what one simulated production interaction is about: the customer, the order, the
change they want (the gold actions) or the fact they want told (the gold outputs), what they know
(`known_info`) and how they talk (persona). Gold is never trusted by construction: each sample is
replayed on its initial state by the environment and rejected if any gold call returns an Error or
a write changes nothing, so every scenario handed to the traffic simulator is solvable.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dataplane.rowtext import stored_form
from domains.retail.intents import INTENT_NAMES, WRITE_TOOLS
from domains.retail.tools_write import CANCEL_REASONS
from domains.retail.traffic.worldgen import random_address
from domains.retail.world import touched_subset

INTENTS = INTENT_NAMES  # the record contract's intents: one list, declared there
# Production mix: reads and cancellations dominate, account edits are rare.
DEFAULT_INTENT_MIX: dict[str, float] = {
    "order_status": 0.20,
    "cancel_order": 0.16,
    "return_items": 0.14,
    "exchange_items": 0.11,
    "modify_order_items": 0.10,
    "modify_order_address": 0.07,
    "modify_order_payment": 0.06,
    "modify_user_address": 0.06,
    "other": 0.10,
}
PERSONA_MIX: dict[str, float] = {"polite": 0.4, "angry": 0.15, "confused": 0.15, "terse": 0.15, "plays_dumb": 0.15}
# Requests outside the tools: a person must handle them.
OUT_OF_SCOPE = (
    "change the email address on your account",
    "dispute a charge on your credit card statement",
    "get a price match on something you bought last week",
    "complain about the delivery driver",
    "close your account",
    "ask for compensation for a late delivery",
)
_MAX_TRIES = 40


class ScenarioError(ValueError):
    """No valid scenario could be sampled (names the intent and why)."""


@dataclass(frozen=True)
class Scenario:
    """One sampled, replay-verified customer request."""

    intent: str
    user_id: str
    order_id: str | None
    gold: dict[str, Any]
    user_scenario: dict[str, Any]
    initial_state: dict[str, Any]
    escalation_was_necessary: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the out-of-scope request text

    @property
    def write(self) -> dict[str, Any] | None:
        """The gold write call, or None for read-only and escalation scenarios."""
        return next((a for a in self.gold["actions"] if a["name"] in WRITE_TOOLS), None)


def validate_intent_mix(mix: Mapping[str, float]) -> dict[str, float]:
    """Check an intent -> weight mapping (known intents, non-negative, positive total)."""
    unknown = sorted(set(mix) - set(INTENTS))
    if unknown:
        raise ScenarioError(f"unknown intent(s) {unknown} in intent mix; known: {list(INTENTS)}")
    if any(not isinstance(w, (int, float)) or isinstance(w, bool) or w < 0 for w in mix.values()):
        raise ScenarioError(f"intent weights must be non-negative numbers: {dict(mix)}")
    if sum(mix.values()) <= 0:
        raise ScenarioError(f"intent mix has no positive weight: {dict(mix)}")
    return {intent: float(mix.get(intent, 0.0)) for intent in INTENTS}


def _auth_info(rng: random.Random, user: dict[str, Any]) -> dict[str, Any]:
    name = {
        "first_name": user["name"]["first_name"],
        "last_name": user["name"]["last_name"],
        "zip": user["address"]["zip"],
    }
    choice = rng.random()
    if choice < 0.45:
        return {"email": user["email"]}
    if choice < 0.9:
        return name
    return {"email": user["email"], **name}


def _variant_swaps(world: dict[str, Any], order: dict[str, Any], rng: random.Random) -> list[tuple[str, str]]:
    """(old item id, new item id) pairs: another available variant of the same product."""
    swaps = []
    for item in order["items"]:
        product = world["products"].get(item["product_id"])
        if product is None:
            continue
        others = [
            v["item_id"] for v in product["variants"].values() if v["available"] and v["item_id"] != item["item_id"]
        ]
        if others:
            swaps.append((item["item_id"], rng.choice(others)))
    return swaps


def _item_names(order: dict[str, Any], item_ids: list[str]) -> list[str]:
    names = {item["item_id"]: item["name"] for item in order["items"]}
    return [names[i] for i in item_ids]


def _methods(user: dict[str, Any]) -> list[str]:
    return list(user["payment_methods"])


class ScenarioSampler:
    """Indexes a world's orders by status once; `draft` proposes one intent's gold and customer
    knowledge, or None when the random pick is unusable (e.g. a one-method user for a payment change)."""

    def __init__(self, world: dict[str, Any]) -> None:
        self.world = world
        self.by_status: dict[str, list[str]] = {}
        for order_id, order in world["orders"].items():
            if order["user_id"] in world["users"]:
                self.by_status.setdefault(order["status"], []).append(order_id)
        self.all_orders = [oid for ids in self.by_status.values() for oid in ids]
        self.users = list(world["users"])

    def pick_order(self, rng: random.Random, status: str | None) -> tuple[str, dict, dict] | None:
        pool = self.all_orders if status is None else self.by_status.get(status, [])
        if not pool:
            return None
        order_id = rng.choice(pool)
        order = self.world["orders"][order_id]
        return order_id, order, self.world["users"][order["user_id"]]

    def draft(self, intent: str, rng: random.Random) -> tuple[str, str | None, list[dict], list[str], dict] | None:
        """(user id, order id, gold actions, gold outputs, intent-specific known_info)."""
        if intent == "modify_user_address":
            user_id = rng.choice(self.users)
            address = random_address(rng)
            return (
                user_id,
                None,
                [{"name": "modify_user_address", "arguments": {"user_id": user_id, **address}}],
                [],
                {"address": address},
            )
        if intent == "other":
            user_id = rng.choice(self.users)
            request = rng.choice(OUT_OF_SCOPE)
            summary = (
                f"Customer {user_id} wants to {request.replace('your', 'their').replace('you', 'they')}; "
                "this is outside what the tools can do."
            )
            return (
                user_id,
                None,
                [{"name": "transfer_to_human_agents", "arguments": {"summary": summary}}],
                [],
                {"request": request},
            )
        status = {"order_status": None, "return_items": "delivered", "exchange_items": "delivered"}.get(
            intent, "pending"
        )
        picked = self.pick_order(rng, status)
        if picked is None:
            return None
        order_id, order, user = picked
        user_id = order["user_id"]
        if intent == "order_status":
            read = {"name": "get_order_details", "arguments": {"order_id": order_id}}
            return user_id, order_id, [read], [order["status"]], {}
        return self._draft_write(intent, rng, user_id, order_id, order, user)

    def _draft_write(
        self, intent: str, rng: random.Random, user_id: str, order_id: str, order: dict, user: dict
    ) -> tuple[str, str, list[dict], list[str], dict] | None:
        methods = _methods(user)
        if intent == "cancel_order":
            reason = rng.choice(CANCEL_REASONS)
            return (
                user_id,
                order_id,
                [{"name": "cancel_pending_order", "arguments": {"order_id": order_id, "reason": reason}}],
                [],
                {"reason": reason},
            )
        if intent == "modify_order_address":
            address = random_address(rng)
            return (
                user_id,
                order_id,
                [{"name": "modify_pending_order_address", "arguments": {"order_id": order_id, **address}}],
                [],
                {"address": address},
            )
        if intent == "modify_order_payment":
            current = order["payment_history"][0]["payment_method_id"]
            others = [m for m in methods if m != current]
            if len(order["payment_history"]) != 1 or not others:
                return None
            method = rng.choice(others)
            return (
                user_id,
                order_id,
                [
                    {
                        "name": "modify_pending_order_payment",
                        "arguments": {"order_id": order_id, "payment_method_id": method},
                    }
                ],
                [],
                {"payment_method_id": method},
            )
        if intent == "return_items":
            ids = sorted({item["item_id"] for item in order["items"]})
            chosen = sorted(rng.sample(ids, rng.randint(1, len(ids))))
            original = order["payment_history"][0]["payment_method_id"]
            gift = [m for m in methods if user["payment_methods"][m]["source"] == "gift_card"]
            method = rng.choice([original] + gift) if original in methods else (gift[0] if gift else original)
            return (
                user_id,
                order_id,
                [
                    {
                        "name": "return_delivered_order_items",
                        "arguments": {"order_id": order_id, "item_ids": chosen, "payment_method_id": method},
                    }
                ],
                [],
                {"item_names": _item_names(order, chosen), "payment_method_id": method},
            )
        swaps = _variant_swaps(self.world, order, rng)
        if not swaps or not methods:
            return None
        chosen = rng.sample(swaps, rng.randint(1, min(2, len(swaps))))
        old, new = [a for a, _ in chosen], [b for _, b in chosen]
        method = rng.choice(methods)
        tool = "exchange_delivered_order_items" if intent == "exchange_items" else "modify_pending_order_items"
        return (
            user_id,
            order_id,
            [
                {
                    "name": tool,
                    "arguments": {
                        "order_id": order_id,
                        "item_ids": old,
                        "new_item_ids": new,
                        "payment_method_id": method,
                    },
                }
            ],
            [],
            {"item_names": _item_names(order, old), "payment_method_id": method},
        )


def _instruction(
    intent: str, user: dict[str, Any], order_id: str | None, info: dict[str, Any], persona: str, extra: dict[str, Any]
) -> str:
    name = f"{user['name']['first_name']} {user['name']['last_name']}"
    what = {
        "order_status": f"find out the status of order {order_id}",
        "cancel_order": f"cancel order {order_id} because {info.get('reason')}",
        "return_items": f"return {', '.join(info.get('item_names', []))} from order {order_id}, refunded to "
        f"{info.get('payment_method_id')}",
        "exchange_items": f"exchange {', '.join(info.get('item_names', []))} from order {order_id} for another "
        f"variant, paying any difference with {info.get('payment_method_id')}",
        "modify_order_items": f"change {', '.join(info.get('item_names', []))} in pending order {order_id} to "
        f"another variant, paying any difference with {info.get('payment_method_id')}",
        "modify_order_address": f"change the shipping address of order {order_id}",
        "modify_order_payment": f"pay for order {order_id} with {info.get('payment_method_id')} instead",
        "modify_user_address": "update the default address on your account",
        "other": extra.get("request", "get help with something the store cannot do online"),
    }[intent]
    return f"You are {name}. You are {persona.replace('_', ' ')}. You want to {what}."


def sample_scenario(
    world: dict[str, Any],
    intent: str,
    rng: random.Random,
    replay: Callable[[dict, list], tuple[dict, list]] | None = None,
    sampler: ScenarioSampler | None = None,
) -> Scenario:
    """One replay-verified scenario of `intent`; raises ScenarioError after repeated bad draws."""
    if intent not in INTENTS:
        raise ScenarioError(f"unknown intent {intent!r}; known: {list(INTENTS)}")
    if replay is None:
        from domains.retail.tools import replay_actions

        def replay(state: dict, actions: list) -> tuple[dict, list]:
            # Only the comparison below reads the result, so unchanged records may be shared.
            return replay_actions(state, actions, share_unchanged=True)

    sampler = sampler or ScenarioSampler(world)
    for _ in range(_MAX_TRIES):
        drafted = sampler.draft(intent, rng)
        if drafted is None:
            continue
        user_id, order_id, writes, outputs, specific = drafted
        user = world["users"][user_id]
        auth = _auth_info(rng, user)
        # Read-only and escalation golds carry the identification too: it is the evidence the
        # verifiable core requires before a fact is told or a person is called.
        auth_call = (
            {"name": "find_user_id_by_email", "arguments": {"email": auth["email"]}}
            if "email" in auth
            else {
                "name": "find_user_id_by_name_zip",
                "arguments": {k: auth[k] for k in ("first_name", "last_name", "zip")},
            }
        )
        actions = [auth_call] + writes if intent in ("order_status", "other") else writes
        state = touched_subset(world, user_id, actions)
        final, errors = replay(state, actions)
        if errors or (intent not in ("order_status", "other") and final == state):
            continue
        persona = rng.choices(list(PERSONA_MIX), list(PERSONA_MIX.values()))[0]
        extra = {"request": specific.pop("request")} if "request" in specific else {}
        known = {**auth, "intent": intent, **({"order_ids": [order_id]} if order_id else {}), **specific}
        scenario = {
            "instruction": _instruction(intent, user, order_id, known, persona, extra),
            "known_info": known,
            "persona": persona,
        }
        return Scenario(
            intent,
            user_id,
            order_id,
            {"actions": actions, "outputs": outputs},
            scenario,
            # In the store's layout: a full tool result shows a record's keys in the state's order,
            # and every replay of this conversation (training, evaluation) reads the stored state.
            # Laid out once the draft is kept (the replay above reads no key order).
            stored_form(state),
            True if intent == "other" else None,
            extra,
        )
    raise ScenarioError(f"no valid {intent!r} scenario in {_MAX_TRIES} draws from this world")


def sample_scenarios(
    world: dict[str, Any], n: int, seed: int = 0, intent_mix: Mapping[str, float] | None = None
) -> list[Scenario]:
    """`n` scenarios with intents drawn from `intent_mix` (default DEFAULT_INTENT_MIX), deterministic per seed."""
    mix = validate_intent_mix(intent_mix or DEFAULT_INTENT_MIX)
    rng = random.Random(f"scenarios:{seed}")
    sampler = ScenarioSampler(world)
    intents = rng.choices(list(mix), list(mix.values()), k=n)
    return [sample_scenario(world, intent, rng, sampler=sampler) for intent in intents]
