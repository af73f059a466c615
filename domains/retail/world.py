"""The retail world as plain data: loading it, checking its shape, cutting a task's subset.

A world is `{"users": {id: record}, "orders": {id: record}, "products": {id: record}}` in the
tau-bench retail schema. Interaction records carry only the part of the world a conversation
could touch (`touched_subset`), so the environment must behave identically on a subset and on
the full world; the fidelity tests check exactly that.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from domains.api import copy_json

COLLECTIONS = ("users", "orders", "products")

# Fields the tools read without further checks; a record missing one is refused at reset
# rather than blowing up in the middle of a rollout.
_REQUIRED_FIELDS = {
    "users": {"name": dict, "address": dict, "email": str, "payment_methods": dict, "orders": list},
    "orders": {"user_id": str, "items": list, "status": str, "payment_history": list},
    "products": {"name": str, "product_id": str, "variants": dict},
}


class WorldError(ValueError):
    """A world (or a record in it) that breaks the retail schema, or an unknown id."""

    def __init__(self, collection: str, record_id: str | None, rule: str, detail: str = "") -> None:
        self.collection = collection
        self.record_id = record_id
        self.rule = rule
        self.detail = detail
        where = f"{collection}[{record_id!r}]" if record_id is not None else collection
        super().__init__(f"{where}: {rule}" + (f" ({detail})" if detail else ""))


def load_world(directory: str | Path) -> dict[str, dict[str, Any]]:
    """Read `users.json`, `orders.json` and `products.json` from a folder and check their shape."""
    folder = Path(directory)
    world: dict[str, dict[str, Any]] = {}
    for name in COLLECTIONS:
        path = folder / f"{name}.json"
        if not path.is_file():
            raise WorldError(name, None, "missing_file", str(path))
        world[name] = json.loads(path.read_text(encoding="utf-8"))
    validate_world(world)
    return world


def validate_world(world: Any) -> None:
    """Raise WorldError unless `world` has the three collections and every record the tools need.

    Only the fields the tools dereference are checked (type of each), so the tools can index
    records freely; deeper content rules belong to the data contract. Written with `type()`
    tests because it runs at every reset, over 1,500 records for the full world.
    """
    if not isinstance(world, Mapping):
        raise WorldError("world", None, "not_an_object", type(world).__name__)
    for name in COLLECTIONS:
        records = world.get(name)
        if not isinstance(records, dict):
            raise WorldError(name, None, "missing_collection", type(records).__name__)
        required = tuple(_REQUIRED_FIELDS[name].items())
        for record_id, record in records.items():
            if type(record) is not dict:
                raise WorldError(name, record_id, "record_not_an_object", type(record).__name__)
            for field, kind in required:
                if not isinstance(record.get(field), kind):
                    raise WorldError(name, record_id, "missing_or_mistyped_field", field)
    for order_id, order in world["orders"].items():
        for item in order["items"]:
            if not (
                type(item) is dict
                and type(item.get("item_id")) is str
                and type(item.get("product_id")) is str
                and type(item.get("price")) in _NUMBERS
            ):
                raise WorldError("orders", order_id, "malformed_item", repr(item)[:200])
        for payment in order["payment_history"]:
            if not (
                type(payment) is dict
                and type(payment.get("payment_method_id")) is str
                and type(payment.get("amount")) in _NUMBERS
            ):
                raise WorldError("orders", order_id, "malformed_payment", repr(payment)[:200])
    for user_id, user in world["users"].items():
        for method_id, method in user["payment_methods"].items():
            if type(method) is not dict or type(method.get("source")) is not str:
                raise WorldError("users", user_id, "malformed_payment_method", method_id)
            if method["source"] == "gift_card" and type(method.get("balance")) not in _NUMBERS:
                raise WorldError("users", user_id, "gift_card_without_balance", method_id)
    for product_id, product in world["products"].items():
        for item_id, variant in product["variants"].items():
            if not (
                type(variant) is dict
                and type(variant.get("price")) in _NUMBERS
                and type(variant.get("options")) is dict
            ):
                raise WorldError("products", product_id, "malformed_variant", item_id)


_NUMBERS = frozenset({int, float})  # bool excluded on purpose: True is not a price


def _variant_index(products: Mapping[str, Any]) -> dict[str, str]:
    """item id -> product id, over every variant of every product."""
    return {item_id: product_id for product_id, product in products.items() for item_id in product["variants"]}


def touched_subset(
    world: Mapping[str, Any], user_id: str, actions: Iterable[Mapping[str, Any]] = ()
) -> dict[str, dict[str, Any]]:
    """The part of `world` a conversation about `user_id` can touch, deep-copied.

    That is: the user; every order of the user; every product referenced by those orders'
    items or by a `new_item_ids` entry of the actions. An order an action names that is not
    the user's (a gold mistake, or a household account) is included with its owner, so
    replaying the actions on the subset behaves as on the full world. Record order follows the
    world's, so the subset is deterministic.
    """
    users, orders, products = world["users"], world["orders"], world["products"]
    if user_id not in users:
        raise WorldError("users", user_id, "unknown_user")
    actions = list(actions)
    user_ids = {user_id}
    order_ids = {oid for oid in users[user_id]["orders"] if oid in orders}
    new_items: set[str] = set()
    for action in actions:
        arguments = action.get("arguments") or {}
        named = arguments.get("order_id")
        if isinstance(named, str) and named in orders and named not in order_ids:
            order_ids.add(named)
            user_ids.add(orders[named]["user_id"])
        new_items.update(i for i in arguments.get("new_item_ids") or () if isinstance(i, str))
    product_ids = {item["product_id"] for oid in order_ids for item in orders[oid]["items"] if "product_id" in item}
    if new_items:
        variants = _variant_index(products)
        product_ids.update(variants[i] for i in new_items if i in variants)
    subset = {
        "users": {uid: rec for uid, rec in users.items() if uid in user_ids},
        "orders": {oid: rec for oid, rec in orders.items() if oid in order_ids},
        "products": {pid: rec for pid, rec in products.items() if pid in product_ids},
    }
    return copy_json(subset)
