"""A tiny hand-made retail world whose numbers are easy to check by hand, and small helpers."""

from __future__ import annotations

import copy
from typing import Any


def _item(item_id: str, product_id: str, name: str, price: float, **options: str) -> dict[str, Any]:
    return {"name": name, "product_id": product_id, "item_id": item_id, "price": price, "options": options}


def _order(order_id: str, user_id: str, status: str, items: list[dict[str, Any]], method: str) -> dict[str, Any]:
    total = round(sum(i["price"] for i in items), 2)
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": {
            "address1": "1 Old Road",
            "address2": "",
            "city": "Springfield",
            "country": "USA",
            "state": "IL",
            "zip": "62701",
        },
        "items": items,
        "fulfillments": [],
        "status": status,
        "payment_history": [{"transaction_type": "payment", "amount": total, "payment_method_id": method}],
    }


def tiny_world() -> dict[str, Any]:
    """Two users, two products, five orders (pending, delivered, processed) with known prices."""
    shirt_red = _item("I1", "P1", "T-Shirt", 20.0, color="red")
    mug_small = _item("M1", "P2", "Mug", 10.0, size="small")
    mug_large = _item("M2", "P2", "Mug", 12.0, size="large")
    shirt_blue = _item("I2", "P1", "T-Shirt", 25.5, color="blue")
    users = {
        "ann_lee_1": {
            "name": {"first_name": "Ann", "last_name": "Lee"},
            "address": {
                "address1": "1 Old Road",
                "address2": "",
                "city": "Springfield",
                "country": "USA",
                "state": "IL",
                "zip": "10001",
            },
            "email": "Ann.Lee@example.com",
            "payment_methods": {
                "credit_card_1": {"source": "credit_card", "brand": "visa", "last_four": "1111", "id": "credit_card_1"},
                "gift_card_1": {"source": "gift_card", "balance": 50.0, "id": "gift_card_1"},
                "paypal_1": {"source": "paypal", "id": "paypal_1"},
            },
            "orders": ["#W1", "#W2", "#W3", "#W5"],
        },
        "bob_kim_2": {
            "name": {"first_name": "Bob", "last_name": "Kim"},
            "address": {
                "address1": "2 New Street",
                "address2": "Apt 3",
                "city": "Austin",
                "country": "USA",
                "state": "TX",
                "zip": "20002",
            },
            "email": "bob@example.com",
            "payment_methods": {"paypal_2": {"source": "paypal", "id": "paypal_2"}},
            "orders": ["#W4"],
        },
    }
    products = {
        "P1": {
            "name": "T-Shirt",
            "product_id": "P1",
            "variants": {
                "I1": {"item_id": "I1", "options": {"color": "red"}, "available": True, "price": 20.0},
                "I2": {"item_id": "I2", "options": {"color": "blue"}, "available": True, "price": 25.5},
                "I3": {"item_id": "I3", "options": {"color": "green"}, "available": False, "price": 18.0},
                "I4": {"item_id": "I4", "options": {"color": "gold"}, "available": True, "price": 100.0},
            },
        },
        "P2": {
            "name": "Mug",
            "product_id": "P2",
            "variants": {
                "M1": {"item_id": "M1", "options": {"size": "small"}, "available": True, "price": 10.0},
                "M2": {"item_id": "M2", "options": {"size": "large"}, "available": True, "price": 12.0},
            },
        },
    }
    orders = {
        "#W1": _order(
            "#W1", "ann_lee_1", "pending", [copy.deepcopy(shirt_red), copy.deepcopy(mug_small)], "gift_card_1"
        ),
        "#W2": _order(
            "#W2",
            "ann_lee_1",
            "delivered",
            [copy.deepcopy(shirt_red), copy.deepcopy(shirt_red), copy.deepcopy(mug_large)],
            "credit_card_1",
        ),
        "#W3": _order("#W3", "ann_lee_1", "processed", [copy.deepcopy(mug_small)], "paypal_1"),
        "#W4": _order("#W4", "bob_kim_2", "pending", [copy.deepcopy(mug_large)], "paypal_2"),
        "#W5": _order(
            "#W5", "ann_lee_1", "pending", [copy.deepcopy(shirt_blue), copy.deepcopy(shirt_blue)], "credit_card_1"
        ),
    }
    return {"users": users, "orders": orders, "products": products}


class FakeCustomer:
    """A CustomerSimulator stand-in: echoes, counts turns, leaves after `patience` replies."""

    def __init__(self, patience: int = 3, mood: float = 0.25) -> None:
        self.heard: list[str] = []
        self.patience = patience
        self.sentiment_delta = mood

    @property
    def finished(self) -> bool:
        return len(self.heard) >= self.patience

    def opening_message(self) -> str:
        return "hello"

    def reply(self, agent_message: str) -> str:
        self.heard.append(agent_message)
        return f"you said: {agent_message}"


def fresh_env(world: dict[str, Any] | None = None, **row: Any):
    from tests.helpers_retail import RetailEnvironment

    env = RetailEnvironment()
    env.reset(initial_state=world if world is not None else tiny_world(), **row)
    return env
