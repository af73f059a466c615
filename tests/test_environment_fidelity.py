"""Fidelity to the reference: the 500 tau-bench retail tasks, replayed through the environment.

For every task the gold actions must leave exactly the task's `expected_changes` (every listed
record equal, every other record of the world untouched) and produce exactly its
`gold_action_errors`; on the full world and on the task's touched subset. 500 of 500.
"""

from __future__ import annotations

from typing import Any

import pytest

from domains.retail.world import COLLECTIONS, WorldError, load_world, touched_subset
from tests.helpers_environment import tiny_world
from tests.helpers_retail import WRITE_TOOLS, RetailEnvironment, replay_actions
from training.sandbox.environment import call_tool

REFERENCE_TASKS = 500


def _mismatches(task: dict[str, Any], before: dict[str, Any], after: dict[str, Any], errors: list[str]) -> list[str]:
    """What differs from the reference outcome, as readable lines (empty when faithful)."""
    problems = []
    if errors != task["gold_action_errors"]:
        problems.append(f"errors {errors} != {task['gold_action_errors']}")
    expected = task["expected_changes"]
    for kind in COLLECTIONS:
        if set(after[kind]) != set(before[kind]):
            problems.append(f"{kind}: record ids differ")
            continue
        changed = {
            rid
            for rid, record in after[kind].items()
            if record is not before[kind][rid] and record != before[kind][rid]
        }
        listed = set(expected.get(kind, {}))
        if changed != listed:
            problems.append(f"{kind}: changed {sorted(changed)} but reference lists {sorted(listed)}")
        problems += [
            f"{kind}[{rid}] differs from the reference record"
            for rid in sorted(changed & listed)
            if after[kind][rid] != expected[kind][rid]
        ]
    return [f"{task['task_id']}: {p}" for p in problems]


def test_all_reference_tasks_on_the_full_world(world, world_dir, reference_tasks):
    assert len(reference_tasks) == REFERENCE_TASKS
    problems: list[str] = []
    for task in reference_tasks:
        # Copy-on-write: each task starts from the pristine world; only written records are copied.
        final, errors = replay_actions(world, task["actions"], share_unchanged=True)
        problems += _mismatches(task, world, final, errors)
    assert not problems, f"{len(problems)} mismatches, first: {problems[:5]}"
    # No replay may have written through to the shared world: it still equals the files.
    assert world == load_world(world_dir)


def test_full_deep_copy_path_agrees_with_copy_on_write(world, reference_tasks):
    # The default (fully copied) replay must reach the same states; every 10th task keeps it quick.
    for task in reference_tasks[::10]:
        shared, shared_errors = replay_actions(world, task["actions"], share_unchanged=True)
        copied, copied_errors = replay_actions(world, task["actions"])
        assert (copied, copied_errors) == (shared, shared_errors), task["task_id"]
        assert all(copied["users"][u] is not world["users"][u] for u in copied["users"])


def test_all_reference_tasks_on_their_touched_subset(world, reference_tasks):
    problems: list[str] = []
    for task in reference_tasks:
        subset = touched_subset(world, task["user_id"], task["actions"])
        for kind, records in task["expected_changes"].items():
            missing = set(records) - set(subset[kind])
            problems += [f"{task['task_id']}: subset lacks {kind} {sorted(missing)}"] if missing else []
        final, errors = replay_actions(subset, task["actions"])
        problems += _mismatches(task, subset, final, errors)
    assert not problems, f"{len(problems)} mismatches, first: {problems[:5]}"


@pytest.mark.parametrize("stride_start", range(4))
def test_audit_log_of_gold_replay_marks_writes_as_changes(world, reference_tasks, stride_start):
    """Through call_tool one by one: a successful write changes the world, a failed one does not."""
    for task in reference_tasks[stride_start::4]:
        env = RetailEnvironment()
        env.reset(initial_state=touched_subset(world, task["user_id"], task["actions"]), customer_id=task["user_id"])
        for action in task["actions"]:
            call_tool(env, action["name"], action["arguments"])
        log = env.audit_log
        assert [e.tool for e in log] == [a["name"] for a in task["actions"]]
        assert [e.result for e in log if e.error] == task["gold_action_errors"]
        assert all(e.changed == (not e.error) for e in log if e.tool in WRITE_TOOLS), task["task_id"]
        assert env.episode.user_id == task["user_id"]


# ---- replay and world helpers ----
@pytest.mark.parametrize("share", [False, True])
def test_replay_never_mutates_its_input(share):
    world = tiny_world()
    actions = [
        {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}},
        {"name": "cancel_pending_order", "arguments": {"order_id": "#W1", "reason": "no longer needed"}},
        {"name": "no_such_tool", "arguments": {}},
    ]
    final, errors = replay_actions(world, actions, share_unchanged=share)
    assert world == tiny_world() and final["orders"]["#W1"]["status"] == "cancelled"
    assert errors == ["Error: non-pending order cannot be cancelled", "Error: unknown tool 'no_such_tool'"]
    assert final["users"]["ann_lee_1"] is not world["users"]["ann_lee_1"]


def test_touched_subset_holds_user_orders_and_products_deep_copied():
    world = tiny_world()
    subset = touched_subset(world, "bob_kim_2", [{"name": "x", "arguments": {"new_item_ids": ["I2"]}}])
    assert list(subset["users"]) == ["bob_kim_2"] and list(subset["orders"]) == ["#W4"]
    assert list(subset["products"]) == ["P1", "P2"]  # P2 from the order, P1 from the new item id
    subset["orders"]["#W4"]["status"] = "cancelled"
    assert world == tiny_world() and touched_subset(world, "bob_kim_2") == touched_subset(world, "bob_kim_2")
    with pytest.raises(WorldError):
        touched_subset(world, "nobody")


def test_load_world_reads_the_three_files(tmp_path, world_dir):
    assert set(load_world(world_dir)) == {"users", "orders", "products"}
    with pytest.raises(WorldError, match="missing_file"):
        load_world(tmp_path)
