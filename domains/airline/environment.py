"""`AirlineEnvironment`: the airline world behind its tools, dispatched as the reference does.

tau-bench's `Env.step` runs `tool.invoke(data=data, **kwargs)` and turns any exception into
`f"Error: {e}"`, and answers an unknown tool name with `f"Unknown action {name}"` (no "Error:"
prefix). `call` does the same, so wrong types, missing arguments and unknown ids give the
reference's strings; it never raises.

    >>> env = AirlineEnvironment()
    >>> env.reset(initial_state={"users": {}, "reservations": {}, "flights": {}})
    >>> env.call("get_user_details", {"user_id": "sara_doe_496"})
    'Error: user not found'
    >>> env.call("get_user_details", {})
    "Error: GetUserDetails.invoke() missing 1 required positional argument: 'user_id'"
    >>> env.call("rebook", {})
    'Unknown action rebook'
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from domains.airline import tools_read as reads
from domains.airline import tools_write as writes
from domains.airline.world import TABLES
from domains.api import copy_json

TOOLS: dict[str, Any] = {
    "book_reservation": writes.BookReservation,
    "calculate": reads.Calculate,
    "cancel_reservation": writes.CancelReservation,
    "get_reservation_details": reads.GetReservationDetails,
    "get_user_details": reads.GetUserDetails,
    "list_all_airports": reads.ListAllAirports,
    "search_direct_flight": reads.SearchDirectFlight,
    "search_onestop_flight": reads.SearchOnestopFlight,
    "send_certificate": writes.SendCertificate,
    "think": reads.Think,
    "transfer_to_human_agents": reads.TransferToHumanAgents,
    "update_reservation_baggages": writes.UpdateReservationBaggages,
    "update_reservation_flights": writes.UpdateReservationFlights,
    "update_reservation_passengers": writes.UpdateReservationPassengers,
}
# What each write may change, for copy-on-write: the user it names, or the reservation it names
# and that reservation's owner (whose gift card the update tools charge).
_USER_WRITES = frozenset({"book_reservation", "send_certificate"})
_RESERVATION_WRITES = frozenset(
    {"cancel_reservation", "update_reservation_baggages", "update_reservation_flights", "update_reservation_passengers"}
)


def _reference_function(name: str) -> str:
    """How CPython names the reference's `invoke` in call-binding errors that carry the module."""
    return f"tau_bench.envs.airline.tools.{name}.{TOOLS[name].__name__}.invoke()"


def _shallow(table: Any) -> Any:
    """A table's own dict of shared records (copy-on-write); anything else is copied whole."""
    if table is None:
        return {}
    return dict(table) if isinstance(table, Mapping) else copy_json(table)


class AirlineEnvironment:
    """The airline world: `reset` copies a state in, `call` runs one tool, `state` is the live world."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {table: {} for table in TABLES}
        self._owned: set[tuple[str, str]] | None = None

    def reset(self, initial_state: Mapping[str, Any], **options: Any) -> None:
        """Start from a deep copy of `initial_state` (never written through); a missing table is empty.

        `share_unchanged=True` (what `replay` uses) copies a record only when a write first
        touches it, so replaying on the full 5 MB world costs microseconds, not a 0.2 s copy; the
        state then shares unchanged records with `initial_state`, to be read, not mutated.
        Other options are ignored."""
        if not isinstance(initial_state, Mapping):
            raise TypeError(
                f"initial_state must be an object of tables {list(TABLES)}, not {type(initial_state).__name__}"
            )
        names = list(TABLES) + [name for name in initial_state if name not in TABLES]
        if options.get("share_unchanged"):
            self._state = {name: _shallow(initial_state.get(name)) for name in names}
            self._owned = set()
        else:
            self._state = {name: copy_json(initial_state.get(name) or {}) for name in names}
            self._owned = None

    @property
    def state(self) -> dict[str, Any]:
        """The live world: {"users", "reservations", "flights"}."""
        return self._state

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run tool `name` with `arguments`; the result string, errors included. Never raises."""
        tool = TOOLS.get(name) if isinstance(name, str) else None
        if tool is None:
            return f"Unknown action {name}"
        # CPython checks the ** mapping before binding, and names the function with its module.
        if not isinstance(arguments, Mapping):
            return f"Error: {_reference_function(name)} argument after ** must be a mapping, not {type(arguments).__name__}"
        if "data" in arguments:
            return f"Error: {_reference_function(name)} got multiple values for keyword argument 'data'"
        try:
            # The reference stores argument objects in the world (a booking's passengers); a copy
            # keeps the caller's objects out of ours.
            kwargs = copy.deepcopy(dict(arguments))
        except Exception as exc:  # not JSON-like data; reported as the reference reports failures
            return f"Error: {exc}"
        if self._owned is not None:
            self._claim(name, kwargs)
        try:
            result = tool.invoke(data=self._state, **kwargs)
        except Exception as exc:  # exactly the reference's Env.step: any exception becomes its text
            return f"Error: {exc}"
        # send_certificate returns None once a user holds all three certificate ids; str() of it.
        return result if isinstance(result, str) else str(result)

    def _claim(self, name: str, kwargs: Mapping[str, Any]) -> None:
        """Copy-on-write: give this environment its own copy of every record the call may change."""
        targets: list[tuple[str, Any]] = []
        if name in _USER_WRITES:
            targets.append(("users", kwargs.get("user_id")))
        elif name in _RESERVATION_WRITES:
            rid = kwargs.get("reservation_id")
            targets.append(("reservations", rid))
            table = self._state.get("reservations")
            record = table.get(rid) if isinstance(rid, str) and isinstance(table, dict) else None
            if isinstance(record, Mapping):
                targets.append(("users", record.get("user_id")))
        for table, key in targets:
            records = self._state.get(table)
            if (
                isinstance(key, str)
                and isinstance(records, dict)
                and (table, key) not in self._owned
                and key in records
            ):
                records[key] = copy_json(records[key])
                self._owned.add((table, key))
