"""The retail domain: the tau-bench retail shop (orders, products, users) as an engine plug-in."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from importlib import resources
from typing import Any, ClassVar

from domains.api import CustomerFacts, Domain, Level1, RecordRef, StatusRules, ToolKind, ToolSpec
from domains.retail.intents import INTENT_NAMES, classify_transcript, known_info_of
from domains.retail.level1 import LEVEL1, as_level1, level1_demonstration
from domains.retail.policy import POLICY
from domains.retail.world import COLLECTIONS, touched_subset

# The words an order's status takes (longer ones first: "pending (item modified)" holds "pending").
ORDER_STATUSES = (
    "pending (item modified)",
    "return requested",
    "exchange requested",
    "pending",
    "processed",
    "delivered",
    "cancelled",
)
_ORDER = RecordRef("order_id", "orders")
_USER = RecordRef("user_id", "users")
_RECORDS = {
    "get_user_details": _USER,
    "get_order_details": _ORDER,
    "get_product_details": RecordRef("product_id", "products"),
    "modify_user_address": _USER,
}


def _load_schemas() -> list[dict[str, Any]]:
    text = resources.files("domains.retail").joinpath("tool_schemas.json").read_text(encoding="utf-8")
    return json.loads(text)


class RetailDomain(Domain):
    name: ClassVar[str] = "retail"
    policy: ClassVar[str] = POLICY
    tables: ClassVar[tuple[str, ...]] = COLLECTIONS
    intents: ClassVar[tuple[str, ...]] = INTENT_NAMES
    # Order ids (#W + 7 digits), payment-method ids and item ids are digit runs a phone or card
    # detector could take for PII; they are keys the customer must be able to say.
    world_key_patterns: ClassVar[tuple[str, ...]] = (
        r"#W\d{7}",
        r"(?:credit_card|gift_card|paypal)_\d{7}",
        r"\b\d{10}\b",
    )
    # A payment method's source: the shop stage's agent named the commonest (`credit_card_`) in
    # every proposal until relabelled copies swapped them (bench/results/shipped_agent.md).
    interchangeable_prefixes: ClassVar[tuple[tuple[str, ...], ...]] = (("credit_card_", "gift_card_", "paypal_"),)
    status_rules: ClassVar[StatusRules | None] = StatusRules(
        table="orders",
        field="status",
        requires={
            "cancel_pending_order": "pending",
            "modify_pending_order_address": "pending",
            "modify_pending_order_items": "pending",
            "modify_pending_order_payment": "pending",
            "return_delivered_order_items": "delivered",
            "exchange_delivered_order_items": "delivered",
        },
        after={
            "cancel_pending_order": "cancelled",
            "modify_pending_order_items": "pending (item modified)",
            "return_delivered_order_items": "return requested",
            "exchange_delivered_order_items": "exchange requested",
        },
        statuses=ORDER_STATUSES,
    )
    level1: ClassVar[Level1 | None] = LEVEL1
    failure_hints: ClassVar[Mapping[str, str]] = {
        "wrong_arguments": "an order, item or payment id copied wrong",
        "policy_violation": "a write before identification or on an order in the wrong status",
    }

    @cached_property
    def _specs(self) -> tuple[ToolSpec, ...]:
        from domains.retail.tools import TOOLS

        specs = []
        for schema in _load_schemas():
            name = schema["function"]["name"]
            kind = TOOLS[name].kind
            record = _RECORDS.get(name, _ORDER if kind == ToolKind.WRITE else None)
            specs.append(ToolSpec(schema=schema, kind=kind, record=record))
        return tuple(specs)

    @property
    def tool_specs(self) -> tuple[ToolSpec, ...]:  # type: ignore[override]
        return self._specs

    def make_environment(self) -> Any:
        from domains.retail.tools import RetailWorld

        return RetailWorld()

    def validate_initial_state(self, initial_state: Any) -> dict[str, Any]:
        """The contract's check: the three tables, each an object of records.

        Deliberately no deeper: retail logs from before domains were accepted with sparse records,
        and must still ingest. The sandbox checks every field its tools dereference when a
        conversation starts (`validate_world`), so a sparse record fails that one trial, named."""
        checked = super().validate_initial_state(initial_state)
        for table in self.tables:
            # A plain loop (no generator per table): ingestion runs this for every record. The
            # exact-type test first: a decoded object is a dict.
            for rid, record in checked[table].items():
                if type(record) is not dict and not isinstance(record, dict):
                    raise ValueError(f"initial_state.{table}[{rid!r}] is not an object")
        return checked

    def replay(self, initial_state: Mapping[str, Any], actions: Sequence[Mapping[str, Any]]) -> tuple[dict, list[str]]:
        from domains.retail.tools import replay_actions

        return replay_actions(initial_state, actions)

    def touched_subset(
        self, world: Mapping[str, Any], customer_id: str, actions: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any]:
        return touched_subset(world, customer_id, actions)

    def classify_intent(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return classify_transcript(messages)

    def as_level1(
        self, record: Mapping[str, Any], intents: Sequence[str] | None = None, max_actions: int | None = None
    ) -> dict[str, Any] | None:
        return as_level1(record, tuple(intents or LEVEL1.intents), max_actions or LEVEL1.max_actions)

    def level1_demonstration(self, task: Mapping[str, Any], escalate: bool = False) -> dict[str, Any]:
        return level1_demonstration(task, escalate=escalate)

    def known_info(self, instruction: str) -> dict[str, Any]:
        return known_info_of(instruction)

    def load_world(self, folder: Any = None) -> dict[str, Any] | None:
        from domains.retail.world import load_world

        return None if folder is None else load_world(folder)

    def scenario_facts(self, user_scenario: Mapping[str, Any]) -> CustomerFacts:
        from domains.retail.customer import scenario_facts

        facts = scenario_facts(dict(user_scenario))
        identity = {
            k: v
            for k, v in {
                "email": facts.email,
                "first_name": facts.first_name,
                "last_name": facts.last_name,
                "zip": facts.zip,
            }.items()
            if v
        }
        details = {"order_id": ", ".join(facts.order_ids)} if facts.order_ids else {}
        return CustomerFacts(identity=identity, request=str(user_scenario.get("instruction") or ""), details=details)

    def make_customer(self, user_scenario: Mapping[str, Any], seed: int) -> Any:
        from domains.retail.customer import PersonaSimulator

        return PersonaSimulator(dict(user_scenario), seed=seed)

    def traffic(self) -> Any:
        from domains.retail.traffic import RetailTraffic

        return RetailTraffic()

    def change_phrases(
        self, tool: str, arguments: Mapping[str, Any], initial_state: Mapping[str, Any]
    ) -> tuple[str, str] | None:
        from domains.retail.traffic.agents import change_phrases

        return change_phrases(tool, arguments, initial_state)

    def detail_question(self, tool: str, arguments: Mapping[str, Any]) -> str | None:
        from domains.retail.traffic.agents import detail_question

        return detail_question(tool, arguments)

    def rules_agent(self, **options: Any) -> Any:
        # The shop's scripted agent (`domains.retail.traffic.agents.ScriptedAgent`) plays a whole
        # conversation in one call, reading each customer reply as it goes, so it is no
        # turn-by-turn `Policy`: the shop's own traffic runs it, and nothing else can.
        return None
