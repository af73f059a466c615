"""A deterministic synthetic retail world in exactly the reference schema.

`retrain simulate` needs a world to sample customers, orders and products from, and the product
must not depend on the reference world the tests vendor (`tests/data/retail-world`). This generator builds one from a seed:
users (names, address, email, payment methods including gift cards with balances), orders in
every status (items, fulfillments, payment history) and products with variants. Key order inside
each record follows the reference files, so the JSON a simulation writes looks the same whichever
world it came from.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

# Product types: (name, base price, {option: values}). Several dimensions per product so that
# exchanges and modifications have other variants to move to.
CATALOGUE: tuple[tuple[str, float, dict[str, tuple[str, ...]]], ...] = (
    (
        "T-Shirt",
        50.0,
        {
            "color": ("blue", "black", "red", "white"),
            "size": ("S", "M", "L", "XL"),
            "material": ("cotton", "polyester"),
            "style": ("crew neck", "v-neck"),
        },
    ),
    (
        "Water Bottle",
        40.0,
        {
            "capacity": ("500ml", "750ml", "1000ml"),
            "material": ("glass", "plastic", "stainless steel"),
            "color": ("blue", "green", "red", "black"),
        },
    ),
    (
        "Hiking Boots",
        230.0,
        {"size": ("7", "8", "9", "10", "11"), "material": ("leather", "synthetic"), "waterproof": ("yes", "no")},
    ),
    (
        "Office Chair",
        480.0,
        {
            "material": ("fabric", "leather", "mesh"),
            "color": ("black", "gray", "blue"),
            "armrest": ("fixed", "adjustable"),
        },
    ),
    (
        "Electric Kettle",
        150.0,
        {
            "capacity": ("1L", "1.5L", "2L"),
            "material": ("glass", "plastic", "stainless steel"),
            "color": ("white", "silver", "black"),
        },
    ),
    (
        "Backpack",
        190.0,
        {
            "color": ("black", "navy", "grey", "green"),
            "size": ("small", "medium", "large"),
            "material": ("nylon", "polyester", "leather"),
        },
    ),
    (
        "Desk Lamp",
        120.0,
        {
            "color": ("white", "black", "silver"),
            "brightness": ("low", "medium", "high"),
            "power source": ("AC adapter", "USB", "battery"),
        },
    ),
    (
        "Wireless Earbuds",
        160.0,
        {
            "color": ("black", "white", "blue"),
            "battery life": ("4 hours", "6 hours", "8 hours"),
            "water resistance": ("IPX4", "IPX7", "not resistant"),
        },
    ),
    (
        "Yoga Mat",
        100.0,
        {
            "thickness": ("4mm", "5mm", "6mm"),
            "material": ("PVC", "natural rubber", "TPE"),
            "color": ("green", "pink", "blue", "purple"),
        },
    ),
    (
        "Coffee Maker",
        260.0,
        {
            "color": ("black", "stainless steel"),
            "capacity": ("1 cup", "4 cups", "8 cups", "12 cups"),
            "type": ("drip", "espresso", "french press"),
        },
    ),
    (
        "Running Shoes",
        170.0,
        {"size": ("7", "8", "9", "10", "11"), "color": ("black", "white", "red"), "material": ("mesh", "synthetic")},
    ),
    (
        "Smart Watch",
        330.0,
        {
            "color": ("black", "silver", "gold"),
            "band material": ("silicone", "metal", "leather"),
            "display": ("AMOLED", "LCD"),
        },
    ),
    (
        "Bluetooth Speaker",
        210.0,
        {
            "color": ("black", "blue", "red"),
            "battery life": ("10 hours", "20 hours"),
            "water resistance": ("yes", "no"),
        },
    ),
    (
        "Wall Clock",
        190.0,
        {
            "diameter": ("10 inches", "12 inches", "14 inches"),
            "color": ("white", "black", "wood"),
            "type": ("analog", "digital"),
        },
    ),
    (
        "Jigsaw Puzzle",
        50.0,
        {
            "pieces": ("500", "1000", "1500", "2000"),
            "theme": ("animals", "art", "fantasy"),
            "difficulty level": ("beginner", "intermediate", "expert"),
        },
    ),
    (
        "Air Purifier",
        400.0,
        {
            "room size": ("small", "medium", "large"),
            "filter type": ("HEPA", "carbon", "ionic"),
            "features": ("quiet operation", "smart sensors", "night mode"),
        },
    ),
)

FIRST_NAMES = (
    "Noah",
    "Ava",
    "Omar",
    "Sophia",
    "Liam",
    "Mia",
    "Ivan",
    "Yusuf",
    "Evelyn",
    "Raj",
    "Fatima",
    "Ethan",
    "Anya",
    "James",
    "Amelia",
    "Lucas",
    "Chen",
    "Isabella",
    "Mateo",
    "Aisha",
    "Harper",
    "Daiki",
    "Olivia",
    "Mohamed",
    "Emma",
    "Arjun",
    "Lena",
    "Sven",
    "Zoe",
    "Kofi",
    "Mei",
    "Diego",
    "Nora",
    "Hiro",
    "Layla",
)
LAST_NAMES = (
    "Brown",
    "Moore",
    "Anderson",
    "Nguyen",
    "Jackson",
    "Kim",
    "Hernandez",
    "Ahmed",
    "Li",
    "Taylor",
    "Muller",
    "Lee",
    "Silva",
    "Rossi",
    "Thomas",
    "Garcia",
    "Patel",
    "Santos",
    "Kowalski",
    "Okafor",
    "Wilson",
    "Sato",
    "Johansson",
    "Lopez",
    "Ito",
    "Martin",
    "Khan",
    "Dubois",
    "Costa",
    "Schmidt",
)
STREETS = (
    "Sunset Drive",
    "Cedar Street",
    "Willow Lane",
    "Main Street",
    "Broadway",
    "River Road",
    "Elm Avenue",
    "Oak Street",
    "Lakeview Drive",
    "Hillcrest Drive",
    "Maple Drive",
    "Pine Lane",
)
CITIES = (
    ("Denver", "CO", "80"),
    ("San Antonio", "TX", "78"),
    ("Philadelphia", "PA", "19"),
    ("Washington", "DC", "20"),
    ("San Jose", "CA", "95"),
    ("New York", "NY", "10"),
    ("Austin", "TX", "78"),
    ("Charlotte", "NC", "28"),
    ("Chicago", "IL", "60"),
    ("Seattle", "WA", "98"),
    ("Columbus", "OH", "43"),
    ("Phoenix", "AZ", "85"),
)
STATUS_WEIGHTS = (("pending", 0.42), ("delivered", 0.37), ("processed", 0.11), ("cancelled", 0.10))


class WorldGenError(ValueError):
    """Bad generator arguments (the offending value is in the message)."""


def _digits(rng: random.Random, n: int) -> str:
    return str(rng.randrange(10 ** (n - 1), 10**n))


def _unique(rng: random.Random, n: int, seen: set[str], prefix: str = "") -> str:
    while True:
        value = prefix + _digits(rng, n)
        if value not in seen:
            seen.add(value)
            return value


def random_address(rng: random.Random) -> dict[str, str]:
    """An address object in the reference key order (also used for address-change scenarios)."""
    city, state, zip_prefix = rng.choice(CITIES)
    return {
        "address1": f"{rng.randrange(100, 1000)} {rng.choice(STREETS)}",
        "address2": f"Suite {rng.randrange(100, 1000)}",
        "city": city,
        "country": "USA",
        "state": state,
        "zip": zip_prefix + _digits(rng, 3),
    }


def _products(rng: random.Random, ids: set[str]) -> dict[str, Any]:
    products: dict[str, Any] = {}
    for name, base, options in CATALOGUE:
        product_id = _unique(rng, 10, ids)
        combos = list(itertools.product(*options.values()))
        rng.shuffle(combos)
        variants = {}
        for combo in combos[: rng.randint(6, min(14, len(combos)))]:
            item_id = _unique(rng, 10, ids)
            variants[item_id] = {
                "item_id": item_id,
                "options": dict(zip(options, combo)),
                "available": rng.random() < 0.8,
                "price": round(base * rng.uniform(0.85, 1.15), 2),
            }
        products[product_id] = {"name": name, "product_id": product_id, "variants": variants}
    return products


def _payment_methods(rng: random.Random, ids: set[str]) -> dict[str, Any]:
    methods: dict[str, Any] = {}
    sources = rng.sample(("credit_card", "paypal", "gift_card"), rng.randint(1, 3))
    for source in sources:
        method_id = _unique(rng, 7, ids, prefix=f"{source}_")
        if source == "credit_card":
            method = {
                "source": source,
                "brand": rng.choice(("visa", "mastercard")),
                "last_four": _digits(rng, 4),
                "id": method_id,
            }
        elif source == "gift_card":
            method = {"source": source, "balance": rng.randrange(0, 250), "id": method_id}
        else:
            method = {"source": source, "id": method_id}
        methods[method_id] = method
    return methods


def _order(
    rng: random.Random, order_id: str, user_id: str, user: dict[str, Any], products: dict[str, Any], ids: set[str]
) -> dict[str, Any]:
    items = []
    for product in rng.sample(list(products.values()), rng.randint(1, 5)):
        variant = rng.choice(list(product["variants"].values()))
        items.append(
            {
                "name": product["name"],
                "product_id": product["product_id"],
                "item_id": variant["item_id"],
                "price": variant["price"],
                "options": dict(variant["options"]),
            }
        )
    status = rng.choices([s for s, _ in STATUS_WEIGHTS], [w for _, w in STATUS_WEIGHTS])[0]
    fulfillments = (
        []
        if status == "pending"
        else [{"tracking_id": [_unique(rng, 12, ids)], "item_ids": [item["item_id"] for item in items]}]
    )
    method_id = rng.choice(list(user["payment_methods"]))
    amount = round(sum(item["price"] for item in items), 2)
    history = [{"transaction_type": "payment", "amount": amount, "payment_method_id": method_id}]
    if status == "cancelled":
        history.append({"transaction_type": "refund", "amount": amount, "payment_method_id": method_id})
    return {
        "order_id": order_id,
        "user_id": user_id,
        "address": dict(user["address"]),
        "items": items,
        "fulfillments": fulfillments,
        "status": status,
        "payment_history": history,
    }


def generate_world(n_users: int = 200, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Build `{"users", "orders", "products"}` with `n_users` users, deterministically from `seed`.

    Emails and (first name, last name, zip) are unique, so both identification tools resolve to
    exactly one user. Users own 0-5 orders (about 2.2 on average, as in the reference world).
    """
    if isinstance(n_users, bool) or not isinstance(n_users, int) or n_users < 1:
        raise WorldGenError(f"n_users must be a positive integer, got {n_users!r}")
    rng = random.Random(f"worldgen:{seed}")
    ids: set[str] = set()
    products = _products(rng, ids)
    users: dict[str, Any] = {}
    orders: dict[str, Any] = {}
    emails: set[str] = set()
    name_zips: set[tuple[str, str, str]] = set()
    while len(users) < n_users:
        first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
        address = random_address(rng)
        suffix = _digits(rng, 4)
        user_id = f"{first.lower()}_{last.lower()}_{suffix}"
        email = f"{first.lower()}.{last.lower()}{_digits(rng, 4)}@example.com"
        key = (first.lower(), last.lower(), address["zip"])
        if user_id in users or email in emails or key in name_zips:
            continue
        emails.add(email)
        name_zips.add(key)
        user = {
            "name": {"first_name": first, "last_name": last},
            "address": address,
            "email": email,
            "payment_methods": _payment_methods(rng, ids),
            "orders": [],
        }
        for _ in range(rng.choices(range(6), (0.12, 0.27, 0.28, 0.2, 0.08, 0.05))[0]):
            order_id = _unique(rng, 7, ids, prefix="#W")
            orders[order_id] = _order(rng, order_id, user_id, user, products, ids)
            user["orders"].append(order_id)
        users[user_id] = user
    return {"users": users, "orders": orders, "products": products}
