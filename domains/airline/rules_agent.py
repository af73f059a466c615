"""The airline's legacy rules agent: the scripted agent that served before any model did.

It follows the booking system's procedure for the request it was routed (the scenario): ask the
customer for their user id, read the profile, read each reservation before changing it, make the
change, tell the customer what the change cost or refunded, and close. Like the retail shop's
scripted agent it makes mistakes at set rates, drawn per conversation from its seed: it hands a
conversation it could have handled to a person (`unnecessary_transfer`), or changes a reservation
without reading it first (`skipped_read`). The generic traffic driver routes each conversation's
scenario to it through `plan` before the conversation starts.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

DEFAULT_MISTAKE_RATES = {"unnecessary_transfer": 0.10, "skipped_read": 0.05}
_HAND_OVER = "transfer_to_human_agents"


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]}


def _say(text: str) -> dict[str, Any]:
    return _call("send_message_to_customer", {"message": text})


class AirlineRulesAgent:
    """A `Policy` that plays a fixed procedure per conversation (keyed by its task id)."""

    def __init__(self, mistake_rates: Mapping[str, float] | None = None, name: str = "rules-agent") -> None:
        rates = dict(DEFAULT_MISTAKE_RATES if mistake_rates is None else mistake_rates)
        unknown = sorted(set(rates) - set(DEFAULT_MISTAKE_RATES))
        if unknown or any(not 0.0 <= v <= 1.0 for v in rates.values()):
            raise ValueError(f"mistake_rates {rates!r}: known mistakes {list(DEFAULT_MISTAKE_RATES)}, rates in [0, 1]")
        self.mistake_rates = rates
        self.name = name
        self._scripts: dict[str, list[dict[str, Any]]] = {}
        self.mistakes: dict[str, list[str]] = {}

    def plan(self, task_id: str, row: Mapping[str, Any], seed: int) -> None:
        """Write the script of one conversation from its routed scenario."""
        rng = random.Random(f"airline-rules:{seed}")
        made = [m for m, rate in sorted(self.mistake_rates.items()) if rng.random() < rate]
        gold = row.get("gold") or {}
        actions = [a for a in gold.get("actions") or [] if isinstance(a, Mapping)]
        user_id = str(row.get("customer_id"))
        steps = [_say("Could you tell me your user id, please?"), _call("get_user_details", {"user_id": user_id})]
        writes = [a for a in actions if a.get("name") != _HAND_OVER]
        if "unnecessary_transfer" in made and writes:
            steps.append(_call(_HAND_OVER, {"summary": f"Customer {user_id} needs help with a reservation."}))
        else:
            read: set[str] = set()
            for action in actions:
                arguments = dict(action.get("arguments") or {})
                reservation = arguments.get("reservation_id")
                if reservation and reservation not in read and "skipped_read" not in made:
                    steps.append(_call("get_reservation_details", {"reservation_id": reservation}))
                    read.add(reservation)
                steps.append(_call(str(action.get("name")), arguments))
            outputs = [str(o) for o in gold.get("outputs") or []]
            if outputs:
                steps.append(_say("Here is what you asked for: " + ", ".join(outputs) + "."))
            steps.append(_say("Your request is done. Is there anything else I can help with?"))
        self._scripts[task_id] = steps
        self.mistakes[task_id] = [m for m in made if m != "unnecessary_transfer" or writes]

    def act(self, conversations: list[Any]) -> list[dict[str, Any]]:
        replies = []
        for conversation in conversations:
            script = self._scripts.get(str(getattr(conversation, "task_id", "")))
            if script is None:
                raise LookupError(f"{self.name}: no plan for conversation {getattr(conversation, 'task_id', None)!r}")
            turn = sum(1 for m in conversation if m.get("role") == "assistant")
            replies.append(script[turn] if turn < len(script) else {"role": "assistant", "content": "Goodbye."})
        return replies
