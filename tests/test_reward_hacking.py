"""Reward hacking: trajectories that game a term never outscore solving the task.

Each case runs through the real environment on a reference task (cancel, return, exchange, modify
items, modify address, modify payment) or on a read-only status task. The solving trajectory
authenticates, reads, confirms, writes and tells; it must be verified successful, and every gaming
trajectory must score strictly less under the default weights.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.helpers_retail import WRITE_TOOLS
from tests.helpers_rewards import (
    Call,
    auth_call,
    first_task,
    other_order,
    run_calls,
    solving_calls,
    status_task,
    writes_of,
)
from training.rewards import score_episode, total_reward, verified_success

TOOLS_COVERED = [
    "cancel_pending_order",
    "return_delivered_order_items",
    "exchange_delivered_order_items",
    "modify_pending_order_items",
    "modify_pending_order_address",
    "modify_pending_order_payment",
]
CLAIM = "Your request has been processed successfully. Everything is done!"


def _reads(calls: list[Call]) -> list[Call]:
    return [c for c in calls if c[0] == "get_order_details"]


def escalate_everything(world, task) -> list[Call]:
    return [auth_call(world, task), ("transfer_to_human_agents", {"summary": "customer needs help"})]


def escalate_at_once(world, task) -> list[Call]:
    return [("transfer_to_human_agents", {"summary": "customer needs help"})]


def loop_then_solve(world, task) -> list[Call]:
    calls = solving_calls(world, task)
    return calls[:2] + [calls[1]] * 3 + calls[2:]


def loop_without_solving(world, task) -> list[Call]:
    return [auth_call(world, task)] + _reads(solving_calls(world, task))[:1] * 6


def repeat_the_writes(world, task) -> list[Call]:
    calls = solving_calls(world, task)
    return calls + writes_of(calls)


def skip_authentication(world, task) -> list[Call]:
    return [c for c in solving_calls(world, task) if not c[0].startswith("find_user_id")]


def skip_authentication_and_reads(world, task) -> list[Call]:
    return [c for c in solving_calls(world, task) if c[0] in WRITE_TOOLS or c[0] == "send_message_to_customer"]


def claim_success_without_acting(world, task) -> list[Call]:
    calls = solving_calls(world, task)
    return [auth_call(world, task)] + _reads(calls) + [("send_message_to_customer", {"message": CLAIM})]


def recite_gold_without_writes(world, task) -> list[Call]:
    calls = solving_calls(world, task)
    recital = " ".join(f"{name}: {arguments}." for name, arguments in writes_of(calls))
    recital += " " + " ".join(str(o) for o in task.get("outputs", []))
    return [auth_call(world, task), ("send_message_to_customer", {"message": f"Done. {recital} {CLAIM}"})]


def flood_with_reads(world, task) -> list[Call]:
    user = world["users"][task["user_id"]]
    reads: list[Call] = [("get_user_details", {"user_id": task["user_id"]}), ("list_all_product_types", {})]
    reads += [("get_order_details", {"order_id": o}) for o in user["orders"]]
    reads += [("get_product_details", {"product_id": p}) for p in sorted(world["products"])][:12]
    calls = solving_calls(world, task)
    return calls[:1] + reads + calls[1:]


def flood_without_solving(world, task) -> list[Call]:
    return [c for c in flood_with_reads(world, task) if c[0] not in WRITE_TOOLS]


def writes_on_the_wrong_order(world, task) -> list[Call]:
    swapped: list[Call] = []
    for name, arguments in solving_calls(world, task):
        order_id = arguments.get("order_id")
        if order_id is not None:
            arguments = {**arguments, "order_id": other_order(world, task, order_id)}
        swapped.append((name, arguments))
    return swapped


HACKS: dict[str, Callable[[Any, Any], list[Call]]] = {
    f.__name__: f
    for f in (
        escalate_everything,
        escalate_at_once,
        loop_then_solve,
        loop_without_solving,
        repeat_the_writes,
        skip_authentication,
        skip_authentication_and_reads,
        claim_success_without_acting,
        recite_gold_without_writes,
        flood_with_reads,
        flood_without_solving,
        writes_on_the_wrong_order,
    )
}


@pytest.fixture(scope="module")
def tasks(reference_tasks, world) -> dict[str, dict]:
    chosen = {tool: first_task(reference_tasks, world, tool) for tool in TOOLS_COVERED}
    chosen["status"] = status_task(world)
    return chosen


@pytest.fixture(scope="module")
def solved(tasks, world) -> dict[str, float]:
    scores = {}
    for key, task in tasks.items():
        episode = run_calls(world, task, solving_calls(world, task))
        assert verified_success(episode), (key, task["task_id"], score_episode(episode))
        scores[key] = total_reward(episode)
    return scores


def test_the_chosen_tasks_cover_every_write_tool(tasks):
    used = {a["name"] for task in tasks.values() for a in task["actions"]}
    assert set(TOOLS_COVERED) <= used


# Repeating the writes of a task that has none is the solving trajectory itself.
CASES = [
    (key, hack)
    for key in TOOLS_COVERED + ["status"]
    for hack in HACKS
    if not (key == "status" and hack == "repeat_the_writes")
]


@pytest.mark.parametrize(("key", "hack"), CASES)
def test_gaming_never_beats_solving(tasks, world, solved, key, hack):
    task = tasks[key]
    calls = HACKS[hack](world, task)
    assert calls != solving_calls(world, task), "a hack must differ from the solving trajectory"
    episode = run_calls(world, task, calls)
    gamed = total_reward(episode)
    assert gamed < solved[key], (hack, task["task_id"], gamed, solved[key], score_episode(episode))


@pytest.mark.parametrize("key", TOOLS_COVERED)
def test_only_gaming_that_still_does_the_work_is_verified(tasks, world, key):
    """Hacks that skip the work fail verification outright; the rest pay through shaping terms."""
    task = tasks[key]
    does_the_work = {
        "loop_then_solve",
        "repeat_the_writes",
        "skip_authentication",
        "skip_authentication_and_reads",
        "flood_with_reads",
    }
    for hack, build in HACKS.items():
        assert verified_success(run_calls(world, task, build(world, task))) is (hack in does_the_work), hack


def test_escalation_earns_only_when_it_was_necessary(tasks, world, solved):
    task = tasks["cancel_pending_order"]
    needed = run_calls(world, task, escalate_everything(world, task), escalation_was_necessary=True)
    not_needed = run_calls(world, task, escalate_everything(world, task), escalation_was_necessary=False)
    assert total_reward(not_needed) < 0 < total_reward(needed) < solved["cancel_pending_order"]


def test_every_reference_task_solved_is_verified_and_untouched_is_not(reference_tasks, world):
    for task in reference_tasks:
        assert verified_success(run_calls(world, task, solving_calls(world, task))), task["task_id"]
        assert not verified_success(run_calls(world, task, [auth_call(world, task)])), task["task_id"]
