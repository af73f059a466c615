"""Containment: how an operator stops a served agent doing harm while people look.

`retrain contain --mode MODE` records the mode on the registered model (`tracking.containment`);
whatever serves the champion wraps its policy with `contained(policy, mode)`:

- `off`: the policy serves as it is;
- `read-only`: the policy still talks and reads, but every write tool of the domain is refused
  with a message that says why (`training.sandbox.core.READ_ONLY_ERROR`), so nothing changes;
- `handoff`: the policy is not asked at all; every conversation is handed to a person at once
  through the domain's hand-over tool.

The wrapper acts on the conversations the rollout hands it, so it works with any policy (a model,
a scripted agent) and any domain that has a hand-over tool, with no change to the rollout loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from domains.api import ToolKind
from domains.registry import load_domain
from training.sandbox.rollout import Conversation, Message, Policy

CONTAINMENT_MODES = ("off", "read-only", "handoff")
HANDOFF_SUMMARY = "Handed over by containment: an operator has every conversation go to a person."


class ContainmentError(ValueError):
    """A containment mode that does not exist, or one the domain cannot obey (names which and why)."""


def check_mode(mode: Any) -> str:
    if mode not in CONTAINMENT_MODES:
        raise ContainmentError(f"containment mode {mode!r} is not one of {list(CONTAINMENT_MODES)}")
    return str(mode)


def hand_over_call(domain: str) -> dict[str, Any]:
    """The assistant message that hands a conversation of `domain` to a person: its hand-over tool,
    every required text argument filled with `HANDOFF_SUMMARY`."""
    spec = next((s for s in load_domain(domain).tool_specs if s.kind == ToolKind.HAND_OVER), None)
    if spec is None:
        raise ContainmentError(f"domain {domain!r} has no hand-over tool, so it cannot be contained by handoff")
    params = spec.parameters
    arguments: dict[str, Any] = {}
    for name in params.get("required", ()):
        if params.get("properties", {}).get(name, {}).get("type", "string") != "string":
            raise ContainmentError(
                f"domain {domain!r}: hand-over tool {spec.name!r} needs {name!r}, which is not text; "
                "containment fills text arguments only"
            )
        arguments[name] = HANDOFF_SUMMARY
    return {"role": "assistant", "content": "", "tool_calls": [{"name": spec.name, "arguments": arguments}]}


class ContainedPolicy:
    """`policy` under containment `mode` (see the module docstring)."""

    def __init__(self, policy: Policy, mode: str):
        self.policy, self.mode = policy, check_mode(mode)
        self.name = policy.name if self.mode == "off" else f"{policy.name} [contained: {self.mode}]"
        self.max_live = getattr(policy, "max_live", None)

    def act(self, conversations: Sequence[Conversation]) -> list[Message]:
        if self.mode == "handoff":
            return [hand_over_call(_domain(c)) for c in conversations]
        if self.mode == "read-only":
            for conversation in conversations:
                env = getattr(conversation, "env", None)
                if env is None:
                    raise ContainmentError("read-only containment needs conversations with a sandbox environment")
                env.read_only = True
        return self.policy.act(list(conversations))


def contained(policy: Policy, mode: str) -> Policy:
    """`policy` itself when `mode` is off, else the policy under containment."""
    return policy if check_mode(mode) == "off" else ContainedPolicy(policy, mode)


def _domain(conversation: Conversation) -> str:
    env = getattr(conversation, "env", None)
    if env is None:
        raise ContainmentError("handoff containment needs conversations with a sandbox environment")
    return env.domain
