"""Reading transcripts and scenarios: the intent of a conversation, the facts of a customer.

Both read untrusted text (model output, scenario files): they use JSON parsing and regular
expressions only, never evaluate anything, and return a fallback instead of raising.
"""

from __future__ import annotations

import bisect
import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from domains.airline.world import data_text
from domains.api import CustomerFacts

# The first write of a conversation decides its intent; update_reservation_flights is split below.
WRITE_INTENTS = {
    "book_reservation": "book_reservation",
    "cancel_reservation": "cancel_reservation",
    "update_reservation_baggages": "change_baggage",
    "update_reservation_passengers": "change_passengers",
    "send_certificate": "send_certificate",
}
SEARCH_TOOLS = ("search_direct_flight", "search_onestop_flight")

USER_ID = re.compile(r"\b[a-z]+_[a-z]+_\d+\b")
RESERVATION_ID = re.compile(r"\b[A-Z0-9]{6}\b")
FLIGHT_NUMBER = re.compile(r"\bHAT\d{3}\b")
_RESERVATION_WORD = re.compile(r"reservation", re.IGNORECASE)
_NEAR = 40  # characters after the word "reservation" in which an all-letter id still counts


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, Mapping):
        return dict(raw)
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw)
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}
    return {}


def tool_calls(messages: Sequence[Mapping[str, Any]]) -> list[tuple[int, str, dict[str, Any]]]:
    """(message index, name, arguments) of every assistant tool call, in call order.

    Takes `{"name", "arguments"}` and OpenAI's `{"function": {"name", "arguments": "<json>"}}`
    (the shapes `domains.api.transcript_calls` reads), keeping where each call was made."""
    calls = []
    for index, message in enumerate(messages if isinstance(messages, Sequence) else ()):
        if not isinstance(message, Mapping) or message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            body = call.get("function") if isinstance(call.get("function"), Mapping) else call
            name = body.get("name")
            if isinstance(name, str):
                calls.append((index, name, _arguments(body.get("arguments"))))
    return calls


def _shown_reservation(messages: Sequence[Mapping[str, Any]], before: int, reservation_id: Any) -> dict | None:
    """The last reservation record a tool result showed for `reservation_id` before message `before`."""
    seen = None
    for message in list(messages)[:before]:
        if not isinstance(message, Mapping) or message.get("role") not in ("tool", "function"):
            continue
        content = message.get("content")
        if not isinstance(content, str) or not content.startswith("{"):
            continue
        try:
            record = json.loads(content)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("reservation_id") == reservation_id:
            seen = record
    return seen


@lru_cache(maxsize=1)
def _reference_reservations() -> dict[str, Any]:
    return json.loads(data_text("reservations.json"))


def _segments(flights: Any) -> list[str]:
    if not isinstance(flights, list):
        return []
    return sorted(f"{f.get('flight_number')}@{f.get('date')}" for f in flights if isinstance(f, Mapping))


def _flight_update_intent(
    messages: Sequence[Mapping[str, Any]], calls: list[tuple[int, str, dict[str, Any]]], position: int
) -> str:
    """change_cabin when the update keeps the reservation's flights and changes its cabin.

    The reservation is the one a tool result showed before the call; else (a gold-actions-only
    transcript, as task import classifies) the vendored reference world's record of that id;
    else a search earlier in the conversation means new flights were sought."""
    index, _, arguments = calls[position]
    rid = arguments.get("reservation_id")
    record = _shown_reservation(messages, index, rid)
    if record is None and isinstance(rid, str):
        record = _reference_reservations().get(rid)
    if isinstance(record, Mapping):
        same_flights = _segments(arguments.get("flights")) == _segments(record.get("flights"))
        return "change_cabin" if same_flights and arguments.get("cabin") != record.get("cabin") else "change_flight"
    searched = any(name in SEARCH_TOOLS for _, name, _ in calls[:position])
    return "change_flight" if searched else "change_cabin"


def classify_intent(messages: Sequence[Mapping[str, Any]]) -> str:
    """The intent of a transcript from its tool calls: the first write decides; else a transfer."""
    calls = tool_calls(messages)
    for position, (_, name, _) in enumerate(calls):
        if name in WRITE_INTENTS:
            return WRITE_INTENTS[name]
        if name == "update_reservation_flights":
            return _flight_update_intent(messages, calls, position)
    if any(name == "transfer_to_human_agents" for _, name, _ in calls):
        return "transfer"
    return "other"


def reservation_ids(text: str) -> list[str]:
    """Reservation ids a text mentions, in order: 6 capitals/digits with a digit, or near "reservation"."""
    anchors = [m.end() for m in _RESERVATION_WORD.finditer(text)]
    found: list[str] = []
    for match in RESERVATION_ID.finditer(text):
        token = match.group()
        before = bisect.bisect_right(anchors, match.start())  # anchors are in increasing order
        near = before > 0 and match.start() - anchors[before - 1] <= _NEAR
        if FLIGHT_NUMBER.fullmatch(token) or token.isdigit() or token in found:
            continue
        if near or any(c.isdigit() for c in token):
            found.append(token)
    return found


def known_info(instruction: Any) -> dict[str, Any]:
    """What a task's customer states in its instruction: user id, reservation ids, flight numbers.

    >>> known_info("Your user id is mia_li_3668. Cancel reservation NO6JO3.")
    {'user_id': 'mia_li_3668', 'reservation_ids': ['NO6JO3']}
    """
    text = instruction if isinstance(instruction, str) else ""
    info: dict[str, Any] = {}
    if match := USER_ID.search(text):
        info["user_id"] = match.group()
    if mentioned := reservation_ids(text):
        info["reservation_ids"] = mentioned
    if flights := list(dict.fromkeys(FLIGHT_NUMBER.findall(text))):
        info["flight_numbers"] = flights
    return info


def _text(value: Any) -> str | None:
    """A detail as the customer would say it: text, a number, or a list of those joined."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str | int | float):
        return str(value)
    if isinstance(value, list) and value and all(isinstance(v, str | int) for v in value):
        return ", ".join(str(v) for v in value)
    return None


def scenario_facts(user_scenario: Any) -> CustomerFacts:
    """What the simulated customer knows: user id, reservation ids, flight numbers, the request.

    `known_info` wins; what it lacks is parsed from the instruction ("Your user id is X",
    "reservation ID SI5UKW"). Odd values are skipped, never an exception."""
    scenario = user_scenario if isinstance(user_scenario, Mapping) else {}
    info = dict(scenario.get("known_info")) if isinstance(scenario.get("known_info"), Mapping) else {}
    instruction = scenario.get("instruction")
    text = instruction if isinstance(instruction, str) else ""
    for key, value in known_info(text).items():
        info.setdefault(key, value)
    identity = {"user_id": info["user_id"]} if isinstance(info.get("user_id"), str) and info["user_id"] else {}
    details = {str(k): t for k, v in info.items() if k not in ("user_id", "confirms") and (t := _text(v)) is not None}
    # The singular forms are what a customer is asked for ("your reservation id?").
    for plural, singular in (("reservation_ids", "reservation_id"), ("flight_numbers", "flight_number")):
        values = info.get(plural)
        if isinstance(values, list) and values and isinstance(values[0], str):
            details.setdefault(singular, values[0])
    confirms = info.get("confirms", scenario.get("confirms", True))
    return CustomerFacts(
        identity=identity, request=text, details=details, confirms=confirms if isinstance(confirms, bool) else True
    )
