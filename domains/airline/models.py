"""The shape of an airline `initial_state`: the fields the tools dereference, checked up front.

A state that passes never makes a tool fail on its own data (a KeyError on a reservation without
`user_id`, a TypeError on a price that is text); only the agent's arguments can. Records keep
any other fields (`extra="allow"`), and validation returns the caller's tables, not a re-dump,
so key order and values stay exactly as given (tool results are `json.dumps` of records).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

CABINS = ("basic_economy", "economy", "business")
Cabin = Literal["basic_economy", "economy", "business"]
Number = float  # strict: accepts int and float, refuses text and booleans (checked only, never re-dumped)


class _Record(BaseModel):
    # strict: "100" is not a price and true is not a bag count; extra fields pass through untouched.
    model_config = ConfigDict(extra="allow", strict=True)


class PaymentMethod(_Record):
    source: Literal["credit_card", "gift_card", "certificate"]
    amount: Number | None = None
    id: str | None = None

    @model_validator(mode="after")
    def _balance(self) -> PaymentMethod:
        if self.source in ("gift_card", "certificate") and self.amount is None:
            raise ValueError(f"a {self.source} needs an amount (its balance)")
        return self


class User(_Record):
    payment_methods: dict[str, PaymentMethod]
    reservations: list[str]


class Segment(_Record):
    flight_number: str
    date: str
    price: Number
    origin: str
    destination: str


class Payment(_Record):
    payment_id: str
    amount: Number


class Reservation(_Record):
    user_id: str
    origin: str
    destination: str
    cabin: Cabin
    flights: list[Segment]
    passengers: list[dict[str, Any]]
    payment_history: list[Payment]
    total_baggages: int
    nonfree_baggages: int


class FlightDate(_Record):
    status: str
    available_seats: dict[str, int] | None = None
    prices: dict[str, Number] | None = None

    @model_validator(mode="after")
    def _bookable(self) -> FlightDate:
        # book/update read seats and prices of an available date for whichever cabin is asked.
        if self.status == "available":
            for name in ("available_seats", "prices"):
                table = getattr(self, name) or {}
                missing = [cabin for cabin in CABINS if cabin not in table]
                if missing:
                    raise ValueError(f"an available date needs {name} for every cabin; missing {missing}")
        return self


class Flight(_Record):
    origin: str
    destination: str
    scheduled_departure_time_est: str
    scheduled_arrival_time_est: str
    dates: dict[str, FlightDate]


class AirlineState(BaseModel):
    """`initial_state`: users, reservations and flights, each an object of records by id."""

    model_config = ConfigDict(extra="allow", strict=True)
    users: dict[str, User]
    reservations: dict[str, Reservation]
    flights: dict[str, Flight]


_ID_FIELDS = {"reservations": "reservation_id", "flights": "flight_number"}


def _describe(error: Mapping[str, Any]) -> str:
    location = [str(part) for part in error.get("loc", ())]
    if len(location) >= 2:
        table, record, field = location[0], location[1], ".".join(location[2:]) or "(record)"
        return f"{table} record {record!r}, field {field}: {error.get('msg')}"
    return f"{'.'.join(location) or 'initial_state'}: {error.get('msg')}"


def validate_state(initial_state: Any) -> dict[str, Any]:
    """The caller's tables after the checks; ValueError names the table, the record and the rule."""
    if not isinstance(initial_state, Mapping):
        raise ValueError(
            f"initial_state must be an object of tables users, reservations, flights, not {type(initial_state).__name__}"
        )
    state = dict(initial_state)
    try:
        AirlineState.model_validate(state)
    except ValidationError as exc:
        problems = [_describe(e) for e in exc.errors()]
        more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
        raise ValueError("invalid airline initial_state: " + "; ".join(problems[:3]) + more) from None
    for table, field in _ID_FIELDS.items():
        for key, record in state[table].items():
            if field in record and record[field] != key:
                raise ValueError(f"{table} record {key!r}: its {field} is {record[field]!r}, not its key")
    for key, record in state["reservations"].items():
        # the update tools charge the owner's payment methods: the owner must be in the state
        if record["user_id"] not in state["users"]:
            raise ValueError(f"reservations record {key!r}: its user_id {record['user_id']!r} is not in users")
    return state


def state_schema() -> dict[str, Any]:
    """JSON Schema of `initial_state` (what `retrain schema --domain airline` prints)."""
    return AirlineState.model_json_schema()
