"""Level-1 interaction records built from the reference world, with expert conversations (tests only).

Two self-contained intents: an order-status question (email + order id stated up front) and a
cancellation (email + order id + reason stated up front). The recorded assistant turns are what a
correct agent does; their tool results are placeholders because SFT replays the calls through the
environment and takes the environment's own results.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

REASONS = ("no longer needed", "ordered by mistake")


def _state(world: dict, user_id: str) -> dict:
    user = world["users"][user_id]
    orders = {oid: world["orders"][oid] for oid in user["orders"] if oid in world["orders"]}
    products = {it["product_id"] for o in orders.values() for it in o["items"]}
    return copy.deepcopy(
        {
            "users": {user_id: user},
            "orders": orders,
            "products": {pid: world["products"][pid] for pid in sorted(products)},
        }
    )


def _call(name: str, **arguments: Any) -> list[dict]:
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]},
        {"role": "tool", "name": name, "content": "(recorded)"},
    ]


def level1_record(world: dict, user_id: str, order_id: str, index: int, rng: random.Random) -> dict:
    """An order-status record for a non-pending order, a cancellation for a pending one."""
    user = world["users"][user_id]
    order = world["orders"][order_id]
    email = user["email"]
    if order["status"] == "pending":
        reason = rng.choice(REASONS)
        intent = "cancel_order"
        opening = f"Hi, my email is {email}. Please cancel order {order_id}, reason: {reason}."
        actions = [
            {"name": "find_user_id_by_email", "arguments": {"email": email}},
            {"name": "get_order_details", "arguments": {"order_id": order_id}},
            {"name": "cancel_pending_order", "arguments": {"order_id": order_id, "reason": reason}},
        ]
        outputs: list[str] = []
        told = f"Order {order_id} is cancelled."
        instruction = f"You want to cancel order {order_id} because it is {reason}."
    else:
        intent = "order_status"
        opening = f"Hi, my email is {email}. What is the status of order {order_id}?"
        actions = [
            {"name": "find_user_id_by_email", "arguments": {"email": email}},
            {"name": "get_order_details", "arguments": {"order_id": order_id}},
        ]
        outputs = [order["status"]]
        told = f"Order {order_id} is {order['status']}."
        instruction = f"You want to know the status of order {order_id}."
        reason = None
    messages = [{"role": "system", "content": "policy"}, {"role": "user", "content": opening}]
    for action in actions:
        messages += _call(action["name"], **action["arguments"])
    messages += _call("send_message_to_customer", message=told)
    messages.append({"role": "assistant", "content": "Thank you."})
    known = {"email": email, "order_ids": [order_id], "intent": intent}
    if reason:
        known["reason"] = reason
    return {
        "interaction_id": f"l1-{index:05d}",
        "customer_id": user_id,
        "intent": intent,
        "started_at": "2024-06-03T09:00:00+00:00",
        "ended_at": "2024-06-03T09:04:00+00:00",
        "policy_version": "bootstrap",
        "initial_state": _state(world, user_id),
        "user_scenario": {"instruction": instruction, "known_info": known, "persona": "cooperative"},
        "messages": messages,
        "outcome": "completed",
        "escalation_was_necessary": None,
        "actions_taken": len(actions),
        "customer_sentiment_delta": 0.0,
        "gold": {"actions": actions, "outputs": outputs},
        "human_label": None,
        "schema_version": 1,
    }


def level1_records(world: dict, n: int, seed: int = 0, user_ids: list[str] | None = None) -> list[dict]:
    """`n` level-1 records over distinct (user, order) pairs, half cancellations where possible."""
    rng = random.Random(seed)
    users = sorted(user_ids or world["users"])
    rng.shuffle(users)
    records = []
    for user_id in users:
        orders = [
            o
            for o in world["users"][user_id]["orders"]
            if o in world["orders"] and world["orders"][o]["status"] in ("pending", "delivered", "processed")
        ]
        if not orders:
            continue
        records.append(level1_record(world, user_id, rng.choice(orders), len(records), rng))
        if len(records) == n:
            break
    return records


def write_jsonl(records: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def tiny_spec():
    """A smaller model than the default so tests stay quick."""
    from training.tiny.bootstrap import TinyModelSpec

    return TinyModelSpec(
        vocab_size=6000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=2048,
    )


def failed_cancellation(record: dict) -> dict:
    """The record with its recorded cancellation made with another reason than the gold's: the
    gold (and so the task's level) unchanged, the conversation a failure."""
    bad = copy.deepcopy(record)
    for message in bad["messages"]:
        for call in message.get("tool_calls") or ():
            if call["name"] == "cancel_pending_order":
                call["arguments"]["reason"] = "something else entirely"
    return bad
