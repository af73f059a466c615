"""The airline tools as the agent sees them: OpenAI function schemas, kinds and records.

The schemas are the reference's `get_info()` (tau-bench 59a200c) word for word, quirks included
(search_onestop_flight's description says "direct"): the agent is trained and evaluated on the
same tool descriptions the benchmark serves. Order follows the reference's ALL_TOOLS.
"""

from __future__ import annotations

import copy
from typing import Any

from domains.api import RecordRef, ToolKind, ToolSpec

_PAYMENT_ID = (
    "The payment id stored in user profile, such as 'credit_card_7815826', 'gift_card_7815826', 'certificate_7815826'."
)
_RESERVATION_ID = {"type": "string", "description": "The reservation ID, such as 'ZFA04Y'."}
_CABIN = {"type": "string", "enum": ["basic_economy", "economy", "business"]}
_DATE = "The date for the flight in the format 'YYYY-MM-DD', such as '2024-05-01'."
_SEGMENT = {
    "type": "object",
    "properties": {
        "flight_number": {"type": "string", "description": "Flight number, such as 'HAT001'."},
        "date": {"type": "string", "description": _DATE},
    },
    "required": ["flight_number", "date"],
}
_PASSENGERS = {
    "type": "array",
    "description": "An array of objects containing details about each passenger.",
    "items": {
        "type": "object",
        "properties": {
            "first_name": {"type": "string", "description": "The first name of the passenger, such as 'Noah'."},
            "last_name": {"type": "string", "description": "The last name of the passenger, such as 'Brown'."},
            "dob": {
                "type": "string",
                "description": "The date of birth of the passenger in the format 'YYYY-MM-DD', such as '1990-01-01'.",
            },
        },
        "required": ["first_name", "last_name", "dob"],
    },
}


def _search(date_example: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "origin": {"type": "string", "description": "The origin city airport in three letters, such as 'JFK'."},
            "destination": {
                "type": "string",
                "description": "The destination city airport in three letters, such as 'LAX'.",
            },
            "date": {
                "type": "string",
                "description": f"The date of the flight in the format 'YYYY-MM-DD', such as '{date_example}'.",
            },
        },
        "required": ["origin", "destination", "date"],
    }


def _schema(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    # A copy per tool: the shared pieces (cabin, segment, passengers) must not alias across schemas.
    parameters = copy.deepcopy(parameters)
    return {"type": "function", "function": {"name": name, "description": description, "parameters": parameters}}


_BOOK = {
    "type": "object",
    "properties": {
        "user_id": {
            "type": "string",
            "description": "The ID of the user to book the reservation, such as 'sara_doe_496'.",
        },
        "origin": {"type": "string", "description": "The IATA code for the origin city, such as 'SFO'."},
        "destination": {"type": "string", "description": "The IATA code for the destination city, such as 'JFK'."},
        "flight_type": {"type": "string", "enum": ["one_way", "round_trip"]},
        "cabin": _CABIN,
        "flights": {
            "type": "array",
            "description": "An array of objects containing details about each piece of flight.",
            "items": _SEGMENT,
        },
        "passengers": _PASSENGERS,
        "payment_methods": {
            "type": "array",
            "description": "An array of objects containing details about each payment method.",
            "items": {
                "type": "object",
                "properties": {
                    "payment_id": {"type": "string", "description": _PAYMENT_ID},
                    "amount": {"type": "number", "description": "The amount to be paid."},
                },
                "required": ["payment_id", "amount"],
            },
        },
        "total_baggages": {
            "type": "integer",
            "description": "The total number of baggage items included in the reservation.",
        },
        "nonfree_baggages": {
            "type": "integer",
            "description": "The number of non-free baggage items included in the reservation.",
        },
        "insurance": {"type": "string", "enum": ["yes", "no"]},
    },
    "required": [
        "user_id",
        "origin",
        "destination",
        "flight_type",
        "cabin",
        "flights",
        "passengers",
        "payment_methods",
        "total_baggages",
        "nonfree_baggages",
        "insurance",
    ],
}

_FLIGHTS_UPDATE = {
    "type": "object",
    "properties": {
        "reservation_id": _RESERVATION_ID,
        "cabin": _CABIN,
        "flights": {
            "type": "array",
            "description": "An array of objects containing details about each piece of flight in the ENTIRE new reservation. Even if the a flight segment is not changed, it should still be included in the array.",
            "items": _SEGMENT,
        },
        "payment_id": {"type": "string", "description": _PAYMENT_ID},
    },
    "required": ["reservation_id", "cabin", "flights", "payment_id"],
}

_BAGGAGES_UPDATE = {
    "type": "object",
    "properties": {
        "reservation_id": _RESERVATION_ID,
        "total_baggages": {
            "type": "integer",
            "description": "The updated total number of baggage items included in the reservation.",
        },
        "nonfree_baggages": {
            "type": "integer",
            "description": "The updated number of non-free baggage items included in the reservation.",
        },
        "payment_id": {"type": "string", "description": _PAYMENT_ID},
    },
    "required": ["reservation_id", "total_baggages", "nonfree_baggages", "payment_id"],
}


def _one(name: str, description: str) -> dict[str, Any]:
    """Parameters of a tool with one required string argument."""
    return {
        "type": "object",
        "properties": {name: {"type": "string", "description": description}},
        "required": [name],
    }


_USERS = RecordRef("user_id", "users")
_RESERVATIONS = RecordRef("reservation_id", "reservations")

TOOL_SPECS: tuple[ToolSpec, ...] = (
    ToolSpec(_schema("book_reservation", "Book a reservation.", _BOOK), ToolKind.WRITE, _USERS),
    ToolSpec(
        _schema(
            "calculate",
            "Calculate the result of a mathematical expression.",
            _one(
                "expression",
                "The mathematical expression to calculate, such as '2 + 2'. The expression can contain numbers, operators (+, -, *, /), parentheses, and spaces.",
            ),
        ),
        ToolKind.THINK,
    ),
    ToolSpec(
        _schema(
            "cancel_reservation",
            "Cancel the whole reservation.",
            _one("reservation_id", "The reservation ID, such as 'ZFA04Y'."),
        ),
        ToolKind.WRITE,
        _RESERVATIONS,
    ),
    ToolSpec(
        _schema(
            "get_reservation_details",
            "Get the details of a reservation.",
            _one("reservation_id", "The reservation id, such as '8JX2WO'."),
        ),
        ToolKind.READ,
        _RESERVATIONS,
    ),
    ToolSpec(
        _schema(
            "get_user_details", "Get the details of an user.", _one("user_id", "The user id, such as 'sara_doe_496'.")
        ),
        ToolKind.READ,
        _USERS,
    ),
    ToolSpec(
        _schema(
            "list_all_airports",
            "List all airports and their cities.",
            {"type": "object", "properties": {}, "required": []},
        ),
        ToolKind.READ,
    ),
    ToolSpec(
        _schema(
            "search_direct_flight",
            "Search direct flights between two cities on a specific date.",
            _search("2024-01-01"),
        ),
        ToolKind.READ,
    ),
    ToolSpec(
        _schema(
            "search_onestop_flight",
            "Search direct flights between two cities on a specific date.",
            _search("2024-05-01"),
        ),
        ToolKind.READ,
    ),
    ToolSpec(
        _schema(
            "send_certificate",
            "Send a certificate to a user. Be careful!",
            {
                "type": "object",
                "properties": {
                    "user_id": {
                        "type": "string",
                        "description": "The ID of the user to book the reservation, such as 'sara_doe_496'.",
                    },
                    "amount": {"type": "number", "description": "Certificate amount to send."},
                },
                "required": ["user_id", "amount"],
            },
        ),
        ToolKind.WRITE,
        _USERS,
    ),
    ToolSpec(
        _schema(
            "think",
            "Use the tool to think about something. It will not obtain new information or change the database, but just append the thought to the log. Use it when complex reasoning is needed.",
            _one("thought", "A thought to think about."),
        ),
        ToolKind.THINK,
    ),
    ToolSpec(
        _schema(
            "transfer_to_human_agents",
            "Transfer the user to a human agent, with a summary of the user's issue. Only transfer if the user explicitly asks for a human agent, or if the user's issue cannot be resolved by the agent with the available tools.",
            _one("summary", "A summary of the user's issue."),
        ),
        ToolKind.HAND_OVER,
    ),
    ToolSpec(
        _schema("update_reservation_baggages", "Update the baggage information of a reservation.", _BAGGAGES_UPDATE),
        ToolKind.WRITE,
        _RESERVATIONS,
    ),
    ToolSpec(
        _schema("update_reservation_flights", "Update the flight information of a reservation.", _FLIGHTS_UPDATE),
        ToolKind.WRITE,
        _RESERVATIONS,
    ),
    ToolSpec(
        _schema(
            "update_reservation_passengers",
            "Update the passenger information of a reservation.",
            {
                "type": "object",
                "properties": {"reservation_id": _RESERVATION_ID, "passengers": _PASSENGERS},
                "required": ["reservation_id", "passengers"],
            },
        ),
        ToolKind.WRITE,
        _RESERVATIONS,
    ),
)
