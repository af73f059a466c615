"""`AirlineDomain`: the tau-bench airline world as a `domains.api.Domain`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from domains.airline import intents, models, world
from domains.airline.environment import AirlineEnvironment
from domains.airline.schemas import TOOL_SPECS
from domains.api import CustomerFacts, Domain, ToolSpec


class AirlineDomain(Domain):
    """Book, change and cancel flights for airline customers, under the tau-bench airline policy."""

    name: ClassVar[str] = "airline"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = TOOL_SPECS
    policy: ClassVar[str] = world.data_text("policy.md")
    tables: ClassVar[tuple[str, ...]] = world.TABLES
    intents: ClassVar[tuple[str, ...]] = (
        "book_reservation",
        "change_flight",
        "change_cabin",
        "change_baggage",
        "change_passengers",
        "cancel_reservation",
        "send_certificate",
        "transfer",
        "other",
    )
    customer_table: ClassVar[str] = "users"
    owner_field: ClassVar[str] = "user_id"
    # Ids a generic PII detector would flag (long digit runs, name-like user ids) but that replay
    # needs verbatim: payment-method ids, user ids such as mia_li_3668, certificate ids.
    world_key_patterns: ClassVar[tuple[str, ...]] = (
        r"credit_card_\d+",
        r"gift_card_\d+",
        r"certificate_\d+",
        r"[a-z]+_[a-z]+_\d+",
        r"HAT\d{3}",
        r"[A-Z0-9]{6}",
    )
    # Keyed by the engine's failure modes (evaluation.failure_modes.MODES).
    failure_hints: ClassVar[Mapping[str, str]] = {
        "policy_violation": "a change the policy forbids: a basic-economy flight change, a cancellation outside the rules",
        "unnecessary_escalation": "a transfer for a request the tools could handle",
        "wrong_arguments": "a reservation, flight or payment id copied wrong, or a price or bag count miscalculated",
    }
    personas: ClassVar[tuple[str, ...]] = ("polite", "terse", "confused", "angry", "demanding")

    def make_environment(self) -> AirlineEnvironment:
        return AirlineEnvironment()

    def load_world(self, folder: Any = None) -> dict[str, Any] | None:
        """The vendored reference world (500 users, 2,000 reservations, 300 flights), or the one in `folder`."""
        return world.load_world() if folder is None else super().load_world(folder)

    def validate_initial_state(self, initial_state: Any) -> dict[str, Any]:
        return models.validate_state(initial_state)

    def initial_state_schema(self) -> dict[str, Any]:
        return models.state_schema()

    def replay(self, initial_state: Mapping[str, Any], actions: Sequence[Mapping[str, Any]]) -> tuple[dict, list[str]]:
        """The state `actions` reach from `initial_state`, and the results that were errors.

        Copy-on-write (`share_unchanged`): only records a write touches are copied, so this is as
        fast on the full world as on a subset. `initial_state` is never modified; the returned
        state shares its unchanged records, so treat it as read-only or copy it. An unknown tool
        counts as an error here, though the reference's text for it has no "Error" prefix."""
        env = AirlineEnvironment()
        env.reset(initial_state, share_unchanged=True)
        errors = []
        for action in actions:
            action = action if isinstance(action, Mapping) else {}
            result = env.call(action.get("name"), action.get("arguments") or {})
            if result.startswith(("Error", "Unknown action")):
                errors.append(result)
        return env.state, errors

    def touched_subset(
        self, world_state: Mapping[str, Any], customer_id: str, actions: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any]:
        return world.touched_subset(world_state, customer_id, actions)

    def classify_intent(self, messages: Sequence[Mapping[str, Any]]) -> str:
        return intents.classify_intent(messages)

    def known_info(self, instruction: str) -> dict[str, Any]:
        return intents.known_info(instruction)

    def scenario_facts(self, user_scenario: Mapping[str, Any]) -> CustomerFacts:
        return intents.scenario_facts(user_scenario)

    def traffic(self) -> Any:
        from domains.airline.traffic import AirlineTraffic  # loads the world only when asked for

        return AirlineTraffic()

    def rules_agent(self, **options: Any) -> Any:
        from domains.airline.rules_agent import AirlineRulesAgent

        return AirlineRulesAgent(**options)
