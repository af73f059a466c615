"""Drafts of airline scenarios, one builder per intent, each following the policy (policy.md).

A builder picks a record the intent applies to and returns the customer, the gold actions and an
instruction, or None when the drawn record does not fit; `traffic.AirlineTraffic.sample` then
replays the gold on the touched subset and keeps only drafts that replay without error. "Now" is
the policy's: 2024-05-15 15:00 EST.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

NOW = "2024-05-15T15:00:00"
TODAY = NOW[:10]
FLOWN = ("landed", "flying")
CABINS = ("basic_economy", "economy", "business")
# Free checked bags per passenger, by membership and cabin (policy: "Checked bag allowance").
FREE_BAGS = {
    "regular": {"basic_economy": 0, "economy": 1, "business": 2},
    "silver": {"basic_economy": 1, "economy": 2, "business": 3},
    "gold": {"basic_economy": 2, "economy": 3, "business": 3},
}
BAG_PRICE, INSURANCE = 50, 30


@dataclass
class Draft:
    customer_id: str
    actions: list[dict[str, Any]]
    instruction: str
    known: dict[str, Any] = field(default_factory=dict)  # besides user_id: what the customer can say
    outputs: list[str] = field(default_factory=list)


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


def status(world: Mapping[str, Any], segment: Mapping[str, Any]) -> str | None:
    entry = world["flights"].get(segment["flight_number"], {}).get("dates", {}).get(segment["date"])
    return entry.get("status") if isinstance(entry, Mapping) else None


def is_active(reservation: Mapping[str, Any]) -> bool:
    return reservation.get("status") != "cancelled"


def is_upcoming(world: Mapping[str, Any], reservation: Mapping[str, Any]) -> bool:
    """Active, every segment after today and none flown: the whole trip can still change."""
    segments = reservation["flights"]
    return (
        is_active(reservation)
        and bool(segments)
        and all(s["date"] > TODAY and status(world, s) not in FLOWN for s in segments)
    )


def card(user: Mapping[str, Any], amount: float, rng: random.Random) -> str | None:
    """A credit card, or a gift card holding `amount`: what the update tools and policy accept."""
    usable = [
        pid
        for pid, method in user["payment_methods"].items()
        if method["source"] == "credit_card" or (method["source"] == "gift_card" and method["amount"] >= amount)
    ]
    return rng.choice(usable) if usable else None


def _describe(method_id: str, user: Mapping[str, Any]) -> str:
    method = user["payment_methods"][method_id]
    if method["source"] == "credit_card":
        return f"your credit card ending in {method.get('last_four', '')}"
    return f"your gift card {method_id}"


def _seats(world: Mapping[str, Any], segment: Mapping[str, Any], cabin: str, travellers: int) -> float | None:
    """The cabin's price for the segment's flight and date when bookable for `travellers`, else None."""
    entry = world["flights"].get(segment["flight_number"], {}).get("dates", {}).get(segment["date"], {})
    if entry.get("status") != "available" or entry["available_seats"][cabin] < travellers:
        return None
    return entry["prices"][cabin]


def cancel(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    res = world["reservations"][rid]
    if not is_upcoming(world, res):
        return None
    airline_cancelled = any(status(world, s) == "cancelled" for s in res["flights"])
    if res["created_at"] >= "2024-05-14T15:00:00":
        reason = "your plans changed (you booked it less than a day ago)"
    elif airline_cancelled:
        reason = "the airline cancelled one of its flights"
    elif res["cabin"] == "business":
        reason = "your plans changed"
    elif res["insurance"] == "yes":
        reason = "you are unwell and cannot travel (you bought travel insurance)"
    else:
        return None
    text = f"You want to cancel your reservation {rid} from {res['origin']} to {res['destination']} because {reason}."
    return Draft(res["user_id"], [call("cancel_reservation", reservation_id=rid)], text, {"reservation_id": rid})


def refuse_cancel(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    """A cancellation the policy forbids: the agent looks it up and declines (intent "other")."""
    res = world["reservations"][rid]
    if not is_upcoming(world, res) or res["cabin"] == "business" or res["insurance"] == "yes":
        return None
    if res["created_at"] >= "2024-05-14T15:00:00" or any(status(world, s) == "cancelled" for s in res["flights"]):
        return None
    text = (
        f"You want to cancel your reservation {rid} because your plans changed and get a refund. "
        "If the agent explains that it cannot be cancelled, you accept that and end the conversation."
    )
    return Draft(res["user_id"], [call("get_reservation_details", reservation_id=rid)], text, {"reservation_id": rid})


def transfer(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    """Cancelling a trip already partly flown: only a human agent can help (policy: Cancel flight)."""
    res = world["reservations"][rid]
    states = [status(world, s) for s in res["flights"]]
    if not is_active(res) or not any(s in FLOWN for s in states) or all(s in FLOWN for s in states):
        return None
    summary = f"User {res['user_id']} wants to cancel reservation {rid}, whose trip is partly flown."
    actions = [call("get_reservation_details", reservation_id=rid), call("transfer_to_human_agents", summary=summary)]
    text = f"You are on the way back from your trip in reservation {rid} and want to cancel the rest of it."
    return Draft(res["user_id"], actions, text, {"reservation_id": rid})


def bags(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    res = world["reservations"][rid]
    if not is_upcoming(world, res):
        return None
    added = rng.randint(1, 2)
    total = res["total_baggages"] + added
    free = FREE_BAGS[user["membership"]][res["cabin"]] * len(res["passengers"])
    nonfree = max(res["nonfree_baggages"], total - free, 0)
    price = BAG_PRICE * (nonfree - res["nonfree_baggages"])
    payment = card(user, price, rng)
    if payment is None:
        return None
    action = call(
        "update_reservation_baggages",
        reservation_id=rid,
        total_baggages=total,
        nonfree_baggages=nonfree,
        payment_id=payment,
    )
    text = f"You want to add {added} checked bag{'s' * (added > 1)} to reservation {rid}; pay with {_describe(payment, user)}."
    return Draft(res["user_id"], [action], text, {"reservation_id": rid})


def cabin(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    res = world["reservations"][rid]
    if not is_upcoming(world, res):
        return None
    new_cabin = rng.choice([c for c in CABINS if c != res["cabin"]])
    travellers = len(res["passengers"])
    prices = [_seats(world, s, new_cabin, travellers) for s in res["flights"]]
    if None in prices:
        return None
    difference = (sum(prices) - sum(s["price"] for s in res["flights"])) * travellers
    payment = card(user, difference, rng)
    if payment is None:
        return None
    segments = [{"flight_number": s["flight_number"], "date": s["date"]} for s in res["flights"]]
    action = call(
        "update_reservation_flights", reservation_id=rid, cabin=new_cabin, flights=segments, payment_id=payment
    )
    text = (
        f"You want to change the cabin of reservation {rid} to {new_cabin.replace('_', ' ')}, keeping the same "
        f"flights; pay or get refunded with {_describe(payment, user)}."
    )
    return Draft(res["user_id"], [action], text, {"reservation_id": rid})


def _earliest(world: Mapping[str, Any], leg: Mapping[str, Any], day: str, cabin_name: str, travellers: int) -> Any:
    """(departure, number, price) of the earliest direct flight on the leg's route that day, or None."""
    options = [
        (flight["scheduled_departure_time_est"], number, price)
        for number, flight in world["flights"].items()
        if flight["origin"] == leg["origin"] and flight["destination"] == leg["destination"]
        if (price := _seats(world, {"flight_number": number, "date": day}, cabin_name, travellers)) is not None
    ]
    return min(options) if options else None


def move(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    """Move a direct one-way trip, or a direct round trip's return, to the earliest nonstop flight of
    another day, same cabin (policy: not basic economy; same origin, destination and trip type)."""
    res = world["reservations"][rid]
    if not is_upcoming(world, res) or res["cabin"] == "basic_economy":
        return None
    if res["flight_type"] == "one_way" and len(res["flights"]) == 1:
        moved, after = 0, TODAY
    elif res["flight_type"] == "round_trip" and len(res["flights"]) == 2:
        moved, after = 1, res["flights"][0]["date"]  # the return, still after the outbound
    else:
        return None
    old = res["flights"][moved]
    days = [f"2024-05-{d:02d}" for d in range(16, 31) if f"2024-05-{d:02d}" > after]
    rng.shuffle(days)
    travellers = len(res["passengers"])
    for day in (d for d in days if d != old["date"]):
        found = _earliest(world, old, day, res["cabin"], travellers)
        if found is None:
            continue
        _, number, price = found
        payment = card(user, (price - old["price"]) * travellers, rng)
        if payment is None:
            return None
        segments = [{"flight_number": s["flight_number"], "date": s["date"]} for s in res["flights"]]
        segments[moved] = {"flight_number": number, "date": day}
        action = call(
            "update_reservation_flights", reservation_id=rid, cabin=res["cabin"], flights=segments, payment_id=payment
        )
        which = "flight" if moved == 0 else "return flight"
        text = (
            f"You want to move the {which} of reservation {rid} ({old['origin']} to {old['destination']}) to {day}, "
            f"on the earliest nonstop flight that day, same cabin; pay or get refunded with {_describe(payment, user)}."
        )
        return Draft(res["user_id"], [action], text, {"reservation_id": rid})
    return None


def passengers(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    res = world["reservations"][rid]
    if not is_upcoming(world, res):
        return None
    names = {(p.get("first_name"), p.get("last_name")) for p in res["passengers"]}
    spare = [p for p in user["saved_passengers"] if (p["first_name"], p["last_name"]) not in names]
    if not spare:
        return None
    newcomer, index = rng.choice(spare), rng.randrange(len(res["passengers"]))
    people = [dict(p) for p in res["passengers"]]
    leaving = people[index]
    people[index] = {k: newcomer[k] for k in ("first_name", "last_name", "dob")}
    action = call("update_reservation_passengers", reservation_id=rid, passengers=people)
    text = (
        f"In reservation {rid}, {leaving['first_name']} {leaving['last_name']} cannot travel; you want "
        f"{newcomer['first_name']} {newcomer['last_name']} (born {newcomer['dob']}) to fly instead."
    )
    return Draft(res["user_id"], [action], text, {"reservation_id": rid})


def certificate(world: Mapping[str, Any], rid: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    """A complaint about a flight the airline cancelled, from a customer the policy compensates."""
    res = world["reservations"][rid]
    cancelled = [s for s in res["flights"] if status(world, s) == "cancelled"]
    eligible = user["membership"] in ("silver", "gold") or res["insurance"] == "yes" or res["cabin"] == "business"
    if not cancelled or not eligible:
        return None
    amount = 100 * len(res["passengers"])
    segment = cancelled[0]
    text = (
        f"Your flight {segment['flight_number']} on {segment['date']} in reservation {rid} was cancelled by the "
        "airline. You complain about it and ask for compensation."
    )
    action = call("send_certificate", user_id=res["user_id"], amount=amount)
    return Draft(res["user_id"], [action], text, {"reservation_id": rid})


def book(world: Mapping[str, Any], user_id: str, user: Mapping[str, Any], rng: random.Random) -> Draft | None:
    """A one-way direct booking for the customer (and maybe a saved passenger), found by search."""
    number = rng.choice(list(world["flights"]))
    flight = world["flights"][number]
    day = f"2024-05-{rng.randint(16, 30):02d}"
    party = [{k: user["name"][k] for k in ("first_name", "last_name")} | {"dob": user["dob"]}]
    if user["saved_passengers"] and rng.random() < 0.4:
        party.append({k: user["saved_passengers"][0][k] for k in ("first_name", "last_name", "dob")})
    cabin_name = rng.choice(CABINS)
    price = _seats(world, {"flight_number": number, "date": day}, cabin_name, len(party))
    if price is None:
        return None
    insured = rng.random() < 0.3
    total = (price + INSURANCE * insured) * len(party)
    payment = card(user, total, rng)
    if payment is None:
        return None
    free = FREE_BAGS[user["membership"]][cabin_name] * len(party)
    checked = rng.randint(0, free)
    action = call(
        "book_reservation",
        user_id=user_id,
        origin=flight["origin"],
        destination=flight["destination"],
        flight_type="one_way",
        cabin=cabin_name,
        flights=[{"flight_number": number, "date": day}],
        passengers=party,
        payment_methods=[{"payment_id": payment, "amount": total}],
        total_baggages=checked,
        nonfree_baggages=0,
        insurance="yes" if insured else "no",
    )
    others = f" and {party[1]['first_name']} {party[1]['last_name']} (born {party[1]['dob']})" if len(party) > 1 else ""
    text = (
        f"You want to book a one-way {cabin_name.replace('_', ' ')} trip from {flight['origin']} to "
        f"{flight['destination']} on {day}, on the nonstop flight {number}, for yourself{others}. "
        f"You {'want' if insured else 'do not want'} travel insurance and have {checked} checked bags. "
        f"Pay with {_describe(payment, user)}."
    )
    return Draft(user_id, [action], text)


# intent -> (builder, what it is drawn from: a reservation id or a user id)
BUILDERS: dict[str, tuple[Callable[..., Draft | None], str]] = {
    "book_reservation": (book, "users"),
    "change_flight": (move, "reservations"),
    "change_cabin": (cabin, "reservations"),
    "change_baggage": (bags, "reservations"),
    "change_passengers": (passengers, "reservations"),
    "cancel_reservation": (cancel, "reservations"),
    "send_certificate": (certificate, "reservations"),
    "transfer": (transfer, "reservations"),
    "other": (refuse_cancel, "reservations"),
}
