"""The airline domain as the engine sees it: entry point, tool specs, world, subsets, intents, facts."""

from __future__ import annotations

import hashlib
import inspect
import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from domains.airline import domain
from domains.airline.environment import TOOLS, AirlineEnvironment
from domains.airline.world import TABLES, load_world, touched_subset
from domains.api import Domain, DomainEnvironment, RecordRef, ToolKind

DATA = Path(__file__).resolve().parents[1] / "domains" / "airline" / "data"
TASKS_FILE = Path(__file__).resolve().parent / "data" / "airline-tasks" / "tasks_dev.jsonl"


@pytest.fixture(scope="module")
def world() -> dict[str, Any]:
    return load_world()


@pytest.fixture(scope="module")
def tasks() -> list[dict[str, Any]]:
    return [json.loads(line) for line in TASKS_FILE.read_text().splitlines() if line.strip()]


def test_the_domain_loads_through_its_entry_point():
    from domains.registry import clear_cache, domain_names, load_domain

    clear_cache()
    assert "airline" in domain_names(), "entry point missing: run .venv/bin/pip install -q --no-deps -e ."
    loaded = load_domain("airline")
    assert isinstance(loaded, Domain) and loaded.name == "airline"
    assert isinstance(loaded.make_environment(), DomainEnvironment)


def test_vendored_files_match_their_checksums():
    for line in (DATA / "SHA256SUMS").read_text().splitlines():
        digest, name = line.split()
        assert hashlib.sha256((DATA / name).read_bytes()).hexdigest() == digest, name
    assert (DATA / "tasks_dev.jsonl").read_bytes() == TASKS_FILE.read_bytes()
    assert domain.policy == (DATA / "policy.md").read_text() and "2024-05-15 15:00:00 EST" in domain.policy


def test_tool_specs_follow_the_reference_tools():
    assert domain.tool_names() == tuple(TOOLS)  # the reference's ALL_TOOLS order
    kinds = domain.kinds()
    assert domain.tool_names(ToolKind.READ) == (
        "get_reservation_details",
        "get_user_details",
        "list_all_airports",
        "search_direct_flight",
        "search_onestop_flight",
    )
    assert {kinds["think"], kinds["calculate"]} == {ToolKind.THINK}
    assert domain.tool_names(ToolKind.HAND_OVER) == ("transfer_to_human_agents",)
    assert not domain.tool_names(ToolKind.IDENTIFY)  # customers give their user id
    assert set(domain.tool_names(ToolKind.WRITE)) == {
        "book_reservation",
        "cancel_reservation",
        "send_certificate",
        "update_reservation_baggages",
        "update_reservation_flights",
        "update_reservation_passengers",
    }
    assert domain.spec("cancel_reservation").record == RecordRef("reservation_id", "reservations")
    for name in ("get_user_details", "book_reservation", "send_certificate"):
        assert domain.spec(name).record == RecordRef("user_id", "users")
    json_types = {"string", "integer", "number", "boolean", "array", "object"}
    for spec in domain.tool_specs:
        parameters = spec.parameters
        # The schema's parameters are exactly the tool's arguments, in the same order.
        signature = list(inspect.signature(TOOLS[spec.name].invoke).parameters)[1:]
        assert list(parameters["properties"]) == signature, spec.name
        assert set(parameters["required"]) == set(signature), spec.name
        assert all(p["type"] in json_types for p in parameters["properties"].values())
        if spec.record is not None:
            assert spec.record.argument in parameters["properties"] and spec.record.table in domain.tables
    tools = domain.tools
    tools[0]["function"]["name"] = "changed"
    assert domain.tools[0]["function"]["name"] == "book_reservation"  # a copy, not the spec


def test_domain_attributes():
    assert domain.tables == TABLES == ("users", "reservations", "flights")
    assert domain.customer_table == "users" and domain.owner_field == "user_id"
    assert set(domain.intents) >= {"book_reservation", "change_flight", "change_cabin", "transfer", "other"}
    assert domain.personas == ("polite", "terse", "confused", "angry", "demanding")
    patterns = [re.compile(p) for p in domain.world_key_patterns]
    for key in ("credit_card_4421486", "gift_card_3576581", "certificate_3221322", "mia_li_3668", "HAT170", "4WQ150"):
        assert any(p.fullmatch(key) for p in patterns), key


def test_validation_accepts_the_world_and_names_what_is_wrong(world):
    assert domain.validate_initial_state(world)["flights"] is world["flights"]  # checked, not re-dumped
    broken = json.loads(json.dumps(touched_subset(world, "mia_li_3668")))
    broken["reservations"]["NO6JO3"]["flights"][0]["price"] = "483"
    with pytest.raises(ValueError, match=r"reservations record 'NO6JO3', field flights\.0\.price"):
        domain.validate_initial_state(broken)
    broken = json.loads(json.dumps(touched_subset(world, "mia_li_3668")))
    del broken["users"]["mia_li_3668"]
    with pytest.raises(ValueError, match=r"reservations record '\w+': its user_id 'mia_li_3668' is not in users"):
        domain.validate_initial_state(broken)
    broken = json.loads(json.dumps(touched_subset(world, "mia_li_3668")))
    broken["users"]["mia_li_3668"]["payment_methods"]["gift_card_1"] = {"source": "gift_card", "id": "gift_card_1"}
    with pytest.raises(ValueError, match="users record 'mia_li_3668'.*a gift_card needs an amount"):
        domain.validate_initial_state(broken)
    for bad in (None, [], {"users": {}}):
        with pytest.raises(ValueError):
            domain.validate_initial_state(bad)
    schema = domain.initial_state_schema()
    assert set(schema["required"]) == set(TABLES)


def test_the_state_schema_accepts_a_subset(world):
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(touched_subset(world, "mia_li_3668"), domain.initial_state_schema())


def test_load_world_returns_fresh_tables(world):
    again = domain.load_world()
    assert again == world and again is not world and again["users"] is not world["users"]
    assert [len(again[t]) for t in TABLES] == [500, 2000, 300]


def test_touched_subset_is_small_holds_the_customer_and_is_exact_for_route_searches(world, tasks):
    env_full, env_subset = AirlineEnvironment(), AirlineEnvironment()
    env_full.reset(world, share_unchanged=True)
    for task in tasks:
        subset = touched_subset(world, task["user_id"], task["actions"])
        assert len(json.dumps(subset)) < 400_000, task["task_id"]
        assert task["user_id"] in subset["users"]
        assert set(world["users"][task["user_id"]]["reservations"]) <= set(subset["reservations"])
        env_subset.reset(subset)
        # Every search between airports of the route set gives what the full world gives.
        airports = {
            a["arguments"][k] for a in task["actions"] for k in ("origin", "destination") if k in a["arguments"]
        }
        for action in task["actions"]:
            if action["name"] == "update_reservation_flights":
                changed = world["reservations"][action["arguments"]["reservation_id"]]
                airports |= {changed["origin"], changed["destination"]}
        for origin in sorted(airports):
            for destination in sorted(airports - {origin}):
                for date in ("2024-05-15", "2024-05-16", "2024-05-20", "2024-05-29", "2024-05-30"):
                    for tool in ("search_direct_flight", "search_onestop_flight"):
                        arguments = {"origin": origin, "destination": destination, "date": date}
                        assert env_subset.call(tool, arguments) == env_full.call(tool, arguments)
    with pytest.raises(ValueError, match="no user 'nobody_1_2'"):
        touched_subset(world, "nobody_1_2")
    assert world == load_world()


def test_replay_is_copy_on_write_and_fast(world, tasks):
    started = time.perf_counter()
    for task in tasks:
        final, errors = domain.replay(world, task["actions"])
        assert not errors
    assert time.perf_counter() - started < 1.0  # a full deep copy alone takes ~0.2 s per task
    assert world == load_world()
    final, errors = domain.replay(
        world,
        [
            {"name": "cancel_reservation", "arguments": {"reservation_id": "NOPE00"}},
            {"name": "no_such_tool", "arguments": {}},
            {"name": "think", "arguments": {"thought": "ok"}},
        ],
    )
    assert errors == ["Error: reservation not found", "Unknown action no_such_tool"]


def _assistant(*calls: tuple[str, dict[str, Any]], openai: bool = False) -> dict[str, Any]:
    if openai:
        shaped = [{"type": "function", "function": {"name": n, "arguments": json.dumps(a)}} for n, a in calls]
    else:
        shaped = [{"name": n, "arguments": a} for n, a in calls]
    return {"role": "assistant", "content": "", "tool_calls": shaped}


def test_classify_intent_from_the_first_write(world, tasks):
    by_task = {
        t["task_id"]: domain.classify_intent([_assistant(*[(a["name"], a["arguments"]) for a in t["actions"]])])
        for t in tasks
    }
    assert by_task["airline-001"] == "cancel_reservation"
    assert by_task["airline-003"] == "change_flight"
    assert by_task["airline-005"] == "change_cabin"  # same flights, basic economy to economy
    assert by_task["airline-016"] == "send_certificate"
    assert by_task["airline-025"] == "book_reservation"
    assert by_task["airline-036"] == "transfer"
    assert by_task["airline-040"] == "other"
    assert set(by_task.values()) <= set(domain.intents)
    # With the reservation shown in the conversation (a synthetic id, not in the reference world):
    record = {
        "reservation_id": "ZZZ999",
        "cabin": "economy",
        "flights": [{"flight_number": "HAT1", "date": "2024-05-20"}],
    }
    same = {"reservation_id": "ZZZ999", "cabin": "business", "flights": record["flights"], "payment_id": "x"}
    shown = [
        _assistant(("get_reservation_details", {"reservation_id": "ZZZ999"}), openai=True),
        {"role": "tool", "content": json.dumps(record)},
    ]
    assert (
        domain.classify_intent([*shown, _assistant(("update_reservation_flights", same), openai=True)])
        == "change_cabin"
    )
    moved = {**same, "flights": [{"flight_number": "HAT2", "date": "2024-05-21"}]}
    assert domain.classify_intent([*shown, _assistant(("update_reservation_flights", moved))]) == "change_flight"
    for write, intent in (
        ("update_reservation_baggages", "change_baggage"),
        ("update_reservation_passengers", "change_passengers"),
    ):
        assert domain.classify_intent([_assistant((write, {}), ("transfer_to_human_agents", {}))]) == intent
    hostile = [
        None,
        "text",
        {
            "role": "assistant",
            "tool_calls": [None, {"function": {"name": 3}}, {"function": {"name": "think", "arguments": "{bad"}}],
        },
    ]
    assert domain.classify_intent(hostile) == "other"


def test_scenario_facts_and_known_info(tasks):
    facts = domain.scenario_facts({"instruction": tasks[0]["instruction"]})
    assert facts.identity == {"user_id": "olivia_gonzalez_2305"} and facts.request == tasks[0]["instruction"]
    info = domain.known_info(next(t["instruction"] for t in tasks if t["task_id"] == "airline-026"))
    assert info == {"user_id": "aarav_ahmed_6699", "reservation_ids": ["IFOYYZ", "NQNU5R", "M20IZO"]}
    for task in tasks:
        assert domain.scenario_facts({"instruction": task["instruction"]}).identity == {"user_id": task["user_id"]}
    facts = domain.scenario_facts(
        {"instruction": "You want to cancel reservation SI5UKW, not flight HAT039.", "known_info": {"user_id": "a_b_1"}}
    )
    assert facts.identity == {"user_id": "a_b_1"}
    assert facts.details["reservation_id"] == "SI5UKW" and facts.details["flight_number"] == "HAT039"
    for odd in (None, {}, {"instruction": 5, "known_info": [1]}, {"instruction": "x" * 100_000 + " reservation"}):
        assert domain.scenario_facts(odd).identity == {}
