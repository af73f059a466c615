"""Curriculum level 1: a verified interaction reduced to a short, self-contained task.

A tiny policy cannot yet coax facts out of an angry or confused customer, so level 1 keeps the
task (same world, same gold, same verifiable reward) and replaces the recorded conversation with
a cooperative customer whose opening message states everything the gold needs: who they are
(name and zip when known, else email) and the order and request. Only short single-intent tasks qualify. The
same transformation serves training (the GRPO dataset) and evaluation of a model trained at this
level (`EvalConfig.level = 1`), so both see one task format.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from domains.api import Level1
from domains.retail.policy import POLICY as SYSTEM_POLICY
from training.fields import as_dict

LEVEL1_INTENTS = ("order_status", "cancel_order")
LEVEL1_MAX_ACTIONS = 3
# The tools a level-1 task can need. A level-1 policy is offered only these: the fifteen schemas
# of the full tool set would be two thirds of a tiny policy's prompt, paid on every turn.
LEVEL1_TOOLS = (
    "find_user_id_by_email",
    "find_user_id_by_name_zip",
    "get_order_details",
    "cancel_pending_order",
    "send_message_to_customer",
    "transfer_to_human_agents",
)
LEVEL1 = Level1(
    intents=LEVEL1_INTENTS,
    max_actions=LEVEL1_MAX_ACTIONS,
    tools=LEVEL1_TOOLS,
    stated_arguments=("order_id", "email", "reason", "first_name", "last_name", "zip"),
)


def _stated(value: Any) -> str | None:
    """`value` when a customer can say it: a non-empty string. A logged scenario's `known_info` and
    gold are free-form, so a record may hold a number, a list or an object where a fact belongs;
    such a record is not restated as a level-1 task."""
    return value if isinstance(value, str) and value.strip() else None


def _by_name_zip(known: Mapping[str, Any]) -> bool:
    # Name and zip are preferred when known: two short names spelled a letter a token and a zip
    # of five digits are easier for a tiny policy to copy into its first call than a 20-character
    # email, and the customer's message says them the same way the call does.
    return all(_stated(known.get(key)) for key in ("first_name", "last_name", "zip"))


def _identity(known: Mapping[str, Any]) -> str | None:
    if _by_name_zip(known):
        return f"I am {known['first_name']} {known['last_name']}, zip code {known['zip']}"
    if _stated(known.get("email")):
        return f"my email is {known['email']}"
    return None


def _known(record: Mapping[str, Any]) -> Mapping[str, Any]:
    scenario = as_dict(record.get("user_scenario"))
    known = scenario.get("known_info") if isinstance(scenario, Mapping) else None
    return known if isinstance(known, Mapping) else {}


def _actions(record: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The gold's actions when every one is a call with an object of arguments, else None."""
    gold = as_dict(record.get("gold"))
    actions = gold.get("actions") if isinstance(gold, Mapping) else None
    if not isinstance(actions, list):
        return None
    if not all(isinstance(a, Mapping) and isinstance(a.get("arguments"), Mapping) for a in actions):
        return None
    return actions


def _the_order(record: Mapping[str, Any], known: Mapping[str, Any]) -> str | None:
    """The one order the customer names, when the record's world holds it."""
    orders = known.get("order_ids")
    if not isinstance(orders, list) or len(orders) != 1 or not _stated(orders[0]):
        return None
    state = as_dict(record.get("initial_state"))
    table = state.get("orders") if isinstance(state, Mapping) else None
    return orders[0] if isinstance(table, Mapping) and isinstance(table.get(orders[0]), Mapping) else None


def _cancel_reason(actions: list[Mapping[str, Any]]) -> str | None:
    return next(
        (_stated(a["arguments"].get("reason")) for a in actions if a.get("name") == "cancel_pending_order"), None
    )


def level1_opening(
    record: Mapping[str, Any], intents: tuple[str, ...] = LEVEL1_INTENTS, max_actions: int = LEVEL1_MAX_ACTIONS
) -> str | None:
    """The cooperative customer's first message, or None when the record is not a level-1 task
    (another intent, a longer task, or facts the customer could not state: see `_stated`)."""
    actions = _actions(record)
    if record.get("intent") not in intents or actions is None or not 0 < len(actions) <= max_actions:
        return None
    known = _known(record)
    identity, order = _identity(known), _the_order(record, known)
    if identity is None or order is None:
        return None
    if record["intent"] == "order_status":
        return f"Hi, {identity}. What is the status of order {order}?"
    reason = _cancel_reason(actions)
    if reason is None:
        return None
    return f"Hi, {identity}. Please cancel order {order}, reason: {reason}."


def as_level1(
    record: Mapping[str, Any], intents: tuple[str, ...] = LEVEL1_INTENTS, max_actions: int = LEVEL1_MAX_ACTIONS
) -> dict[str, Any] | None:
    """A copy of `record` as a level-1 task (cooperative customer, stated opening), or None."""
    opening = level1_opening(record, intents, max_actions)
    if opening is None:
        return None
    scenario = dict(as_dict(record.get("user_scenario")))
    scenario["persona"] = "polite forthcoming"
    task = dict(record)
    task["user_scenario"] = scenario
    task["messages"] = [{"role": "system", "content": SYSTEM_POLICY}, {"role": "user", "content": opening}]
    return task


def _call(name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    # Tool results are filled in by training.sft.replay_trajectory, which re-runs the calls.
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]},
        {"role": "tool", "name": name, "content": ""},
    ]


def level1_demonstration(task: Mapping[str, Any], escalate: bool = False) -> dict[str, Any]:
    """The expert conversation for a level-1 task (from `as_level1`): authenticate, read, act, tell.

    This is what SFT warm-starts a tiny policy on, so it can emit the calls GRPO then improves.
    `escalate=True` gives instead what an over-cautious production agent logs (the
    `unnecessary_escalation` mistake of `training.traffic.agents`): it authenticates and reads the order,
    then hands the customer to a human rather than acting. Such a conversation never verifies.
    """
    known = _known(task)
    order_id = known["order_ids"][0]
    state = as_dict(task["initial_state"])
    if _by_name_zip(known):
        auth = (
            "find_user_id_by_name_zip",
            {"first_name": known["first_name"], "last_name": known["last_name"], "zip": known["zip"]},
        )
    else:
        auth = ("find_user_id_by_email", {"email": known["email"]})
    messages = list(task["messages"]) + _call(*auth) + _call("get_order_details", {"order_id": order_id})
    if escalate:
        summary = (
            f"Customer wants order {order_id} cancelled."
            if task["intent"] == "cancel_order"
            else f"Customer asks for the status of order {order_id}."
        )
        messages += _call("transfer_to_human_agents", {"summary": summary})
        return {**task, "messages": messages}
    if task["intent"] == "cancel_order":
        reason = _cancel_reason(_actions(task) or [])
        messages += _call("cancel_pending_order", {"order_id": order_id, "reason": reason})
        told = f"Order {order_id} is cancelled."
    else:
        told = f"Order {order_id} is {state['orders'][order_id].get('status')}."
    messages += _call("send_message_to_customer", {"message": told})
    messages.append({"role": "assistant", "content": "Thank you."})
    return {**task, "messages": messages}
