"""The retail world behind the agent's tools: one `RetailWorld` per conversation, deterministic, no I/O.

Tool semantics and error strings follow the tau-bench retail reference; the fidelity tests replay
its 500 reference tasks (`tests/data/retail-world`) against it. The tool methods' signatures and
docstrings are the source of the OpenAI schemas the domain publishes (`schemas.py`).
With `compact=True` at reset, records in tool results (reads and the record a write returns)
come in a short form for the curriculum's first levels (an order's item and payment ids only when
an offered tool can act on them); the state itself is the same.

    >>> world = RetailWorld()
    >>> world.reset(initial_state={"users": {}, "orders": {}, "products": {}})
    >>> world.call("get_order_details", {"order_id": "#W0000000"})
    'Error: order not found'
    >>> world.call("rm_rf", {})
    "Error: unknown tool 'rm_rf'"
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from domains.api import ToolKind, copy_json
from domains.retail import tools_read as reads
from domains.retail import tools_write as writes
from domains.retail.world import COLLECTIONS, validate_world
from training.sandbox.arithmetic import calculate as _calculate
from training.sandbox.tool_args import ArgumentError, ParamSpec, check_arguments, param_spec

__all__ = ["RetailWorld", "TOOL_NAMES", "TOOLS", "replay_actions"]


@dataclass(frozen=True)
class _Tool:
    fn: Callable[..., str]
    spec: ParamSpec
    kind: ToolKind


def tool(kind: ToolKind) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Mark a method as a tool of `kind`; the method itself stays as written (for its schema)."""

    def mark(fn: Callable[..., str]) -> Callable[..., str]:
        fn._retail_tool = kind  # type: ignore[attr-defined]
        return fn

    return mark


class RetailWorld:
    """The retail world: `reset(initial_state)`, `call(name, arguments) -> str`, `state`."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {name: {} for name in COLLECTIONS}
        self._owned: set[tuple[str, str]] | None = None  # copy-on-write bookkeeping, None = all owned
        self._compact = False
        self._offers_ids = True
        self.changed = False  # whether the last call changed the world (the engine reads it)

    def reset(
        self,
        initial_state: Mapping[str, Any],
        compact: bool = False,
        offered_tools: Iterable[str] | None = None,
        share_unchanged: bool = False,
        **_ignored: Any,
    ) -> None:
        """Install a copy of `initial_state` (checked; WorldError if it breaks the schema).

        With `share_unchanged`, records are copied only when first written: replaying against the
        full world is then cheap (a write touches one order and one user of 1,500 records); the
        caller's records are never mutated either way. `offered_tools` (default all) decides
        whether compact orders show item and payment ids.
        """
        validate_world(initial_state)
        if share_unchanged:
            self._state = {
                key: dict(value) if key in COLLECTIONS else copy_json(value) for key, value in initial_state.items()
            }
            self._owned = set()
        else:
            self._state = copy_json(dict(initial_state))
            self._owned = None
        self._compact = bool(compact)
        offered = TOOL_NAMES if offered_tools is None else tuple(offered_tools)
        self._offers_ids = any(reads.ID_ARGUMENTS.intersection(TOOLS[n].spec.names) for n in offered if n in TOOLS)
        self.changed = False

    @property
    def state(self) -> dict[str, Any]:
        """The live world: {"users", "orders", "products"}."""
        return self._state

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        """Run one tool; every problem (unknown tool, bad arguments, a failed rule) is an Error string."""
        self.changed = False
        found = TOOLS.get(name) if isinstance(name, str) else None
        if found is None:
            if isinstance(name, str):
                shown = name if len(name) <= 100 else name[:100] + "..."
            else:
                shown = f"<{type(name).__name__}>"
            return f"Error: unknown tool {shown!r}"
        try:
            clean = check_arguments(found.spec, dict(arguments) if isinstance(arguments, Mapping) else arguments)
        except ArgumentError as exc:
            return f"Error: {exc}"
        before = self._snapshot(clean) if found.kind == ToolKind.WRITE else None
        result = found.fn(self, **clean)
        self.changed = before is not None and not result.startswith("Error") and self._differs(before)
        return result

    def _render(self, kind: str, found: Any) -> str:
        """A record as a tool result: full JSON, or compact when reset asked for it."""
        return reads.render(kind, found, self._compact, self._offers_ids)

    def _snapshot(self, arguments: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """Copies of the records a write can touch: the order, its owner, the named user.

        Under copy-on-write these records also become this world's own before the write.
        """
        keys: list[tuple[str, str]] = []
        order = self._state["orders"].get(arguments.get("order_id", ""))
        if order is not None:
            keys += [("orders", arguments["order_id"]), ("users", order["user_id"])]
        if "user_id" in arguments:
            keys.append(("users", arguments["user_id"]))
        snapshot = []
        for kind, rid in keys:
            if rid not in self._state[kind]:
                continue
            record = self._state[kind][rid]
            if self._owned is not None and (kind, rid) not in self._owned:
                self._state[kind][rid] = copy_json(record)  # the shared original stays as it was
                self._owned.add((kind, rid))
                snapshot.append((kind, rid, record))
            else:
                snapshot.append((kind, rid, copy_json(record)))
        return snapshot

    def _differs(self, snapshot: list[tuple[str, str, Any]]) -> bool:
        return any(self._state[kind].get(rid) != record for kind, rid, record in snapshot)

    @tool(ToolKind.IDENTIFY)
    def find_user_id_by_email(self, email: str) -> str:
        """Find a customer's user id from their email address (case-insensitive).

        Args:
            email: The customer's email, such as 'something@example.com'.
        """
        return reads.find_user_id_by_email(self._state, email)

    @tool(ToolKind.IDENTIFY)
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a customer's user id from their first name, last name and zip code.

        Use this when the customer cannot give an email. Names match case-insensitively.

        Args:
            first_name: The customer's first name, such as 'John'.
            last_name: The customer's last name, such as 'Doe'.
            zip: The customer's zip code, such as '12345'.
        """
        return reads.find_user_id_by_name_zip(self._state, first_name, last_name, zip)

    @tool(ToolKind.READ)
    def get_user_details(self, user_id: str) -> str:
        """Get a customer's profile: name, address, email, payment methods and order ids.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._render("user", reads.user(self._state, user_id))

    @tool(ToolKind.READ)
    def get_order_details(self, order_id: str) -> str:
        """Get an order's status, items, address, fulfillments and payment history.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
        """
        return self._render("order", reads.order(self._state, order_id))

    @tool(ToolKind.READ)
    def get_product_details(self, product_id: str) -> str:
        """Get a product's variants: item id, options, availability and price of each.

        Args:
            product_id: The product id, such as '6086499569' (not an item id).
        """
        return self._render("product", reads.product(self._state, product_id))

    @tool(ToolKind.READ)
    def list_all_product_types(self) -> str:
        """List every product type as a JSON object of product name to product id, sorted by name."""
        return json.dumps(reads.product_types(self._state))

    @tool(ToolKind.THINK)
    def calculate(self, expression: str) -> str:
        """Compute an arithmetic expression; the result is rounded to 2 decimal places.

        Args:
            expression: Numbers, + - * /, parentheses and spaces only, such as '(19.99 + 5) * 2'.
        """
        return _calculate(expression)

    @tool(ToolKind.THINK)
    def think(self, thought: str) -> str:
        """Write down a thought to reason about the next step; it changes nothing and is not shown.

        Args:
            thought: The thought.
        """
        return ""

    @tool(ToolKind.HAND_OVER)
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent; this ends the conversation for you.

        Only when the customer asks for a human explicitly or the request cannot be handled
        with the other tools.

        Args:
            summary: A short summary of the customer's issue for the human agent.
        """
        return "Transfer successful"

    @tool(ToolKind.WRITE)
    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        """Cancel a pending order and refund every payment (gift cards at once, others in 5-7 days).

        Explain the cancellation and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            reason: Either 'no longer needed' or 'ordered by mistake'.
        """
        return self._render("order", writes.cancel_pending_order(self._state, order_id, reason))

    @tool(ToolKind.WRITE)
    def modify_pending_order_address(
        self, order_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> str:
        """Change the shipping address of a pending order.

        Explain the change and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            address1: First address line, such as '123 Main St'.
            address2: Second address line, such as 'Apt 1' (may be empty).
            city: The city, such as 'San Francisco'.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code, such as '12345'.
        """
        changed = writes.modify_pending_order_address(
            self._state, order_id, address1, address2, city, state, country, zip
        )
        return self._render("order", changed)

    @tool(ToolKind.WRITE)
    def modify_user_address(
        self, user_id: str, address1: str, address2: str, city: str, state: str, country: str, zip: str
    ) -> str:
        """Change a customer's default address.

        Explain the change and get the customer's explicit confirmation first.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
            address1: First address line, such as '123 Main St'.
            address2: Second address line, such as 'Apt 1' (may be empty).
            city: The city, such as 'San Francisco'.
            state: The state, such as 'CA'.
            country: The country, such as 'USA'.
            zip: The zip code, such as '12345'.
        """
        changed = writes.modify_user_address(self._state, user_id, address1, address2, city, state, country, zip)
        return self._render("user", changed)

    @tool(ToolKind.WRITE)
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        """Swap items of a pending order for other variants of the same products (possible once per order).

        The price difference is charged to, or refunded to, the given payment method.
        Explain the change and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to change, such as ['1008292230']; repeat an id for duplicates.
            new_item_ids: The new item ids, position by position, each a variant of the same product.
            payment_method_id: Pays or receives the price difference, such as 'gift_card_0000000'.
        """
        changed = writes.modify_pending_order_items(self._state, order_id, item_ids, new_item_ids, payment_method_id)
        return self._render("order", changed)

    @tool(ToolKind.WRITE)
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> str:
        """Pay a pending order with a different payment method; the old payment is refunded.

        Explain the change and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            payment_method_id: The new payment method, such as 'credit_card_0000000'.
        """
        changed = writes.modify_pending_order_payment(self._state, order_id, payment_method_id)
        return self._render("order", changed)

    @tool(ToolKind.WRITE)
    def return_delivered_order_items(self, order_id: str, item_ids: list[str], payment_method_id: str) -> str:
        """Request a return of items of a delivered order (return or exchange happens once per order).

        The refund goes to the original payment method or to a gift card. Explain the return
        and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to return, such as ['1008292230']; repeat an id for duplicates.
            payment_method_id: Receives the refund: the original method or a gift card.
        """
        changed = writes.return_delivered_order_items(self._state, order_id, item_ids, payment_method_id)
        return self._render("order", changed)

    @tool(ToolKind.WRITE)
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> str:
        """Request an exchange of items of a delivered order for other variants of the same products.

        Return or exchange happens once per order. Explain the exchange and get the customer's
        explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            item_ids: The item ids to exchange, such as ['1008292230']; repeat an id for duplicates.
            new_item_ids: The new item ids, position by position, each a variant of the same product.
            payment_method_id: Pays or receives the price difference, such as 'gift_card_0000000'.
        """
        changed = writes.exchange_delivered_order_items(
            self._state, order_id, item_ids, new_item_ids, payment_method_id
        )
        return self._render("order", changed)


TOOLS: dict[str, _Tool] = {
    name: _Tool(member, param_spec(member), member._retail_tool)
    for name, member in vars(RetailWorld).items()
    if hasattr(member, "_retail_tool")
}
TOOL_NAMES: tuple[str, ...] = tuple(TOOLS)


def replay_actions(
    state: Mapping[str, Any], actions: Iterable[Mapping[str, Any]], *, share_unchanged: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Apply `actions` ({"name", "arguments"}) in order to a deep copy of `state`.

    Returns the final state and the `Error:` results met on the way, in order (the reference
    tasks list these as `gold_action_errors`). `state` itself is never modified. With
    `share_unchanged=True` only written records are copied and the result shares every other
    record with `state` (fast on a large world; treat both as read-only afterwards).
    """
    world = RetailWorld()
    world.reset(state, share_unchanged=share_unchanged)
    errors = []
    for action in actions:
        result = world.call(action.get("name"), action.get("arguments", {}))
        if result.startswith("Error:"):
            errors.append(result)
    return world.state, errors
