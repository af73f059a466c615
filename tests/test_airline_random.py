"""Random tool-call sequences: never an exception, never a write through to the input, and the
copy-on-write environment (`replay`'s) agrees with the deep-copying one on every result and state.

Also the calculator against the reference's own semantics: the reference filters characters
and `eval`s; here `eval` is the oracle, on generated expressions whose powers stay small.
"""

from __future__ import annotations

import json
import random
import warnings
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domains.airline.arithmetic import calculate
from domains.airline.environment import TOOLS, AirlineEnvironment
from domains.airline.world import load_world, touched_subset

_WRITES = {
    "book_reservation",
    "cancel_reservation",
    "send_certificate",
    "update_reservation_baggages",
    "update_reservation_flights",
    "update_reservation_passengers",
}
USERS = ("mia_li_3668", "chen_jackson_3290", "olivia_gonzalez_2305", "sofia_kim_7287")


@pytest.fixture(scope="module")
def start() -> dict[str, Any]:
    """Four customers' subsets merged: some gift cards, certificates and reservations to touch."""
    world = load_world()
    state: dict[str, dict[str, Any]] = {"users": {}, "reservations": {}, "flights": {}}
    for user in USERS:
        for table, records in touched_subset(world, user).items():
            state[table].update(records)
    for number in ("HAT170", "HAT290", "HAT188", "HAT207"):
        state["flights"][number] = world["flights"][number]
    return state


def _pools(state: dict[str, Any]) -> dict[str, list[Any]]:
    payment_ids = [pid for user in state["users"].values() for pid in user["payment_methods"]]
    segments = [
        {"flight_number": number, "date": date}
        for number, flight in state["flights"].items()
        for date in list(flight["dates"])[14:20]
    ]
    odd = [None, 0, -1, 2.5, True, "", "x", [], {}, ["a"], {"a": 1}]
    return {
        "user_id": [*state["users"], "nobody_1_1", *odd],
        "reservation_id": [*state["reservations"], "HATHAT", "NOPE00", *odd],
        "payment_id": [*payment_ids, "credit_card_0", *odd],
        "origin": ["DFW", "LAX", "JFK", "EWR", "IAH", *odd],
        "destination": ["LAX", "DFW", "SEA", "EWR", "IAH", *odd],
        "date": ["2024-05-20", "2024-05-22", "2024-05-28", "2024-05-5", *odd],
        "cabin": ["basic_economy", "economy", "business", "first", *odd],
        "flights": [[s] for s in segments[:40]] + [segments[:2], [{"date": "2024-05-20"}], "HAT170", *odd],
        "passengers": [[{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}] * n for n in (1, 2, 3)] + odd,
        "payment_methods": [[{"payment_id": p, "amount": a}] for p in payment_ids for a in (50, 147, 1000)] + odd,
        "amount": [50, 100, 150.5, "100", *odd],
        "total_baggages": [0, 1, 3, "2", *odd],
        "nonfree_baggages": [0, 1, 2, "1", *odd],
        "flight_type": ["one_way", "round_trip", *odd],
        "insurance": ["yes", "no", *odd],
        "expression": ["2 + 2", "(147 - 49) * 2", "1/0", "2 ** 10", "a + b", "", *odd],
        "thought": ["hmm", *odd],
        "summary": ["wants a human", *odd],
    }


def _random_call(rng: random.Random, pools: dict[str, list[Any]]) -> tuple[Any, Any]:
    name = rng.choice([*TOOLS, *TOOLS, "unknown_tool", None])
    spec = (
        list(TOOLS[name].invoke.__code__.co_varnames[1 : TOOLS[name].invoke.__code__.co_argcount])
        if name in TOOLS
        else []
    )
    arguments = {arg: rng.choice(pools[arg]) for arg in spec if rng.random() > 0.05}
    if rng.random() < 0.05:
        arguments["surprise"] = 1
    if rng.random() < 0.01:
        return name, ["not", "a", "mapping"]
    return name, arguments


def _plausible_call(rng: random.Random, state: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A write that can succeed on the current state, so copy-on-write is exercised on real changes."""
    users, reservations = state["users"], state["reservations"]
    rid = rng.choice(list(reservations))
    reservation = reservations[rid]
    owner = users[reservation["user_id"]]
    payment_id = rng.choice(list(owner["payment_methods"]))
    kind = rng.choice(["bags", "flights", "passengers", "book", "certificate", "cancel"])
    if kind == "bags":
        more = reservation["nonfree_baggages"] + rng.randint(0, 2)
        return "update_reservation_baggages", {
            "reservation_id": rid,
            "total_baggages": more,
            "nonfree_baggages": more,
            "payment_id": payment_id,
        }
    if kind == "flights":
        segments = [{"flight_number": f["flight_number"], "date": f["date"]} for f in reservation["flights"]]
        cabin = rng.choice(["basic_economy", "economy", "business"])
        return "update_reservation_flights", {
            "reservation_id": rid,
            "cabin": cabin,
            "flights": segments,
            "payment_id": payment_id,
        }
    if kind == "passengers":
        people = [
            {"first_name": "P", "last_name": str(i), "dob": "1990-01-01"} for i in range(len(reservation["passengers"]))
        ]
        return "update_reservation_passengers", {"reservation_id": rid, "passengers": people}
    if kind == "certificate":
        return "send_certificate", {"user_id": reservation["user_id"], "amount": rng.choice([50, 100, 150])}
    if kind == "cancel":
        return "cancel_reservation", {"reservation_id": rid}
    number = rng.choice(["HAT170", "HAT290"])
    flight = state["flights"][number]
    date = rng.choice([d for d, e in flight["dates"].items() if e["status"] == "available"])
    price = flight["dates"][date]["prices"]["economy"]
    return "book_reservation", {
        "user_id": reservation["user_id"],
        "origin": flight["origin"],
        "destination": flight["destination"],
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": [{"flight_number": number, "date": date}],
        "passengers": [{"first_name": "A", "last_name": "B", "dob": "1990-01-01"}],
        "payment_methods": [{"payment_id": payment_id, "amount": price}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }


def test_random_sequences_never_raise_and_copy_on_write_agrees(start):
    pools = _pools(start)
    before = json.dumps(start)
    rng = random.Random(20240515)
    deep, shared = AirlineEnvironment(), AirlineEnvironment()
    calls = written = 0
    for _ in range(150):
        deep.reset(start)
        shared.reset(start, share_unchanged=True)
        for _ in range(rng.randint(1, 25)):
            if rng.random() < 0.5:
                name, arguments = _random_call(rng, pools)
            else:
                name, arguments = _plausible_call(rng, deep.state)
            first, second = deep.call(name, arguments), shared.call(name, arguments)
            assert isinstance(first, str) and first == second, (name, arguments)
            calls += 1
            written += name in _WRITES and first.startswith(("{", "Certificate"))
        assert deep.state == shared.state
        json.dumps(deep.state)  # the world stays JSON
    assert json.dumps(start) == before, "a call wrote through to the initial state"
    assert calls > 1500 and written > 300


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=8,
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from([*TOOLS, "nope"]), arguments=st.dictionaries(st.text(max_size=16), JSON, max_size=4))
def test_any_json_arguments_give_a_string(start, name, arguments):
    env = AirlineEnvironment()
    env.reset(start, share_unchanged=True)
    assert isinstance(env.call(name, arguments), str)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.sampled_from(list(TOOLS)),
    key=st.sampled_from(["user_id", "reservation_id", "payment_id", "flights", "passengers", "cabin"]),
    value=JSON,
)
def test_a_wrong_type_in_a_real_call_never_raises(start, name, key, value):
    pools = _pools(start)
    code = TOOLS[name].invoke.__code__
    arguments = {arg: pools[arg][0] for arg in code.co_varnames[1 : code.co_argcount]}
    if key in arguments:
        arguments[key] = value
    env = AirlineEnvironment()
    env.reset(start, share_unchanged=True)
    assert isinstance(env.call(name, arguments), str)


def _reference_calculate(expression: str) -> str:
    """The reference's semantics, as the oracle (only ever given generated arithmetic)."""
    if not all(char in "0123456789+-*/(). " for char in expression):
        return "Error: invalid characters in expression"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return str(round(float(eval(expression, {"__builtins__": None}, {})), 2))
    except Exception as exc:
        return f"Error: {exc}"


ATOMS = ["0", "1", "2", "3", "7", "10", "1.5", ".5", "2.", "00", "0.0", "()", "...", "99"]


def _expression(rng: random.Random, depth: int = 0) -> str:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice(ATOMS)
    if roll < 0.4:
        return rng.choice(["-", "+", "- ", "--"]) + _expression(rng, depth + 1)
    if roll < 0.5:
        return "(" + _expression(rng, depth + 1) + ")"
    if roll < 0.55:
        return "(" + _expression(rng, depth + 1) + ")(" + rng.choice(["", "*", "**"]) + rng.choice(["", *ATOMS]) + ")"
    if roll < 0.6:
        return (
            rng.choice(ATOMS) + rng.choice(["**", " ** "]) + rng.choice(["-", ""]) + rng.choice(ATOMS)
        )  # bounded powers
    return (
        _expression(rng, depth + 1) + rng.choice(["+", "-", "*", "/", "//", " * ", " / "]) + _expression(rng, depth + 1)
    )


def test_calculate_matches_the_reference_semantics():
    rng = random.Random(7)
    pieces = list("0123456789+-*/(). ") + ["()", "...", ")(", "*(", "1.5"]
    texts = [_expression(rng) for _ in range(20_000)]
    texts += ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 10))) for _ in range(20_000)]
    texts = [t for t in texts if "**" not in t or t.count("*") == 2]  # no chained powers for the oracle
    texts += ["", " ", "  12", "1" * 5000, "(" * 300 + "1" + ")" * 300, "9" * 400 + ".0", "01", "1..2", "((1)"]
    mismatches = [(t, calculate(t), _reference_calculate(t)) for t in texts if calculate(t) != _reference_calculate(t)]
    assert not mismatches, mismatches[:5]


def test_calculate_refuses_a_power_too_large_to_compute():
    assert calculate("9**9**9") == "Error: int too large to convert to float"  # the reference would hang
    assert calculate("2**-100000") == "0.0" and calculate("(-1)**999999999") == "-1.0"
    assert calculate(["1", "+", "1"]) == "Error: eval() arg 1 must be a string, bytes or code object"
