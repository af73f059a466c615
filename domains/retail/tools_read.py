"""Read tools of the retail world as pure functions of the state, plus result rendering.

Each function returns either an `Error: ...` string (the reference's exact wording) or the
record itself; the environment renders records as `json.dumps(record)` like the reference, or
in the short "compact" form the curriculum's first level uses. Reads never mutate the state.
"""

from __future__ import annotations

import json
from typing import Any

World = dict[str, dict[str, Any]]
Found = dict[str, Any] | str  # a record, or an Error string


def find_user_id_by_email(state: World, email: str) -> str:
    """First user whose email matches case-insensitively, in world order."""
    wanted = email.lower()
    for user_id, profile in state["users"].items():
        if profile["email"].lower() == wanted:
            return user_id
    return "Error: user not found"


def find_user_id_by_name_zip(state: World, first_name: str, last_name: str, zip: str) -> str:
    """First user with these names (case-insensitive) and exactly this zip code."""
    first, last = first_name.lower(), last_name.lower()
    for user_id, profile in state["users"].items():
        name = profile["name"]
        if (
            str(name.get("first_name", "")).lower() == first
            and str(name.get("last_name", "")).lower() == last
            and profile["address"].get("zip") == zip
        ):
            return user_id
    return "Error: user not found"


def user(state: World, user_id: str) -> Found:
    return state["users"].get(user_id, "Error: user not found")


def order(state: World, order_id: str) -> Found:
    return state["orders"].get(order_id, "Error: order not found")


def product(state: World, product_id: str) -> Found:
    return state["products"].get(product_id, "Error: product not found")


def product_types(state: World) -> dict[str, str]:
    """Product name -> product id, sorted by name (a later product of the same name wins)."""
    by_name = {record["name"]: record["product_id"] for record in state["products"].values()}
    return dict(sorted(by_name.items()))


def _payment_ids(order_record: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for payment in order_record["payment_history"]:
        if payment["payment_method_id"] not in seen:
            seen.append(payment["payment_method_id"])
    return seen


# The arguments through which a tool acts on an order's items or payment methods. A compact order
# shows item ids, prices and payment method ids only to a policy offered such a tool: for any other
# (the first curriculum level: look up, cancel, tell) they are dozens of digits it could only
# confuse with the order id it must copy, in every order it reads.
ID_ARGUMENTS = frozenset({"item_ids", "new_item_ids", "payment_method_id"})


def compact_order(record: dict[str, Any], with_ids: bool = True) -> dict[str, Any]:
    """An order cut to what the curriculum's compact levels need: id, status, items (with their
    ids and prices, and the payment method ids, when `with_ids`; else the items' names only)."""
    short = {"order_id": record.get("order_id"), "status": record["status"]}
    if not with_ids:
        return {**short, "items": [i.get("name") for i in record["items"]]}
    return {
        **short,
        "items": [{"item_id": i["item_id"], "name": i.get("name"), "price": i.get("price")} for i in record["items"]],
        "payment_method_ids": _payment_ids(record),
    }


def compact_user(record: dict[str, Any]) -> dict[str, Any]:
    """A user cut to name, orders and payment method ids (with gift-card balances)."""
    name = record["name"]
    methods = {
        method_id: method.get("balance") if method.get("source") == "gift_card" else method.get("source")
        for method_id, method in record["payment_methods"].items()
    }
    return {
        "name": f"{name.get('first_name', '')} {name.get('last_name', '')}".strip(),
        "orders": list(record["orders"]),
        "payment_methods": methods,
    }


def compact_product(record: dict[str, Any]) -> dict[str, Any]:
    """A product cut to its available variants: item id -> options joined, and price."""
    variants = {
        item_id: {
            "options": "/".join(str(v) for v in variant.get("options", {}).values()),
            "price": variant.get("price"),
        }
        for item_id, variant in record["variants"].items()
        if variant.get("available")
    }
    return {"product_id": record["product_id"], "name": record["name"], "available_variants": variants}


_COMPACT = {"order": compact_order, "user": compact_user, "product": compact_product}


def render(kind: str, found: Found, compact: bool, with_ids: bool = True) -> str:
    """The tool result text for a record (full JSON, or compact) or an Error string as is.
    `with_ids=False` drops the ids no offered tool can act on from a compact order."""
    if isinstance(found, str):
        return found
    if not compact:
        return json.dumps(found)
    return json.dumps(compact_order(found, with_ids) if kind == "order" else _COMPACT[kind](found))
