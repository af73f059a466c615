"""Helpers for the reward tests: audit entries, real-environment trajectories, reference tasks.

Trajectories run through the real `RetailEnvironment` (built from the subset of the reference
world a task touches) with a persona customer, so the Episodes scored are the ones training sees.
"""

from __future__ import annotations

import json
from typing import Any

from domains.retail.world import touched_subset
from tests.helpers_retail import WRITE_TOOLS, RetailEnvironment
from training.sandbox.environment import call_tool
from training.sandbox.episode import AuditEntry, Episode

Call = tuple[str, dict[str, Any]]


def entry(
    tool: str, arguments: dict[str, Any] | None = None, result: str = "{}", changed: bool = False, error: bool = False
) -> AuditEntry:
    return AuditEntry(tool, dict(arguments or {}), result, changed, error)


def task_world(world: dict[str, Any], task: dict[str, Any]) -> dict[str, Any]:
    return touched_subset(world, task["user_id"], task["actions"])


def scenario_of(task: dict[str, Any], persona: str = "polite") -> dict[str, Any]:
    return {"instruction": task["instruction"], "known_info": {}, "persona": persona}


def run_calls(
    world: dict[str, Any],
    task: dict[str, Any],
    calls: list[Call],
    seed: int = 0,
    escalation_was_necessary: bool | None = None,
) -> Episode:
    """Play `calls` through a fresh environment for `task` and return its Episode."""
    env = RetailEnvironment()
    env.reset(
        initial_state=task_world(world, task),
        user_scenario=scenario_of(task),
        seed=seed,
        gold={"actions": task["actions"], "outputs": task.get("outputs", [])},
        escalation_was_necessary=escalation_was_necessary,
        customer_id=task["user_id"],
    )
    for name, arguments in calls:
        call_tool(env, name, arguments)
    return env.episode


def auth_call(world: dict[str, Any], task: dict[str, Any]) -> Call:
    """How the customer identifies: email when the brief gives it, else name and zip."""
    user = world["users"][task["user_id"]]
    if "email is" in task["instruction"]:
        return ("find_user_id_by_email", {"email": user["email"]})
    return (
        "find_user_id_by_name_zip",
        {
            "first_name": user["name"]["first_name"],
            "last_name": user["name"]["last_name"],
            "zip": user["address"]["zip"],
        },
    )


def describe(action: dict[str, Any]) -> str:
    return f"{action['name'].replace('_', ' ')} with {json.dumps(action['arguments'], sort_keys=True)}"


def solving_calls(world: dict[str, Any], task: dict[str, Any]) -> list[Call]:
    """Authenticate, read each order before its first write, confirm, write, report, tell outputs.

    The last report carries the gold outputs too: once every goal is reported done, the persona
    customer says goodbye and leaves, and later messages would not reach it.
    """
    calls: list[Call] = [auth_call(world, task)]
    read: set[str] = set()
    reports: list[str] = []
    for action in task["actions"]:
        order_id = action["arguments"].get("order_id")
        if action["name"] not in WRITE_TOOLS:
            calls.append((action["name"], action["arguments"]))
            read.add(order_id) if action["name"] == "get_order_details" else None
            continue
        if order_id and order_id not in read:
            calls.append(("get_order_details", {"order_id": order_id}))
            read.add(order_id)
        calls.append(("send_message_to_customer", {"message": f"I will {describe(action)}. Shall I proceed?"}))
        calls.append((action["name"], action["arguments"]))
        reports.append(
            f"The {action['name'].replace('_', ' ')} request for order {order_id} has been processed successfully."
        )
    calls += [("send_message_to_customer", {"message": report}) for report in reports[:-1]]
    final = " ".join(reports[-1:] + [f"For your information: {output}." for output in task.get("outputs", [])])
    if final:
        calls.append(("send_message_to_customer", {"message": final}))
    return calls


def writes_of(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c[0] in WRITE_TOOLS]


def other_order(world: dict[str, Any], task: dict[str, Any], order_id: str) -> str | None:
    """Another order of the same customer, preferring one with the same status."""
    status = world["orders"][order_id]["status"]
    others = [o for o in world["users"][task["user_id"]]["orders"] if o != order_id]
    same = [o for o in others if world["orders"][o]["status"] == status]
    return (same or others or [None])[0]


def first_task(tasks: list[dict[str, Any]], world: dict[str, Any], tool: str, max_actions: int = 2) -> dict[str, Any]:
    """The reference task using `tool` with the fewest gold actions (first in file order on ties)
    whose customer has other orders."""
    for task in sorted(tasks, key=lambda t: len(t["actions"])):
        names = [a["name"] for a in task["actions"]]
        if (
            tool in names
            and len(names) <= max_actions
            and not task["gold_action_errors"]
            and len(world["users"][task["user_id"]]["orders"]) > 1
        ):
            return task
    raise LookupError(f"no reference task uses {tool} in <= {max_actions} actions")


def status_task(world: dict[str, Any]) -> dict[str, Any]:
    """A read-only task (no gold writes): tell the customer the status of one of their orders."""
    user_id, user = next((uid, u) for uid, u in sorted(world["users"].items()) if len(u["orders"]) > 1)
    order_id = user["orders"][0]
    name = user["name"]
    return {
        "task_id": "status-0",
        "user_id": user_id,
        "gold_action_errors": [],
        "instruction": f"Your name is {name['first_name']} {name['last_name']} and your zip code is "
        f"{user['address']['zip']}. You want to know the status of order {order_id}. ",
        "actions": [{"name": "get_order_details", "arguments": {"order_id": order_id}}],
        "outputs": [world["orders"][order_id]["status"]],
    }
