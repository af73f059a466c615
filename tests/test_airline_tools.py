"""Fidelity of the airline tools to the tau-bench reference (sierra-research/tau-bench, 59a200c).

The 20 vendored tasks (tests/data/airline-tasks) carry, for every gold call, the string the
reference returned (`gold_results`) and the records the reference left changed
(`expected_changes`). Every task must reproduce both, on the full world and on its touched
subset. Error strings for bad calls follow the reference's `Env.step` (an exception becomes
`Error: {e}`, an unknown tool `Unknown action {name}`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from domains.airline import domain
from domains.airline.environment import AirlineEnvironment
from domains.airline.world import TABLES, load_world, touched_subset

TASKS_FILE = Path(__file__).resolve().parent / "data" / "airline-tasks" / "tasks_dev.jsonl"


@pytest.fixture(scope="module")
def world() -> dict[str, Any]:
    """The full vendored world; tests must not mutate it (the environment copies it)."""
    return load_world()


@pytest.fixture(scope="module")
def tasks() -> list[dict[str, Any]]:
    return [json.loads(line) for line in TASKS_FILE.read_text().splitlines() if line.strip()]


def _mismatches(task: dict[str, Any], start: dict[str, Any], label: str) -> list[str]:
    """What differs from the reference when the gold actions run from `start` (empty when faithful)."""
    env = AirlineEnvironment()
    env.reset(start)
    problems = []
    for number, (action, expected) in enumerate(zip(task["actions"], task["gold_results"], strict=True)):
        got = env.call(action["name"], action["arguments"])
        if got != expected:
            problems.append(f"call {number} {action['name']}: {got[:120]!r} != {expected[:120]!r}")
    for table in TABLES:
        changed = {key for key, record in env.state[table].items() if start[table].get(key) != record}
        listed = task["expected_changes"].get(table, {})
        if changed != set(listed):
            problems.append(f"{table}: changed {sorted(changed)}, reference lists {sorted(listed)}")
        problems += [f"{table}[{key}] differs" for key in listed if env.state[table].get(key) != listed[key]]
    return [f"{task['task_id']} ({label}): {p}" for p in problems]


def test_the_twenty_tasks_reproduce_results_and_changes_on_the_full_world(world, tasks):
    assert len(tasks) == 20
    assert sum(len(t["actions"]) for t in tasks) == 67
    problems = [p for task in tasks for p in _mismatches(task, world, "full world")]
    assert not problems, problems[:5]
    assert world == load_world()  # nothing wrote through to the shared world


def test_the_twenty_tasks_reproduce_results_and_changes_on_the_touched_subset(world, tasks):
    problems = []
    for task in tasks:
        subset = touched_subset(world, task["user_id"], task["actions"])
        domain.validate_initial_state(subset)
        problems += _mismatches(task, subset, "subset")
    assert not problems, problems[:5]


def test_replay_matches_the_reference_state_and_reports_no_errors(world, tasks):
    for task in tasks:
        final, errors = domain.replay(world, task["actions"])
        assert errors == task["gold_action_errors"] == []
        for table in TABLES:
            for key, record in task["expected_changes"].get(table, {}).items():
                assert final[table][key] == record, (task["task_id"], table, key)
    assert world == load_world()


def test_reset_copies_and_never_writes_through(world, tasks):
    task = next(t for t in tasks if t["task_id"] == "airline-025")  # a booking: user and reservations change
    start = touched_subset(world, task["user_id"], task["actions"])
    before = json.dumps(start)
    env = AirlineEnvironment()
    env.reset(start, unknown_option=True)
    for action in task["actions"]:
        env.call(action["name"], action["arguments"])
    assert "HATHAT" in env.state["reservations"] and "HATHAT" not in start["reservations"]
    assert json.dumps(start) == before
    # The arguments are not stored by reference either: changing them later changes nothing.
    arguments = json.loads(json.dumps(task["actions"][0]["arguments"]))
    env.reset(start)
    env.call("book_reservation", arguments)
    arguments["passengers"][0]["first_name"] = "Changed"
    assert env.state["reservations"]["HATHAT"]["passengers"][0]["first_name"] != "Changed"


def test_state_is_the_live_world(world):
    env = AirlineEnvironment()
    env.reset({"users": {}, "reservations": {}, "flights": {}})
    assert set(env.state) == set(TABLES)
    env.state["users"]["x_y_1"] = {"payment_methods": {}, "reservations": []}
    assert env.call("send_certificate", {"user_id": "x_y_1", "amount": 100}) == (
        "Certificate certificate_3221322 added to user x_y_1 with amount 100."
    )
    assert env.state["users"]["x_y_1"]["payment_methods"]["certificate_3221322"]["amount"] == 100


def test_a_missing_table_is_empty():
    env = AirlineEnvironment()
    env.reset({})
    assert env.call("get_user_details", {"user_id": "a"}) == "Error: user not found"
    assert env.state == {"users": {}, "reservations": {}, "flights": {}}
