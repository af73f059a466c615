"""The retail tools: one `RetailTools` instance per rollout, deterministic, no I/O.

Public methods are exactly the agent's tools plus `reset`: TRL turns every public function of an
environment class into a tool (`training.sandbox.environment.RetailEnvironment` adds `get_reward`).
Tool semantics and error strings follow the tau-bench retail reference; the fidelity tests replay
its 500 reference tasks (`tests/data/retail-world`) against it.
With `compact=True` at reset, records in tool results (reads and the record a write returns)
come in a short form for the curriculum's first levels (an order's item and payment ids only when
an offered tool can act on them); the state itself is the same.

    >>> env = RetailTools()
    >>> env.reset(initial_state={"users": {}, "orders": {}, "products": {}})
    >>> env.get_order_details(order_id="#W0000000")
    'Error: order not found'
    >>> call_tool(env, "rm_rf", {})
    "Error: unknown tool 'rm_rf'"
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from training.sandbox import tools_read as reads
from training.sandbox import tools_write as writes
from training.sandbox.arithmetic import calculate as _calculate
from training.sandbox.core import EnvironmentCore, EnvironmentSetupError, tool

__all__ = ["RetailTools", "TOOL_NAMES", "call_tool", "check_tool_names", "replay_actions", "EnvironmentSetupError"]


class RetailTools(EnvironmentCore):
    """The retail world behind the agent's tools; `reset(**row)` starts a conversation."""

    @tool()
    def find_user_id_by_email(self, email: str) -> str:
        """Find a customer's user id from their email address (case-insensitive).

        Args:
            email: The customer's email, such as 'something@example.com'.
        """
        return reads.find_user_id_by_email(self._state, email)

    @tool()
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a customer's user id from their first name, last name and zip code.

        Use this when the customer cannot give an email. Names match case-insensitively.

        Args:
            first_name: The customer's first name, such as 'John'.
            last_name: The customer's last name, such as 'Doe'.
            zip: The customer's zip code, such as '12345'.
        """
        return reads.find_user_id_by_name_zip(self._state, first_name, last_name, zip)

    @tool()
    def get_user_details(self, user_id: str) -> str:
        """Get a customer's profile: name, address, email, payment methods and order ids.

        Args:
            user_id: The user id, such as 'sara_doe_496'.
        """
        return self._render("user", reads.user(self._state, user_id))

    @tool()
    def get_order_details(self, order_id: str) -> str:
        """Get an order's status, items, address, fulfillments and payment history.

        Args:
            order_id: The order id, such as '#W0000000' (it starts with '#').
        """
        return self._render("order", reads.order(self._state, order_id))

    @tool()
    def get_product_details(self, product_id: str) -> str:
        """Get a product's variants: item id, options, availability and price of each.

        Args:
            product_id: The product id, such as '6086499569' (not an item id).
        """
        return self._render("product", reads.product(self._state, product_id))

    @tool()
    def list_all_product_types(self) -> str:
        """List every product type as a JSON object of product name to product id, sorted by name."""
        return json.dumps(reads.product_types(self._state))

    @tool()
    def calculate(self, expression: str) -> str:
        """Compute an arithmetic expression; the result is rounded to 2 decimal places.

        Args:
            expression: Numbers, + - * /, parentheses and spaces only, such as '(19.99 + 5) * 2'.
        """
        return _calculate(expression)

    @tool()
    def think(self, thought: str) -> str:
        """Write down a thought to reason about the next step; it changes nothing and is not shown.

        Args:
            thought: The thought.
        """
        return ""

    @tool()
    def transfer_to_human_agents(self, summary: str) -> str:
        """Hand the conversation to a human agent; this ends the conversation for you.

        Only when the customer asks for a human explicitly or the request cannot be handled
        with the other tools.

        Args:
            summary: A short summary of the customer's issue for the human agent.
        """
        self._transferred = True
        return "Transfer successful"

    @tool()
    def send_message_to_customer(self, message: str) -> str:
        """Send a message to the customer and get their reply.

        Args:
            message: What to say to the customer.
        """
        if self._simulator is None:
            return "Error: no customer is connected to this conversation"
        if getattr(self._simulator, "finished", False):
            return "Error: the customer has already left the conversation"
        self._told.append(message)
        return str(self._simulator.reply(message))

    @tool(writes=True)
    def cancel_pending_order(self, order_id: str, reason: str) -> str:
        """Cancel a pending order and refund every payment (gift cards at once, others in 5-7 days).

        Explain the cancellation and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            reason: Either 'no longer needed' or 'ordered by mistake'.
        """
        return self._render("order", writes.cancel_pending_order(self._state, order_id, reason))

    @tool(writes=True)
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

    @tool(writes=True)
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

    @tool(writes=True)
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

    @tool(writes=True)
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> str:
        """Pay a pending order with a different payment method; the old payment is refunded.

        Explain the change and get the customer's explicit confirmation first.

        Args:
            order_id: The order id, such as '#W0000000'.
            payment_method_id: The new payment method, such as 'credit_card_0000000'.
        """
        changed = writes.modify_pending_order_payment(self._state, order_id, payment_method_id)
        return self._render("order", changed)

    @tool(writes=True)
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

    @tool(writes=True)
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


RetailTools._TOOLS = {
    name: member._tool_info for name, member in vars(RetailTools).items() if hasattr(member, "_tool_info")
}
TOOL_NAMES: tuple[str, ...] = tuple(RetailTools._TOOLS)


def check_tool_names(tools: Iterable[str]) -> tuple[str, ...]:
    """`tools` sorted by name, the order TRL lists an environment's tools in (it reads them with
    `inspect.getmembers`), so every prompt shows them in that one order; a name that is no tool
    raises ValueError."""
    wanted = set(tools)
    unknown = sorted(wanted - set(TOOL_NAMES))
    if unknown:
        raise ValueError(f"unknown tool names {unknown}; the tools are {list(TOOL_NAMES)}")
    if not wanted:
        raise ValueError("a tool set needs at least one tool")
    return tuple(sorted(wanted))


def call_tool(env: RetailTools, name: Any, arguments: Any) -> str:
    """Run one parsed tool call through the allow-list; always a string, never an exception."""
    return env._invoke(name, arguments)


def replay_actions(
    state: Mapping[str, Any], actions: Iterable[Mapping[str, Any]], *, share_unchanged: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """Apply `actions` ({"name", "arguments"}) in order to a deep copy of `state`.

    Returns the final state and the `Error:` results met on the way, in order (the reference
    tasks list these as `gold_action_errors`). `state` itself is never modified. With
    `share_unchanged=True` only written records are copied and the result shares every other
    record with `state` (fast on a large world; treat both as read-only afterwards).
    """
    env = RetailTools()
    env._load(state, keep_initial=False, share_unchanged=share_unchanged)
    errors = []
    for action in actions:
        result = call_tool(env, action.get("name"), action.get("arguments", {}))
        if result.startswith("Error:"):
            errors.append(result)
    return env.state, errors
