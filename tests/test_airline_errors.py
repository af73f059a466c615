"""Bad calls give the reference's strings, and odd-but-valid calls its quirks.

The expected strings below follow from the reference's code and its `Env.step` (CPython 3.11
wording for call-binding and operation errors), written down by hand, not produced by this
implementation. Each failing check that happens before a change leaves the world unchanged.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from domains.airline.environment import AirlineEnvironment
from domains.airline.world import load_world, touched_subset

MIA = "mia_li_3668"  # certificates 4856383 (100) and 7504069 (250), two credit cards
CHEN = "chen_jackson_3290"  # one gift card (245); reservation 4WQ150, business, 3 passengers
ECONOMY_ON_22 = [{"flight_number": "HAT170", "date": "2024-05-22"}]  # DFW-LAX, economy 147, business full


@pytest.fixture(scope="module")
def start() -> dict[str, Any]:
    world = load_world()
    state = touched_subset(world, MIA, [{"name": "search_direct_flight", "arguments": {"origin": "DFW"}}])
    state["users"][CHEN] = world["users"][CHEN]
    state["reservations"]["4WQ150"] = world["reservations"]["4WQ150"]
    state["flights"]["HAT170"] = world["flights"]["HAT170"]  # every date, cancelled and landed ones too
    return state


@pytest.fixture()
def env(start) -> AirlineEnvironment:
    environment = AirlineEnvironment()
    environment.reset(start)
    return environment


def _booking(**changes: Any) -> dict[str, Any]:
    arguments = {
        "user_id": CHEN,
        "origin": "DFW",
        "destination": "LAX",
        "flight_type": "one_way",
        "cabin": "economy",
        "flights": ECONOMY_ON_22,
        "passengers": [{"first_name": "Chen", "last_name": "Jackson", "dob": "1956-07-07"}],
        "payment_methods": [{"payment_id": "gift_card_3576581", "amount": 147}],
        "total_baggages": 0,
        "nonfree_baggages": 0,
        "insurance": "no",
    }
    return {**arguments, **changes}


UNCHANGING_CALLS = [
    ("get_user_details", {}, "Error: GetUserDetails.invoke() missing 1 required positional argument: 'user_id'"),
    (
        "get_user_details",
        {"user_id": MIA, "x": 1},
        "Error: GetUserDetails.invoke() got an unexpected keyword argument 'x'",
    ),
    ("get_user_details", {"user_id": ["a"]}, "Error: unhashable type: 'list'"),
    ("get_user_details", {"user_id": 5}, "Error: user not found"),
    ("get_reservation_details", {"reservation_id": "NOPE00"}, "Error: user not found"),
    ("cancel_reservation", {"reservation_id": "NOPE00"}, "Error: reservation not found"),
    ("list_all_airports", {"x": 1}, "Error: ListAllAirports.invoke() got an unexpected keyword argument 'x'"),
    (
        "search_direct_flight",
        {"origin": "DFW", "destination": "LAX"},
        "Error: SearchDirectFlight.invoke() missing 1 required positional argument: 'date'",
    ),
    ("search_direct_flight", {"origin": "DFW", "destination": "LAX", "date": ["x"]}, "Error: unhashable type: 'list'"),
    ("search_direct_flight", {"origin": "DFW", "destination": "LAX", "date": 20240522}, "[]"),
    (
        "book_reservation",
        {"user_id": CHEN},
        "Error: BookReservation.invoke() missing 10 required positional arguments: 'origin', 'destination', "
        "'flight_type', 'cabin', 'flights', 'passengers', 'payment_methods', 'total_baggages', "
        "'nonfree_baggages', and 'insurance'",
    ),
    ("book_reservation", _booking(user_id="nobody_here_1"), "Error: user not found"),
    ("book_reservation", _booking(flights="HAT170"), "Error: string indices must be integers, not 'str'"),
    (
        "book_reservation",
        _booking(flights=[{"flight_number": "HAT999", "date": "2024-05-22"}]),
        "Error: flight HAT999 not found",
    ),
    (
        "book_reservation",
        _booking(flights=[{"flight_number": "HAT170", "date": "2024-06-01"}]),
        "Error: flight HAT170 not found on date 2024-06-01",
    ),
    (
        "book_reservation",
        _booking(flights=[{"flight_number": "HAT170", "date": "2024-05-02"}]),
        "Error: flight HAT170 not available on date 2024-05-02",
    ),
    ("book_reservation", _booking(cabin="business"), "Error: not enough seats on flight HAT170"),
    ("book_reservation", _booking(cabin="first"), "Error: 'first'"),
    ("book_reservation", _booking(flights=[{"date": "2024-05-22"}]), "Error: 'flight_number'"),
    ("book_reservation", _booking(passengers=3), "Error: object of type 'int' has no len()"),
    (
        "book_reservation",
        _booking(payment_methods=[{"payment_id": "gift_card_3576581", "amount": 100}]),
        "Error: payment amount does not add up, total price is 147, but paid 100",
    ),
    (
        "book_reservation",
        _booking(payment_methods=[{"payment_id": "gift_card_3576581", "amount": 300}]),
        "Error: not enough balance in payment method gift_card_3576581",
    ),
    (
        "book_reservation",
        _booking(payment_methods=[{"payment_id": "credit_card_1", "amount": 147}]),
        "Error: payment method credit_card_1 not found",
    ),
    (
        "book_reservation",
        _booking(nonfree_baggages="1"),
        "Error: unsupported operand type(s) for +=: 'int' and 'str'",
    ),
    (
        "update_reservation_passengers",
        {"reservation_id": "4WQ150", "passengers": []},
        "Error: number of passengers does not match",
    ),
    (
        "update_reservation_passengers",
        {"reservation_id": "4WQ150", "passengers": 3},
        "Error: object of type 'int' has no len()",
    ),
    (
        "update_reservation_baggages",
        {"reservation_id": "NO6JO3", "total_baggages": 1, "nonfree_baggages": 1, "payment_id": "certificate_4856383"},
        "Error: certificate cannot be used to update reservation",
    ),
    (
        "update_reservation_baggages",
        {"reservation_id": "NO6JO3", "total_baggages": 1, "nonfree_baggages": "2", "payment_id": "credit_card_1955700"},
        "Error: unsupported operand type(s) for -: 'str' and 'int'",
    ),
    (
        "update_reservation_baggages",
        {"reservation_id": "4WQ150", "total_baggages": 9, "nonfree_baggages": 9, "payment_id": "gift_card_3576581"},
        "Error: gift card balance is not enough",
    ),
    (
        "update_reservation_flights",
        {"reservation_id": "HKEG34", "cabin": "business", "flights": [], "payment_id": "credit_card_0"},
        "Error: payment method not found",
    ),
    ("send_certificate", {"user_id": "nobody_here_1", "amount": 50}, "Error: user not found"),
    ("calculate", {"expression": "2 + 2"}, "4.0"),
    ("calculate", {"expression": "(100 - 30) / 3"}, "23.33"),
    ("calculate", {"expression": "1/0"}, "Error: division by zero"),
    ("calculate", {"expression": "2 +"}, "Error: invalid syntax (<string>, line 1)"),
    ("calculate", {"expression": "abs(2)"}, "Error: invalid characters in expression"),
    ("calculate", {"expression": 5}, "Error: 'int' object is not iterable"),
    ("think", {"thought": "the policy says no"}, ""),
    ("transfer_to_human_agents", {"summary": "wants a refund"}, "Transfer successful"),
    ("delete_everything", {}, "Unknown action delete_everything"),
    (None, {}, "Unknown action None"),
    (
        "think",
        ["x"],
        "Error: tau_bench.envs.airline.tools.think.Think.invoke() argument after ** must be a mapping, not list",
    ),
    (
        "think",
        {"thought": "x", "data": {}},
        "Error: tau_bench.envs.airline.tools.think.Think.invoke() got multiple values for keyword argument 'data'",
    ),
    ("think", {1: "x"}, "Error: keywords must be strings"),
]


@pytest.mark.parametrize(("name", "arguments", "expected"), UNCHANGING_CALLS)
def test_a_call_gives_the_reference_string_and_changes_nothing(env, start, name, arguments, expected):
    before = json.dumps(start)
    assert env.call(name, arguments) == expected
    assert json.dumps(env.state) == before


def test_a_booking_takes_the_gift_card_and_leaves_the_flights_alone(env, start):
    result = json.loads(env.call("book_reservation", _booking()))
    assert result["reservation_id"] == "HATHAT" and result["created_at"] == "2024-05-15T15:00:00"
    assert result["flights"] == [
        {"flight_number": "HAT170", "date": "2024-05-22", "price": 147, "origin": "DFW", "destination": "LAX"}
    ]
    assert env.state["users"][CHEN]["payment_methods"]["gift_card_3576581"]["amount"] == 98
    assert env.state["users"][CHEN]["reservations"][-1] == "HATHAT"
    assert env.state["flights"] == start["flights"]  # seats are not taken, as in the reference
    price = start["flights"]["HAT170"]["dates"]["2024-05-23"]["prices"]["basic_economy"]
    cheap = {"payment_methods": [{"payment_id": "gift_card_3576581", "amount": price}], "cabin": "basic_economy"}
    cheaper = [{"flight_number": "HAT170", "date": "2024-05-23"}]
    second = json.loads(env.call("book_reservation", _booking(flights=cheaper, **cheap)))
    assert second["reservation_id"] == "HATHAU"


def test_the_fourth_booking_overwrites_hathav_as_the_reference_does(env):
    seats = {"cabin": "basic_economy", "payment_methods": [{"payment_id": "gift_card_3576581", "amount": 59}]}
    env.state["users"][CHEN]["payment_methods"]["gift_card_3576581"]["amount"] = 1000
    ids = [json.loads(env.call("book_reservation", _booking(**seats)))["reservation_id"] for _ in range(4)]
    assert ids == ["HATHAT", "HATHAU", "HATHAV", "HATHAV"]
    assert env.state["users"][CHEN]["reservations"][-2:] == ["HATHAV", "HATHAV"]


def test_a_certificate_paid_twice_fails_half_way_like_the_reference(env, start):
    """Both checks pass, the first deduction deletes the certificate, the second finds it gone:
    the reference does not roll back, so the certificate is lost and nothing is booked."""
    twice = [{"payment_id": "certificate_4856383", "amount": 73.5}] * 2
    result = env.call("book_reservation", _booking(user_id=MIA, payment_methods=twice))
    assert result == "Error: 'certificate_4856383'"
    assert "certificate_4856383" not in env.state["users"][MIA]["payment_methods"]
    assert env.state["reservations"] == start["reservations"]
    assert env.state["users"][MIA]["reservations"] == start["users"][MIA]["reservations"]


def test_certificates_get_three_ids_then_nothing(env):
    texts = [env.call("send_certificate", {"user_id": MIA, "amount": 100}) for _ in range(4)]
    assert texts[:3] == [
        f"Certificate certificate_{n} added to user {MIA} with amount 100." for n in (3221322, 3221323, 3221324)
    ]
    assert texts[3] == "None"  # the reference returns None here; the environment's result is its str()


def test_cancel_appends_refunds_and_a_status_each_time(env):
    first = json.loads(env.call("cancel_reservation", {"reservation_id": "HKEG34"}))
    assert first["status"] == "cancelled"
    assert first["payment_history"] == [
        {"payment_id": "credit_card_1955700", "amount": 1395},
        {"payment_id": "credit_card_1955700", "amount": -1395},
    ]
    second = json.loads(env.call("cancel_reservation", {"reservation_id": "HKEG34"}))
    assert len(second["payment_history"]) == 4  # no policy check in the tool: the agent must not do this


def test_a_cabin_change_keeps_no_old_price_and_charges_the_difference(env):
    flights = [{"flight_number": "HAT290", "date": "2024-05-27"}]
    same = json.loads(
        env.call(
            "update_reservation_flights",
            {"reservation_id": "HKEG34", "cabin": "business", "flights": flights, "payment_id": "credit_card_1955700"},
        )
    )
    assert same["flights"][0]["price"] == 1395 and len(same["payment_history"]) == 1  # unchanged: no charge
    down = json.loads(
        env.call(
            "update_reservation_flights",
            {"reservation_id": "HKEG34", "cabin": "economy", "flights": flights, "payment_id": "credit_card_1955700"},
        )
    )
    price = env.state["flights"]["HAT290"]["dates"]["2024-05-27"]["prices"]["economy"]
    assert down["cabin"] == "business"  # the reference never writes the new cabin into the record
    assert down["payment_history"][-1] == {"payment_id": "credit_card_1955700", "amount": price - 1395}


def _overnight_world(second_dates: dict[str, Any]) -> dict[str, Any]:
    seats = {"basic_economy": 9, "economy": 9, "business": 9}

    def day(price: int) -> dict[str, Any]:
        return {"status": "available", "available_seats": seats, "prices": dict.fromkeys(seats, price)}

    first = {
        "flight_number": "HAT901",
        "origin": "AAA",
        "destination": "BBB",
        "scheduled_departure_time_est": "22:00:00",
        "scheduled_arrival_time_est": "01:00:00+1",
        "dates": {"2024-05-05": day(10), "2024-05-20": day(10)},
    }
    second = {
        "flight_number": "HAT902",
        "origin": "BBB",
        "destination": "CCC",
        "scheduled_departure_time_est": "09:00:00",
        "scheduled_arrival_time_est": "11:00:00",
        "dates": {date: day(price) for date, price in second_dates.items()},
    }
    return {"users": {}, "reservations": {}, "flights": {"HAT901": first, "HAT902": second}}


def test_onestop_search_keeps_the_reference_quirks():
    env = AirlineEnvironment()
    env.reset(_overnight_world({"2024-05-06": 1, "2024-05-20": 20, "2024-05-21": 21}))
    search = {"origin": "AAA", "destination": "CCC"}
    [[leg1, leg2]] = json.loads(env.call("search_onestop_flight", {**search, "date": "2024-05-20"}))
    assert (leg1["date"], leg1["prices"]["economy"]) == ("2024-05-20", 10)
    # The second leg is labelled with the next day but priced from the first leg's date.
    assert (leg2["date"], leg2["prices"]["economy"]) == ("2024-05-21", 20)
    # The next day of the 5th is built as "2024-05-6", which no flight has.
    assert env.call("search_onestop_flight", {**search, "date": "2024-05-05"}) == "[]"
    env.reset(_overnight_world({"2024-05-21": 21}))
    assert env.call("search_onestop_flight", {**search, "date": "2024-05-20"}) == "Error: '2024-05-20'"


@pytest.mark.parametrize("share", [False, True])
def test_malformed_tables_give_error_strings_not_exceptions(share):
    env = AirlineEnvironment()
    env.reset({"users": [], "reservations": [1], "flights": "x"}, share_unchanged=share)
    assert env.call("cancel_reservation", {"reservation_id": "A"}) == "Error: reservation not found"
    assert env.call("send_certificate", {"user_id": "u", "amount": 1}) == "Error: user not found"
    assert env.call("search_direct_flight", {"origin": "a", "destination": "b", "date": "c"}) == (
        "Error: 'str' object has no attribute 'values'"
    )
