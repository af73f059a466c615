"""The one interface between the engine and a domain.

A domain is an object with the attributes below (subclass `Domain` to get the defaults). The engine
never names a domain's tools, tables or intents: it reads tool *kinds* and *record arguments*
from `tool_specs`, tables from `tables`, intents from `intents`, and drives the world only through
`make_environment()`:

    >>> from domains.registry import load_domain
    >>> d = load_domain("retail")
    >>> env = d.make_environment()
    >>> env.reset(initial_state={"users": {}, "orders": {}, "products": {}})
    >>> env.call("get_order_details", {"order_id": "#W1"})
    'Error: order not found'

This module imports nothing from the engine, so a third-party domain can depend on it alone.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar, Protocol, runtime_checkable

API_VERSION = 1
ENTRY_POINT_GROUP = "agent_retrain.domains"


def copy_json(value: Any) -> Any:
    """Deep copy of JSON-shaped data (dicts, lists, scalars), about 4x faster than copy.deepcopy.

    Scalars are immutable so they are shared; anything that is not JSON-shaped falls back to
    `copy.deepcopy` so the copy is never shallower than asked for.
    """
    kind = type(value)
    if kind is dict:
        return {key: copy_json(item) for key, item in value.items()}
    if kind is list:
        return [copy_json(item) for item in value]
    if kind in (str, int, float, bool) or value is None:
        return value
    return copy.deepcopy(value)


def transcript_calls(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The assistant's tool calls of a transcript, native (`{"name", "arguments"}`) or in the
    OpenAI shape (`{"function": {"name", "arguments": "<json>"}}`)."""
    calls: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or ():
            if not isinstance(call, Mapping):
                continue
            inner = call.get("function") if isinstance(call.get("function"), Mapping) else call
            arguments = inner.get("arguments")
            if isinstance(arguments, str):
                try:
                    arguments = json.loads(arguments)
                except json.JSONDecodeError:
                    arguments = {}
            calls.append({"name": inner.get("name"), "arguments": arguments if isinstance(arguments, dict) else {}})
    return calls


class ToolKind(StrEnum):
    """What a tool does, as far as rewards, metrics and failure modes are concerned."""

    READ = "read"  # looks at the world, changes nothing
    WRITE = "write"  # changes the world
    IDENTIFY = "identify"  # finds the customer's id from what they say; the result is that id
    HAND_OVER = "hand_over"  # gives the conversation to a person; ends it for the agent
    THINK = "think"  # reasoning or arithmetic: no evidence, no effect


@dataclass(frozen=True)
class RecordRef:
    """The record a tool call touches: the value of `argument` is a key of table `table`."""

    argument: str
    table: str


@dataclass(frozen=True)
class ToolSpec:
    """One tool of a domain: its OpenAI function schema, its kind, and the record it touches.

    `schema` is `{"type": "function", "function": {"name", "description", "parameters"}}`, with
    `parameters` a JSON Schema object whose properties use the types string, integer, number,
    boolean, array and object.
    """

    schema: Mapping[str, Any]
    kind: ToolKind
    record: RecordRef | None = None

    @property
    def name(self) -> str:
        return str(self.schema["function"]["name"])

    @property
    def parameters(self) -> Mapping[str, Any]:
        return self.schema["function"].get("parameters") or {"type": "object", "properties": {}}


@dataclass(frozen=True)
class StatusRules:
    """A domain's record life cycle, for the failure-mode taxonomy (optional).

    Records of `table` carry a status in `field`; a write listed in `requires` is eligible only
    on a record in that status, and a successful one leaves the status in `after`. `statuses` are
    the words an agent may state about a record; one told to a customer that no tool result holds
    is a hallucinated fact.
    """

    table: str
    field: str
    requires: Mapping[str, str]
    after: Mapping[str, str]
    statuses: tuple[str, ...]


@dataclass(frozen=True)
class Level1:
    """A domain's easiest curriculum level (optional): short single-intent tasks whose customer
    states everything up front, on a short tool list, for a tiny policy to start on.

    `stated_arguments`: the gold arguments a customer's opening must state for a task to count as
    self-contained."""

    intents: tuple[str, ...]
    max_actions: int
    tools: tuple[str, ...]
    stated_arguments: tuple[str, ...]


@runtime_checkable
class DomainEnvironment(Protocol):
    """A domain's world behind its tools: deterministic, no I/O.

    `reset` copies `initial_state` (never writes through to it); `call` runs one tool and returns
    its result as a string, errors included (`Error: ...`), never raising for a bad call;
    `state` is the live world, a dict of tables.
    """

    def reset(self, initial_state: Mapping[str, Any], **options: Any) -> None: ...
    def call(self, name: str, arguments: Mapping[str, Any]) -> str: ...
    @property
    def state(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class CustomerFacts:
    """What a simulated customer knows, as the engine's generic simulator uses it.

    `identity`: how they identify themselves, field -> value (said when the agent asks for any of
    those fields); `request`: what they want, in their own words; `details`: other facts they give
    when asked for them by name (a reservation id, a reason); `confirms`: whether they say yes to a
    proposed change.
    """

    identity: Mapping[str, str]
    request: str
    details: Mapping[str, str]
    confirms: bool = True


class Domain:
    """Defaults for a domain; a subclass sets the class attributes and `make_environment`.

    Required: `name`, `tool_specs`, `policy`, `tables`, `intents`, `make_environment`.
    Optional hooks return None (or empty) when the domain does not provide them, and the engine
    then does without: a domain with no traffic generator cannot be simulated, one with no rules
    agent has no legacy traffic, and so on.
    """

    name: ClassVar[str] = ""
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = ()
    policy: ClassVar[str] = ""
    tables: ClassVar[tuple[str, ...]] = ()
    intents: ClassVar[tuple[str, ...]] = ("other",)
    customer_table: ClassVar[str] = "users"  # the table whose keys are customer ids
    owner_field: ClassVar[str] = "user_id"  # the field of other tables' records naming their customer
    # Regular expressions of world keys that look like PII to a generic detector (an order id with
    # many digits, a payment-method id) and must survive masking, so replay still works.
    world_key_patterns: ClassVar[tuple[str, ...]] = ()
    # Groups of identifier openings that each name one kind of record (a payment method's source:
    # `credit_card_`, `paypal_`), which a relabelled training copy of a conversation may swap
    # consistently (`training.tiny.relabel`), so a tiny policy must copy the opening, not guess it.
    interchangeable_prefixes: ClassVar[tuple[tuple[str, ...], ...]] = ()
    # Failure-mode hints: a short sentence per failure mode, shown beside the counts.
    failure_hints: ClassVar[Mapping[str, str]] = {}
    status_rules: ClassVar[StatusRules | None] = None
    personas: ClassVar[tuple[str, ...]] = ("polite",)
    level1: ClassVar[Level1 | None] = None

    # ---- tools ----
    @property
    def tools(self) -> list[dict[str, Any]]:
        """The OpenAI function schemas of every tool, in declaration order."""
        return [copy.deepcopy(dict(spec.schema)) for spec in self.tool_specs]

    def spec(self, tool: str) -> ToolSpec | None:
        return next((s for s in self.tool_specs if s.name == tool), None)

    def tool_names(self, kind: ToolKind | None = None) -> tuple[str, ...]:
        return tuple(s.name for s in self.tool_specs if kind is None or s.kind == kind)

    def kinds(self) -> dict[str, ToolKind]:
        return {s.name: s.kind for s in self.tool_specs}

    # ---- the world ----
    def make_environment(self) -> DomainEnvironment:
        raise NotImplementedError(f"domain {self.name!r} has no environment")

    def validate_initial_state(self, initial_state: Any) -> dict[str, Any]:
        """The initial state checked by the domain's model; raises ValueError naming the rule.

        The default checks only that every table is an object of records."""
        # `type(...) is dict` first: ingestion checks every record's state, and an ABC isinstance
        # costs several times the exact-type test that decoded JSON (always a dict) passes.
        if type(initial_state) is not dict and not isinstance(initial_state, Mapping):
            raise ValueError(f"initial_state must be an object of tables {list(self.tables)}")
        for name in self.tables:  # a plain loop: the list of every missing table is built only on a miss
            table = initial_state.get(name)
            if type(table) is not dict and not isinstance(table, Mapping):
                missing = [
                    t
                    for t in self.tables
                    if type(table := initial_state.get(t)) is not dict and not isinstance(table, Mapping)
                ]
                raise ValueError(f"initial_state lacks tables {missing} (each an object of records)")
        return dict(initial_state)

    def initial_state_schema(self) -> dict[str, Any]:
        """JSON Schema of `initial_state` (what `retrain schema --domain` prints)."""
        return {
            "type": "object",
            "required": list(self.tables),
            "properties": {t: {"type": "object", "additionalProperties": {"type": "object"}} for t in self.tables},
        }

    def load_world(self, folder: Any = None) -> dict[str, Any] | None:
        """The world in `folder` (one `<table>.json` per table), or with no folder the domain's
        own reference world; None when it has none. Raises OSError or ValueError naming the file."""
        if folder is None:
            return None
        from pathlib import Path

        world = {}
        for table in self.tables:
            path = Path(folder) / f"{table}.json"
            if not path.is_file():
                raise ValueError(f"{path}: missing_file")
            world[table] = json.loads(path.read_text(encoding="utf-8"))
        self.validate_initial_state(world)
        return world

    def replay(self, initial_state: Mapping[str, Any], actions: Sequence[Mapping[str, Any]]) -> tuple[dict, list[str]]:
        """Gold verification: the state `actions` reach from `initial_state`, and their errors.

        `initial_state` is never modified."""
        env = self.make_environment()
        env.reset(initial_state=initial_state)
        errors = []
        for action in actions:
            result = env.call(str(action.get("name")), dict(action.get("arguments") or {}))
            if result.startswith("Error"):
                errors.append(result)
        return env.state, errors

    def touched_subset(
        self, world: Mapping[str, Any], customer_id: str, actions: Sequence[Mapping[str, Any]] = ()
    ) -> dict[str, Any]:
        """The part of `world` a conversation about `customer_id` can touch (default: all of it)."""
        return copy_json(dict(world))

    # ---- transcripts ----
    def classify_intent(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The intent of a transcript, from its tool calls (default: 'other')."""
        return "other"

    # ---- customers ----
    def known_info(self, instruction: str) -> dict[str, Any]:
        """What a task's customer states about themselves, parsed from its instruction (default: nothing)."""
        return {}

    def scenario_facts(self, user_scenario: Mapping[str, Any]) -> CustomerFacts:
        """Facts for the engine's generic customer simulator (default: from `known_info`)."""
        info = dict(user_scenario.get("known_info") or {})
        identity = {k: str(v) for k, v in info.items() if isinstance(v, str | int) and not isinstance(v, bool)}
        return CustomerFacts(identity=identity, request=str(user_scenario.get("instruction") or ""), details={})

    def make_customer(self, user_scenario: Mapping[str, Any], seed: int) -> Any | None:
        """A rule-based customer simulator of the domain's own, or None for the engine's generic one."""
        return None

    # ---- curriculum ----
    def as_level1(
        self, record: Mapping[str, Any], intents: Sequence[str] | None = None, max_actions: int | None = None
    ) -> dict[str, Any] | None:
        """A copy of `record` as a level-1 task (cooperative customer, stated opening), or None."""
        return None

    def level1_demonstration(self, task: Mapping[str, Any], escalate: bool = False) -> dict[str, Any]:
        """The expert conversation for a level-1 task (what SFT warm-starts a tiny policy on)."""
        raise NotImplementedError(f"domain {self.name!r} has no level-1 curriculum")

    # ---- traffic ----
    def traffic(self) -> Any | None:
        """The traffic generator (`TrafficGenerator`), or None."""
        return None

    def rules_agent(self, **options: Any) -> Any | None:
        """A scripted policy for legacy traffic (the engine's `Policy`: `name`, `act(conversations)`),
        or None. If it has `plan(task_id, row, seed)`, the traffic driver calls it with each
        conversation's scenario row before the conversation starts. `mistake_rates={}` asks for
        it without mistakes: the person who finishes a conversation the served agent handed over
        (`training.traffic.handoff`)."""
        return None

    def change_phrases(
        self, tool: str, arguments: Mapping[str, Any], initial_state: Mapping[str, Any]
    ) -> tuple[str, str] | None:
        """(the proposal, the confirmation) the shop's own agent says for the change `tool` with
        `arguments` on `initial_state`, or None to let the person who takes a hand-over word them
        from the tool's name. A person who speaks as the shop's agent does leaves resolutions a
        model built on that agent's conversations can learn from (`training.traffic.handoff`)."""
        return None

    def detail_question(self, tool: str, arguments: Mapping[str, Any]) -> str | None:
        """The question the shop's own agent asks, once it has read the record, for what only the
        customer can say before the change `tool` with `arguments` (a reason, a payment method, an
        address), or None to let the person who takes a hand-over ask for the arguments by their
        names. Asked in the agent's words, a resolution reads as the agent's own conversations."""
        return None


@runtime_checkable
class TrafficGenerator(Protocol):
    """Simulated production traffic for a domain.

    `intent_mix`: the default share of each intent. `generate_world(n_customers, seed)`: a world.
    `sample(world, intent, rng)`: one scenario row, a dict with `customer_id`, `intent`,
    `initial_state` (the touched subset), `user_scenario`, `gold` (`{"actions", "outputs"}`) and
    `escalation_was_necessary`, whose gold replays without error, or None when the world has no
    customer for that intent.
    """

    intent_mix: Mapping[str, float]

    def generate_world(self, n_customers: int, seed: int) -> dict[str, Any]: ...
    def sample(self, world: Mapping[str, Any], intent: str, rng: Any) -> dict[str, Any] | None: ...
