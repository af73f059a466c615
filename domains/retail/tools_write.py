"""Write tools of the retail world as pure functions that mutate the given state in place.

The semantics, the order of the checks and the error strings follow the tau-bench retail
reference exactly, because the reference tasks' expected records (refund entries, unrounded
price differences, sorted item lists, gift-card balances) depend on them. Every check runs
before the first mutation, so an `Error:` result never leaves a partial change. Where the
reference would crash on a malformed or partial world (a missing product or payment method)
these return an Error instead, still before mutating.

Each function returns the changed record (the environment renders it) or an Error string.
"""

from __future__ import annotations

from typing import Any

World = dict[str, dict[str, Any]]
Changed = dict[str, Any] | str

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


def _pending_order(state: World, order_id: str, verb: str) -> Changed:
    record = state["orders"].get(order_id)
    if record is None:
        return "Error: order not found"
    if record["status"] != "pending":
        return f"Error: non-pending order cannot be {verb}"
    return record


def _delivered_order(state: World, order_id: str, verb: str) -> Changed:
    record = state["orders"].get(order_id)
    if record is None:
        return "Error: order not found"
    if record["status"] != "delivered":
        return f"Error: non-delivered order cannot be {verb}"
    return record


def _methods(state: World, record: dict[str, Any]) -> dict[str, Any] | None:
    owner = state["users"].get(record["user_id"])
    return None if owner is None else owner["payment_methods"]


def _address(address1: str, address2: str, city: str, state: str, country: str, zip: str) -> dict[str, str]:
    return {"address1": address1, "address2": address2, "city": city, "state": state, "country": country, "zip": zip}


def _credit(method: dict[str, Any], amount: float) -> None:
    method["balance"] = round(method["balance"] + amount, 2)


def cancel_pending_order(state: World, order_id: str, reason: str) -> Changed:
    record = _pending_order(state, order_id, "cancelled")
    if isinstance(record, str):
        return record
    if reason not in CANCEL_REASONS:
        return "Error: invalid reason"
    methods = _methods(state, record)
    gift_cards = [p["payment_method_id"] for p in record["payment_history"] if "gift_card" in p["payment_method_id"]]
    if gift_cards and (methods is None or any(g not in methods for g in gift_cards)):
        return "Error: payment method not found"
    refunds = []
    for payment in record["payment_history"]:
        method_id = payment["payment_method_id"]
        refunds.append({"transaction_type": "refund", "amount": payment["amount"], "payment_method_id": method_id})
        if "gift_card" in method_id:  # gift cards are refunded at once, other methods in days
            _credit(methods[method_id], payment["amount"])
    record["status"] = "cancelled"
    record["cancel_reason"] = reason
    record["payment_history"].extend(refunds)
    return record


def modify_pending_order_address(
    state: World, order_id: str, address1: str, address2: str, city: str, state_: str, country: str, zip: str
) -> Changed:
    record = _pending_order(state, order_id, "modified")
    if isinstance(record, str):
        return record
    record["address"] = _address(address1, address2, city, state_, country, zip)
    return record


def modify_user_address(
    state: World, user_id: str, address1: str, address2: str, city: str, state_: str, country: str, zip: str
) -> Changed:
    record = state["users"].get(user_id)
    if record is None:
        return "Error: user not found"
    record["address"] = _address(address1, address2, city, state_, country, zip)
    return record


def _missing_item(record: dict[str, Any], item_ids: list[str]) -> str | None:
    """The first requested item id the order holds fewer copies of than requested."""
    held = [item["item_id"] for item in record["items"]]
    for item_id in item_ids:
        if item_ids.count(item_id) > held.count(item_id):
            return item_id
    return None


def _price_difference(
    state: World, record: dict[str, Any], item_ids: list[str], new_item_ids: list[str]
) -> float | str:
    """Sum of new minus old prices, accumulated in the reference's order (it is not rounded)."""
    difference: float = 0
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        item = next(i for i in record["items"] if i["item_id"] == item_id)
        variant = state["products"].get(item.get("product_id"), {}).get("variants", {}).get(new_item_id)
        if not (variant and variant.get("available")):
            return f"Error: new item {new_item_id} not found or available"
        difference += variant["price"] - item["price"]
    return difference


def _item_checks(state: World, record: dict[str, Any], item_ids: list[str], new_item_ids: list[str]) -> float | str:
    missing = _missing_item(record, item_ids)
    if missing is not None:
        return f"Error: {missing} not found"
    if len(item_ids) != len(new_item_ids):
        return "Error: the number of items to be exchanged should match"
    return _price_difference(state, record, item_ids, new_item_ids)


def _swap_checks(
    state: World, record: dict[str, Any] | str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> tuple[float, dict[str, Any]] | str:
    """(price difference, payment method) of swapping `item_ids` for `new_item_ids` on `record`, or
    the first error in the order the reference checks them: the order (`record` is then its error
    text), the items, the payment method. Modifying a pending order and exchanging a delivered one
    check alike; only what each then charges differs."""
    if isinstance(record, str):
        return record
    difference = _item_checks(state, record, item_ids, new_item_ids)
    if isinstance(difference, str):
        return difference
    methods = _methods(state, record)
    if methods is None or payment_method_id not in methods:
        return "Error: payment method not found"
    return difference, methods[payment_method_id]


def modify_pending_order_items(
    state: World, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> Changed:
    record = _pending_order(state, order_id, "modified")
    checked = _swap_checks(state, record, item_ids, new_item_ids, payment_method_id)
    if isinstance(checked, str):
        return checked
    difference, method = checked
    if method["source"] == "gift_card" and method["balance"] < difference:
        return "Error: insufficient gift card balance to pay for the new item"
    record["payment_history"].append(
        {
            "transaction_type": "payment" if difference > 0 else "refund",
            "amount": abs(difference),
            "payment_method_id": payment_method_id,
        }
    )
    if method["source"] == "gift_card":
        _credit(method, -difference)
    for item_id, new_item_id in zip(item_ids, new_item_ids):
        # the first item still carrying the old id: duplicates are replaced one by one
        item = next(i for i in record["items"] if i["item_id"] == item_id)
        variant = state["products"][item["product_id"]]["variants"][new_item_id]
        item["item_id"] = new_item_id
        item["price"] = variant["price"]
        item["options"] = dict(variant["options"])  # a copy: the reference aliases the product's dict
    record["status"] = "pending (item modified)"
    return record


def modify_pending_order_payment(state: World, order_id: str, payment_method_id: str) -> Changed:
    record = _pending_order(state, order_id, "modified")
    if isinstance(record, str):
        return record
    methods = _methods(state, record)
    if methods is None or payment_method_id not in methods:
        return "Error: payment method not found"
    history = record["payment_history"]
    if len(history) != 1 or history[0].get("transaction_type") != "payment":
        return "Error: there should be exactly one payment for a pending order"
    old_id = history[0]["payment_method_id"]
    if old_id == payment_method_id:
        return "Error: the new payment method should be different from the current one"
    amount = history[0]["amount"]
    method = methods[payment_method_id]
    if method["source"] == "gift_card" and method["balance"] < amount:
        return "Error: insufficient gift card balance to pay for the order"
    if "gift_card" in old_id and old_id not in methods:
        return "Error: payment method not found"
    history.extend(
        [
            {"transaction_type": "payment", "amount": amount, "payment_method_id": payment_method_id},
            {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
        ]
    )
    if method["source"] == "gift_card":
        _credit(method, -amount)
    if "gift_card" in old_id:
        _credit(methods[old_id], amount)
    return record


def return_delivered_order_items(state: World, order_id: str, item_ids: list[str], payment_method_id: str) -> Changed:
    record = _delivered_order(state, order_id, "returned")
    if isinstance(record, str):
        return record
    methods = _methods(state, record)
    if methods is None or payment_method_id not in methods:
        return "Error: payment method not found"
    history = record["payment_history"]
    original = history[0]["payment_method_id"] if history else None
    if "gift_card" not in payment_method_id and payment_method_id != original:
        return "Error: payment method should be either the original payment method or a gift card"
    if _missing_item(record, item_ids) is not None:
        return "Error: some item not found"
    record["status"] = "return requested"
    record["return_items"] = sorted(item_ids)
    record["return_payment_method_id"] = payment_method_id
    return record


def exchange_delivered_order_items(
    state: World, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
) -> Changed:
    record = _delivered_order(state, order_id, "exchanged")
    checked = _swap_checks(state, record, item_ids, new_item_ids, payment_method_id)
    if isinstance(checked, str):
        return checked
    difference, method = round(checked[0], 2), checked[1]
    if method["source"] == "gift_card" and method["balance"] < difference:
        return "Error: insufficient gift card balance to pay for the price difference"
    record["status"] = "exchange requested"
    record["exchange_items"] = sorted(item_ids)
    record["exchange_new_items"] = sorted(new_item_ids)
    record["exchange_payment_method_id"] = payment_method_id
    record["exchange_price_difference"] = difference
    return record
