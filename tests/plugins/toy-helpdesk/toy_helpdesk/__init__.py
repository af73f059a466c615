"""A toy IT help desk: users with tickets; the agent reads a ticket and closes or reopens it.

Everything here depends on `domains.api` alone, as a third-party domain package would.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from typing import Any

from domains.api import Domain, RecordRef, ToolKind, ToolSpec


def _schema(name: str, description: str, **params: str) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {p: {"type": "string", "description": d} for p, d in params.items()},
                "required": list(params),
            },
        },
    }


_TICKET = RecordRef("ticket_id", "tickets")
TOOLS = (
    ToolSpec(
        _schema("get_user", "Get a user's profile and ticket ids.", user_id="The user id."),
        ToolKind.READ,
        RecordRef("user_id", "users"),
    ),
    ToolSpec(
        _schema("get_ticket", "Get a ticket's status and title.", ticket_id="The ticket id, such as 'T-1'."),
        ToolKind.READ,
        _TICKET,
    ),
    ToolSpec(
        _schema("close_ticket", "Close an open ticket.", ticket_id="The ticket id.", resolution="What fixed it."),
        ToolKind.WRITE,
        _TICKET,
    ),
    ToolSpec(_schema("escalate", "Hand the conversation to a person.", summary="The issue."), ToolKind.HAND_OVER),
)


class HelpdeskWorld:
    """The help desk's tables behind its tools."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {"users": {}, "tickets": {}}

    def reset(self, initial_state: Mapping[str, Any], **options: Any) -> None:
        self._state = copy.deepcopy(dict(initial_state))

    @property
    def state(self) -> dict[str, Any]:
        return self._state

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        try:
            if name == "get_user":
                user = self._state["users"].get(arguments["user_id"])
                return json.dumps(user) if user else "Error: user not found"
            if name == "get_ticket":
                ticket = self._state["tickets"].get(arguments["ticket_id"])
                return json.dumps(ticket) if ticket else "Error: ticket not found"
            if name == "close_ticket":
                ticket = self._state["tickets"].get(arguments["ticket_id"])
                if ticket is None:
                    return "Error: ticket not found"
                if ticket["status"] != "open":
                    return "Error: only an open ticket can be closed"
                ticket["status"], ticket["resolution"] = "closed", arguments["resolution"]
                return json.dumps(ticket)
            if name == "escalate":
                return "Escalated"
        except KeyError as err:
            return f"Error: missing argument {err}"
        return f"Error: unknown tool {name!r}"


class HelpdeskDomain(Domain):
    name = "helpdesk"
    tool_specs = TOOLS
    policy = "You are an IT help desk agent. Read a ticket before closing it; tell the user the ticket's status."
    tables = ("users", "tickets")
    intents = ("ticket_status", "close_ticket", "other")

    def make_environment(self) -> HelpdeskWorld:
        return HelpdeskWorld()

    def classify_intent(self, messages: Sequence[Mapping[str, Any]]) -> str:
        from domains.api import transcript_calls

        names = [c["name"] for c in transcript_calls(messages)]
        return "close_ticket" if "close_ticket" in names else ("ticket_status" if "get_ticket" in names else "other")


domain = HelpdeskDomain()
