"""What one conversation left behind: the single input every reward and metric reads.

Rewards (training.rewards) and evaluation metrics (evaluation.metrics) never look at the policy's
text or weights; they read an Episode, which the environment builds from its own state and audit
log. Keeping this a plain data object is what lets the judge stay out of the learner's reach.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# Tools that change the world. Everything else is a read (or talking to the customer).
WRITE_TOOLS = frozenset(
    {
        "cancel_pending_order",
        "modify_pending_order_address",
        "modify_pending_order_items",
        "modify_pending_order_payment",
        "modify_user_address",
        "return_delivered_order_items",
        "exchange_delivered_order_items",
    }
)
AUTH_TOOLS = frozenset({"find_user_id_by_email", "find_user_id_by_name_zip"})
ESCALATION_TOOL = "transfer_to_human_agents"
MESSAGE_TOOL = "send_message_to_customer"


@dataclass(frozen=True)
class AuditEntry:
    """One tool call as the environment saw it."""

    tool: str
    arguments: dict[str, Any]
    result: str
    changed: bool  # the world state differs after the call
    error: bool  # the result starts with "Error:"


@dataclass
class Episode:
    """Everything a judge may read about one finished conversation.

    `told` is every message the agent sent to the customer, in order; `gold` is the row's
    verified `{"actions": [...], "outputs": [...]}` or None.
    """

    initial_state: dict[str, Any]
    final_state: dict[str, Any]
    audit_log: list[AuditEntry]
    told: list[str] = field(default_factory=list)
    gold: dict[str, Any] | None = None
    escalation_was_necessary: bool | None = None
    sentiment_delta: float = 0.0  # the simulated customer's mood change, in [-1, 1]
    user_id: str | None = None  # the customer the conversation is about, when known

    @property
    def transferred(self) -> bool:
        return any(e.tool == ESCALATION_TOOL and not e.error for e in self.audit_log)

    @property
    def actions(self) -> list[AuditEntry]:
        """Tool calls that count as agent actions (everything except talking and thinking)."""
        return [e for e in self.audit_log if e.tool not in (MESSAGE_TOOL, "think")]
