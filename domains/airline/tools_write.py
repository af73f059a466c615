"""The airline tools that change the world: book, cancel, update, send a certificate.

Shaped like the reference tools (see `tools_read`): each performs the tau-bench reference's checks
and changes in the same order, so its result, its error text and the state it leaves are the same,
including after a call that fails half-way (the reference does not roll back). The tools check
no policy (24-hour rule, insurance, basic economy): the policy is the agent's to follow. Booking
never changes flights (seat counts stay as they are), as in the reference.
"""

from __future__ import annotations

import json
from copy import deepcopy
from typing import Any

from domains.airline.world import NEW_RESERVATION_IDS

BOOKED_AT = "2024-05-15T15:00:00"  # the policy's "now" (2024-05-15 15:00 EST)
CERTIFICATE_IDS = (3221322, 3221323, 3221324)  # the ids send_certificate hands out, in order
INSURANCE_PER_PASSENGER = 30
BAG_PRICE = 50


def _price_segment(data: dict[str, Any], segment: dict[str, Any], cabin: Any, passengers: Any) -> str | None:
    """Fill a new segment's price, origin and destination from the flight table; an error or None.

    `len(passengers)` is taken only where the reference takes it (after the seat lookup), so an
    odd argument fails with the reference's exception, at the reference's moment."""
    number = segment["flight_number"]
    if number not in data["flights"]:
        return f"Error: flight {number} not found"
    flight = data["flights"][number]
    if segment["date"] not in flight["dates"]:
        return f"Error: flight {number} not found on date {segment['date']}"
    on_date = flight["dates"][segment["date"]]
    if on_date["status"] != "available":
        return f"Error: flight {number} not available on date {segment['date']}"
    if on_date["available_seats"][cabin] < len(passengers):
        return f"Error: not enough seats on flight {number}"
    segment["price"] = on_date["prices"][cabin]
    segment["origin"] = flight["origin"]
    segment["destination"] = flight["destination"]
    return None


def _charge_check(method: dict[str, Any], total: Any) -> str | None:
    """The update tools' payment rule: no certificates, and a gift card must cover the total."""
    if method["source"] == "certificate":
        return "Error: certificate cannot be used to update reservation"
    if method["source"] == "gift_card" and method["amount"] < total:
        return "Error: gift card balance is not enough"
    return None


class BookReservation:
    @staticmethod
    def invoke(
        data: dict[str, Any],
        user_id: str,
        origin: str,
        destination: str,
        flight_type: str,
        cabin: str,
        flights: list[dict[str, Any]],
        passengers: list[dict[str, Any]],
        payment_methods: list[dict[str, Any]],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: str,
    ) -> str:
        reservations, users = data["reservations"], data["users"]
        if user_id not in users:
            return "Error: user not found"
        user = users[user_id]
        # The reference looks only two ids ahead: a fourth booking overwrites HATHAV.
        new_id = NEW_RESERVATION_IDS[0]
        if new_id in reservations:
            new_id = NEW_RESERVATION_IDS[1]
            if new_id in reservations:
                new_id = NEW_RESERVATION_IDS[2]
        reservation = {
            "reservation_id": new_id,
            "user_id": user_id,
            "origin": origin,
            "destination": destination,
            "flight_type": flight_type,
            "cabin": cabin,
            "flights": deepcopy(flights),
            "passengers": passengers,
            "payment_history": payment_methods,
            "created_at": BOOKED_AT,
            "total_baggages": total_baggages,
            "nonfree_baggages": nonfree_baggages,
            "insurance": insurance,
        }
        total = 0
        for segment in reservation["flights"]:
            error = _price_segment(data, segment, cabin, passengers)
            if error:
                return error
            total += segment["price"] * len(passengers)
        if insurance == "yes":
            total += INSURANCE_PER_PASSENGER * len(passengers)
        total += BAG_PRICE * nonfree_baggages
        for payment in payment_methods:
            payment_id, amount = payment["payment_id"], payment["amount"]
            if payment_id not in user["payment_methods"]:
                return f"Error: payment method {payment_id} not found"
            method = user["payment_methods"][payment_id]
            if method["source"] in ("gift_card", "certificate") and method["amount"] < amount:
                return f"Error: not enough balance in payment method {payment_id}"
        paid = sum(payment["amount"] for payment in payment_methods)
        if paid != total:
            return f"Error: payment amount does not add up, total price is {total}, but paid {paid}"
        # Checks passed: take the money (a certificate is used up whole) and store the booking.
        for payment in payment_methods:
            payment_id, amount = payment["payment_id"], payment["amount"]
            if user["payment_methods"][payment_id]["source"] == "gift_card":
                user["payment_methods"][payment_id]["amount"] -= amount
            elif user["payment_methods"][payment_id]["source"] == "certificate":
                del user["payment_methods"][payment_id]
        reservations[new_id] = reservation
        user["reservations"].append(new_id)
        return json.dumps(reservation)


class CancelReservation:
    @staticmethod
    def invoke(data: dict[str, Any], reservation_id: str) -> str:
        reservations = data["reservations"]
        if reservation_id not in reservations:
            return "Error: reservation not found"
        reservation = reservations[reservation_id]
        # Every payment is reversed in the history (no balance is restored: refunds take days).
        refunds = [{"payment_id": p["payment_id"], "amount": -p["amount"]} for p in reservation["payment_history"]]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return json.dumps(reservation)


class SendCertificate:
    @staticmethod
    def invoke(data: dict[str, Any], user_id: str, amount: int) -> str | None:
        users = data["users"]
        if user_id not in users:
            return "Error: user not found"
        user = users[user_id]
        for number in CERTIFICATE_IDS:
            payment_id = f"certificate_{number}"
            if payment_id not in user["payment_methods"]:
                user["payment_methods"][payment_id] = {"source": "certificate", "amount": amount, "id": payment_id}
                return f"Certificate {payment_id} added to user {user_id} with amount {amount}."
        return None  # the reference returns nothing once all three ids are taken


class UpdateReservationBaggages:
    @staticmethod
    def invoke(
        data: dict[str, Any], reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> str:
        users, reservations = data["users"], data["reservations"]
        if reservation_id not in reservations:
            return "Error: reservation not found"
        reservation = reservations[reservation_id]
        total = BAG_PRICE * max(0, nonfree_baggages - reservation["nonfree_baggages"])
        if payment_id not in users[reservation["user_id"]]["payment_methods"]:
            return "Error: payment method not found"
        method = users[reservation["user_id"]]["payment_methods"][payment_id]
        error = _charge_check(method, total)
        if error:
            return error
        reservation["total_baggages"] = total_baggages
        reservation["nonfree_baggages"] = nonfree_baggages
        if method["source"] == "gift_card":
            method["amount"] -= total
        if total != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": total})
        return json.dumps(reservation)


class UpdateReservationFlights:
    @staticmethod
    def invoke(
        data: dict[str, Any], reservation_id: str, cabin: str, flights: list[dict[str, Any]], payment_id: str
    ) -> str:
        users, reservations = data["users"], data["reservations"]
        if reservation_id not in reservations:
            return "Error: reservation not found"
        reservation = reservations[reservation_id]
        total = 0
        flights = deepcopy(flights)
        for segment in flights:
            # A segment the reservation already has, in an unchanged cabin, keeps its old price.
            kept = [
                old
                for old in reservation["flights"]
                if old["flight_number"] == segment["flight_number"]
                and old["date"] == segment["date"]
                and cabin == reservation["cabin"]
            ]
            if kept:
                total += kept[0]["price"] * len(reservation["passengers"])
                segment["price"] = kept[0]["price"]
                segment["origin"] = kept[0]["origin"]
                segment["destination"] = kept[0]["destination"]
                continue
            error = _price_segment(data, segment, cabin, reservation["passengers"])
            if error:
                return error
            total += segment["price"] * len(reservation["passengers"])
        total -= sum(old["price"] for old in reservation["flights"]) * len(reservation["passengers"])
        if payment_id not in users[reservation["user_id"]]["payment_methods"]:
            return "Error: payment method not found"
        method = users[reservation["user_id"]]["payment_methods"][payment_id]
        error = _charge_check(method, total)
        if error:
            return error
        if method["source"] == "gift_card":
            method["amount"] -= total  # a negative total (cheaper flights) refunds to the card
        reservation["flights"] = flights
        if total != 0:
            reservation["payment_history"].append({"payment_id": payment_id, "amount": total})
        # Seats are not taken here either: the reference leaves the flight table as it is.
        return json.dumps(reservation)


class UpdateReservationPassengers:
    @staticmethod
    def invoke(data: dict[str, Any], reservation_id: str, passengers: list[dict[str, Any]]) -> str:
        reservations = data["reservations"]
        if reservation_id not in reservations:
            return "Error: reservation not found"
        reservation = reservations[reservation_id]
        if len(passengers) != len(reservation["passengers"]):
            return "Error: number of passengers does not match"
        reservation["passengers"] = passengers
        return json.dumps(reservation)
