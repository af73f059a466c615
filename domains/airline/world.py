"""The vendored airline world (tau-bench, MIT) and the part of it a conversation can touch.

The data files sit beside this module in `data/` (package data), so the product never reads the
shared source folder. `load_world()` returns fresh objects on every call: callers may mutate them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from domains.api import copy_json

TABLES = ("users", "reservations", "flights")
# The ids book_reservation gives new reservations, in order (the reference checks only the first two).
NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")


def data_text(name: str) -> str:
    """The text of one vendored file (`users.json`, `policy.md`, `tasks_dev.jsonl`, ...)."""
    return resources.files("domains.airline").joinpath("data").joinpath(name).read_text(encoding="utf-8")


def load_world() -> dict[str, dict[str, Any]]:
    """The full reference world: 500 users, 2,000 reservations, 300 flights (fresh objects)."""
    return {table: json.loads(data_text(f"{table}.json")) for table in TABLES}


def load_tasks() -> list[dict[str, Any]]:
    """The 20 vendored development tasks (`tasks_dev.jsonl`), one dict each."""
    return [json.loads(line) for line in data_text("tasks_dev.jsonl").splitlines() if line.strip()]


def _strings(values: Iterable[Any]) -> set[str]:
    return {v for v in values if isinstance(v, str)}


def _segments(value: Any) -> list[Mapping[str, Any]]:
    """The flight segments of a `flights` argument or record field (objects only)."""
    return [f for f in value if isinstance(f, Mapping)] if isinstance(value, list) else []


def _next_day(day: str) -> str | None:
    """The reference's next day for a one-stop connection: unpadded, May only ("2024-05-6")."""
    try:
        return f"2024-05-{int(day[-2:]) + 1}"
    except ValueError:
        return None


def _trimmed(flight: Mapping[str, Any], keep_dates: set[str]) -> dict[str, Any]:
    """`flight` with only the dates a tool can show or a reservation or action names.

    Searches show a date only when it is available; a one-stop search also reads the second
    leg's entry for the first leg's date when the connection is the next day (a reference quirk),
    so a date whose next day is available stays too."""
    dates = flight.get("dates")
    if not isinstance(dates, Mapping):
        return dict(flight)

    def bookable(day: Any) -> bool:
        entry = dates.get(day)
        return isinstance(entry, Mapping) and entry.get("status") == "available"

    kept = {
        day: entry
        for day, entry in dates.items()
        if day in keep_dates or bookable(day) or (isinstance(day, str) and bookable(_next_day(day)))
    }
    return {**flight, "dates": kept}


def touched_subset(
    world: Mapping[str, Any], customer_id: str, actions: Iterable[Mapping[str, Any]] = ()
) -> dict[str, dict[str, Any]]:
    """The part of `world` a conversation about `customer_id` can touch, deep-copied.

    - users: the customer, every user an action names (`user_id`), and the owner of every
      reservation included (the update tools charge the owner's payment methods);
    - reservations: the customer's, every one an action names (`reservation_id`), and any of
      HATHAT/HATHAU/HATHAV already in the world (so a booking gets the same new id);
    - flights: every flight number the included reservations or the actions' `flights` name, and
      every flight leaving or reaching an airport of the route set: the actions' `origin` and
      `destination` arguments and the endpoints of each reservation update_reservation_flights
      names (the route the agent searches to change it).

    Searches read the whole flights table, but only flights leaving the origin or reaching the
    destination can appear in a direct or one-stop result, so a search between two airports of
    the route set returns exactly what it returns on the full world, and so do the gold actions.
    To keep a row small (the full flights table is 2 MB), a flight keeps only its bookable
    ("available") dates, the day before each (see `_trimmed`) and the dates a reservation or an
    action names for it: searches show nothing else, and book/update read a date's seats and
    prices only when it is available. The
    one difference a non-gold call can see: booking a flight on a date it dropped says "not found
    on date" where the full world says "not available on date". Record order follows the world's.
    """
    users, reservations, flights = world["users"], world["reservations"], world["flights"]
    if customer_id not in users:
        raise ValueError(f"users: no user {customer_id!r} in the world")
    actions = [a for a in actions if isinstance(a, Mapping) and isinstance(a.get("arguments"), Mapping)]
    user_ids = {customer_id}
    reservation_ids = _strings(users[customer_id].get("reservations") or ()) & set(reservations)
    reservation_ids |= set(NEW_RESERVATION_IDS) & set(reservations)
    airports: set[str] = set()
    named_dates: dict[str, set[str]] = {}  # flight number -> dates named for it

    def name_segments(segments: list[Mapping[str, Any]]) -> None:
        for segment in segments:
            if isinstance(segment.get("flight_number"), str):
                dates = named_dates.setdefault(segment["flight_number"], set())
                dates |= _strings((segment.get("date"),))

    for action in actions:
        arguments = action["arguments"]
        if isinstance(arguments.get("user_id"), str) and arguments["user_id"] in users:
            user_ids.add(arguments["user_id"])
        named = arguments.get("reservation_id")
        if isinstance(named, str) and named in reservations:
            reservation_ids.add(named)
            if action.get("name") == "update_reservation_flights":
                airports |= _strings((reservations[named].get("origin"), reservations[named].get("destination")))
        airports |= _strings((arguments.get("origin"), arguments.get("destination")))
        name_segments(_segments(arguments.get("flights")))
    for rid in reservation_ids:
        record = reservations[rid]
        if isinstance(record.get("user_id"), str) and record["user_id"] in users:
            user_ids.add(record["user_id"])
        name_segments(_segments(record.get("flights")))
    subset = {
        "users": {uid: rec for uid, rec in users.items() if uid in user_ids},
        "reservations": {rid: rec for rid, rec in reservations.items() if rid in reservation_ids},
        "flights": {
            number: _trimmed(rec, named_dates.get(number, set()))
            for number, rec in flights.items()
            if number in named_dates or rec.get("origin") in airports or rec.get("destination") in airports
        },
    }
    return copy_json(subset)
