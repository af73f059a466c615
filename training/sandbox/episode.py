"""What one conversation left behind: the single input every reward and metric reads.

Rewards (training.rewards) and evaluation metrics (evaluation.metrics) never look at the policy's
text or weights; they read an Episode, which the environment builds from its own state and audit
log. Keeping this a plain data object is what lets the judge stay out of the learner's reach.

Rewards and failure modes are written over tool *kinds* (read, write, identify, hand-over, think)
and the record a call touches, never over tool names: each audit entry carries its kind and
record, as the environment resolved them from the domain's tool specs. An entry built without
them (a hand-written test episode) is resolved from the episode's domain when read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from domains.api import ToolKind
from domains.registry import DEFAULT_DOMAIN, load_domain

# Talking to the customer is the engine's tool, offered in every domain.
MESSAGE_TOOL = "send_message_to_customer"
MESSAGE_KIND = "message"


@dataclass(frozen=True)
class AuditEntry:
    """One tool call as the environment saw it.

    `kind` is the tool's `ToolKind` value (or "message"); `record` is `(table, id)` of the record
    the call names, when its tool declares one and the argument is a string. Both empty mean
    "resolve from the domain" (see `kind_of`, `record_of`).
    """

    tool: str
    arguments: dict[str, Any]
    result: str
    changed: bool  # the world state differs after the call
    error: bool  # the result starts with "Error"
    kind: str = ""
    record: tuple[str, str] | None = None


@lru_cache(maxsize=64)
def _domain_kinds(domain: str) -> dict[str, tuple[str, Any]]:
    found: dict[str, tuple[str, Any]] = {MESSAGE_TOOL: (MESSAGE_KIND, None)}
    for spec in load_domain(domain).tool_specs:
        found[spec.name] = (spec.kind.value, spec.record)
    return found


def resolve_call(domain: str, tool: str, arguments: Any) -> tuple[str, tuple[str, str] | None]:
    """The kind and the named record of a call to `tool` in `domain` ("" and None if unknown)."""
    kind, ref = _domain_kinds(domain).get(tool, ("", None))
    record = None
    if ref is not None and isinstance(arguments, dict) and isinstance(arguments.get(ref.argument), str):
        record = (ref.table, arguments[ref.argument])
    return kind, record


@dataclass
class Episode:
    """Everything a judge may read about one finished conversation.

    `told` is every message the agent sent to the customer, in order; `gold` is the row's
    verified `{"actions": [...], "outputs": [...]}` or None; `domain` names the domain whose
    world this is (its tables, tool kinds and gold replay).
    """

    initial_state: dict[str, Any]
    final_state: dict[str, Any]
    audit_log: list[AuditEntry]
    told: list[str] = field(default_factory=list)
    gold: dict[str, Any] | None = None
    escalation_was_necessary: bool | None = None
    sentiment_delta: float = 0.0  # the simulated customer's mood change, in [-1, 1]
    user_id: str | None = None  # the customer the conversation is about, when known
    domain: str = DEFAULT_DOMAIN

    def kind_of(self, entry: AuditEntry) -> str:
        return entry.kind or resolve_call(self.domain, entry.tool, entry.arguments)[0]

    def record_of(self, entry: AuditEntry) -> tuple[str, str] | None:
        if entry.kind:
            return entry.record
        return resolve_call(self.domain, entry.tool, entry.arguments)[1]

    def kind_of_name(self, tool: str) -> str:
        """The kind of a tool by name (for gold actions, which are not audit entries)."""
        return resolve_call(self.domain, tool, {})[0]

    def record_of_call(self, tool: str, arguments: Any) -> tuple[str, str] | None:
        return resolve_call(self.domain, tool, arguments)[1]

    def is_write(self, entry: AuditEntry) -> bool:
        return self.kind_of(entry) == ToolKind.WRITE

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(load_domain(self.domain).tables)

    def owner_of(self, record: tuple[str, str] | None) -> str | None:
        """The customer a record belongs to: itself for a customer record, else its owner field."""
        if record is None:
            return None
        domain = load_domain(self.domain)
        table, ident = record
        if table == domain.customer_table:
            return ident
        found = self.initial_state.get(table, {}).get(ident)
        owner = found.get(domain.owner_field) if isinstance(found, dict) else None
        return owner if isinstance(owner, str) else None

    @property
    def identifies(self) -> bool:
        """Whether the domain identifies customers with a tool (else customers give their id)."""
        return bool(load_domain(self.domain).tool_names(ToolKind.IDENTIFY))

    @property
    def transferred(self) -> bool:
        return any(self.kind_of(e) == ToolKind.HAND_OVER and not e.error for e in self.audit_log)

    @property
    def actions(self) -> list[AuditEntry]:
        """Tool calls that count as agent actions (everything except talking and thinking)."""
        return [e for e in self.audit_log if self.kind_of(e) not in (MESSAGE_KIND, ToolKind.THINK)]
