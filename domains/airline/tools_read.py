"""The airline tools that change nothing: lookups, searches, think, calculate, hand-over.

Each tool is a class with a static `invoke(data, ...)` named and shaped like the tau-bench
reference tool (sierra-research/tau-bench, tau_bench/envs/airline/tools, commit 59a200c): the
environment calls `Tool.invoke(data=state, **arguments)`, so a missing or unexpected argument
raises the same TypeError text as the reference (`GetUserDetails.invoke() missing 1 required
positional argument: 'user_id'`). The bodies perform the reference's steps in the reference's
order, so results, error texts and the exceptions odd argument types raise are the same too.
"""

from __future__ import annotations

import json
from typing import Any

from domains.airline.arithmetic import calculate

AIRPORTS = {
    "SFO": "San Francisco",
    "JFK": "New York",
    "LAX": "Los Angeles",
    "ORD": "Chicago",
    "DFW": "Dallas",
    "DEN": "Denver",
    "SEA": "Seattle",
    "ATL": "Atlanta",
    "MIA": "Miami",
    "BOS": "Boston",
    "PHX": "Phoenix",
    "IAH": "Houston",
    "LAS": "Las Vegas",
    "MCO": "Orlando",
    "EWR": "Newark",
    "CLT": "Charlotte",
    "MSP": "Minneapolis",
    "DTW": "Detroit",
    "PHL": "Philadelphia",
    "LGA": "LaGuardia",
}


def _flight_on(flight: dict[str, Any], date: Any) -> dict[str, Any]:
    """A search row: the flight without its `dates`, merged with that date's entry."""
    row = {key: value for key, value in flight.items() if key != "dates"}
    row.update(flight["dates"][date])
    return row


class GetUserDetails:
    @staticmethod
    def invoke(data: dict[str, Any], user_id: str) -> str:
        users = data["users"]
        if user_id in users:
            return json.dumps(users[user_id])
        return "Error: user not found"


class GetReservationDetails:
    @staticmethod
    def invoke(data: dict[str, Any], reservation_id: str) -> str:
        reservations = data["reservations"]
        if reservation_id in reservations:
            return json.dumps(reservations[reservation_id])
        return "Error: user not found"  # sic: the reference says "user", not "reservation"


class ListAllAirports:
    @staticmethod
    def invoke(data: dict[str, Any]) -> str:
        return json.dumps(AIRPORTS)


class SearchDirectFlight:
    @staticmethod
    def invoke(data: dict[str, Any], origin: str, destination: str, date: str) -> str:
        found = []
        for flight in data["flights"].values():
            if flight["origin"] != origin or flight["destination"] != destination:
                continue
            if date in flight["dates"] and flight["dates"][date]["status"] == "available":
                found.append(_flight_on(flight, date))
        return json.dumps(found)


class SearchOnestopFlight:
    @staticmethod
    def invoke(data: dict[str, Any], origin: str, destination: str, date: str) -> str:
        flights = data["flights"]
        pairs = []
        for first in flights.values():
            if first["origin"] != origin:
                continue
            for second in flights.values():
                if not (second["destination"] == destination and first["destination"] == second["origin"]):
                    continue
                # An overnight first leg ("+1" arrival) connects the next day. The reference builds
                # that date without zero padding ("2024-05-6") and never checks the month's end.
                if "+1" in first["scheduled_arrival_time_est"]:
                    second_date = f"2024-05-{int(date[-2:]) + 1}"
                else:
                    second_date = date
                if first["scheduled_arrival_time_est"] > second["scheduled_departure_time_est"]:
                    continue
                if date not in first["dates"] or second_date not in second["dates"]:
                    continue
                if first["dates"][date]["status"] != "available":
                    continue
                if second["dates"][second_date]["status"] != "available":
                    continue
                leg1 = _flight_on(first, date)
                leg1["date"] = date
                # The reference fills the second leg from the *first* leg's date entry (KeyError
                # when that date is missing), labelled with the second leg's date: kept as is.
                leg2 = _flight_on(second, date)
                leg2["date"] = second_date
                pairs.append([leg1, leg2])
        return json.dumps(pairs)


class Calculate:
    @staticmethod
    def invoke(data: dict[str, Any], expression: str) -> str:
        return calculate(expression)


class Think:
    @staticmethod
    def invoke(data: dict[str, Any], thought: str) -> str:
        return ""


class TransferToHumanAgents:
    @staticmethod
    def invoke(data: dict[str, Any], summary: str) -> str:
        return "Transfer successful"
