"""Retail intents and how a transcript or a list of gold actions maps onto one."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from domains.api import transcript_calls

INTENT_NAMES = (
    "order_status",
    "cancel_order",
    "return_items",
    "exchange_items",
    "modify_order_items",
    "modify_order_address",
    "modify_order_payment",
    "modify_user_address",
    "other",
)
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
    }
)
INTENT_OF_TOOL = {
    "cancel_pending_order": "cancel_order",
    "return_delivered_order_items": "return_items",
    "exchange_delivered_order_items": "exchange_items",
    "modify_pending_order_items": "modify_order_items",
    "modify_pending_order_address": "modify_order_address",
    "modify_pending_order_payment": "modify_order_payment",
    "modify_user_address": "modify_user_address",
    "transfer_to_human_agents": "other",
}


def intent_of(actions: Iterable[Mapping[str, Any]]) -> str:
    """The contract intent of a list of calls: the first that is not a plain read decides.

    >>> intent_of([{"name": "get_order_details", "arguments": {}}, {"name": "cancel_pending_order", "arguments": {}}])
    'cancel_order'
    >>> intent_of([])
    'other'
    """
    names = [str(a.get("name")) for a in actions]
    for name in names:
        if name in INTENT_OF_TOOL:
            return INTENT_OF_TOOL[name]
    return "order_status" if "get_order_details" in names else "other"


def classify_transcript(messages: Sequence[Mapping[str, Any]]) -> str:
    """The intent of a transcript, from its tool calls."""
    return intent_of(transcript_calls(messages))


def known_info_of(instruction: str) -> dict[str, Any]:
    """Facts the customer states in the instruction: name, zip, email, order ids (in order).

    >>> known_info_of("Your name is Mia Jackson and your email is mia.j@example.com. Cancel #W6236251.")
    {'first_name': 'Mia', 'last_name': 'Jackson', 'email': 'mia.j@example.com', 'order_ids': ['#W6236251']}
    """
    info: dict[str, Any] = {}
    if m := re.search(r"[Yy]our name is ([A-Z][\w'-]*) ([A-Z][\w'-]*(?: [A-Z][\w'-]*)*)", instruction):
        info["first_name"], info["last_name"] = m.group(1), m.group(2)
    if m := re.search(r"zip code is (\d{5})", instruction):
        info["zip"] = m.group(1)
    if m := re.search(r"email is ([\w.+-]+@[\w-]+(?:\.[\w-]+)+)", instruction):
        info["email"] = m.group(1)
    order_ids = list(dict.fromkeys(re.findall(r"#W\d+", instruction)))
    if order_ids:
        info["order_ids"] = order_ids
    return info
