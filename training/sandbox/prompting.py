"""How a conversation is put in front of the policy, and how its tool calls are read back.

One module serves training (the GRPO dataset's prompts, SFT formatting) and evaluation (rollouts),
so the candidate is judged on exactly the format it was trained on. The tool-call format is the
Qwen2.5 one (`<tool_call>{"name": ..., "arguments": {...}}</tool_call>`), which TRL's shipped
`qwen2_5.jinja` chat template renders and TRL's response parser reads.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from typing import Any

from domains.registry import DEFAULT_DOMAIN, load_domain
from training.customers import make_simulator
from training.fields import as_dict
from training.sandbox.environment import check_tool_names, environment_class, tool_names

_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class ToolCallParseError(ValueError):
    """A `<tool_call>` block that is not a JSON object with a name and an arguments object."""


def domain_of(record: dict[str, Any]) -> str:
    """The domain a record or task belongs to (`domain`; absent means the default, retail)."""
    return str(record.get("domain") or DEFAULT_DOMAIN)


def system_policy(domain: str = DEFAULT_DOMAIN) -> str:
    """The served agent's system prompt: the domain's policy text."""
    return load_domain(domain).policy


@lru_cache(maxsize=32)
def tool_schemas(tools: tuple[str, ...] | None = None, domain: str = DEFAULT_DOMAIN) -> tuple[dict[str, Any], ...]:
    """JSON schemas of the sandbox's tools (or of the subset `tools`), read from the methods of
    the class TRL is given (`environment_class`), exactly as TRL reads them: what the chat
    template lists.

    Sorted by name, because that is how TRL's GRPOTrainer lists an environment's tools in the
    prompts of its rollouts; SFT and evaluation must show a policy the same list in the same
    order (a tiny policy warm-started on another order barely made a tool call under GRPO).
    """
    from transformers.utils import get_json_schema  # heavy: transformers loads only when schemas are built

    names = check_tool_names(tool_names(domain) if tools is None else tools, domain)
    cls = environment_class(domain, names)
    return tuple(get_json_schema(getattr(cls, name)) for name in names)


def opening_message(record: dict[str, Any], seed: int = 0) -> str:
    """The customer's first words: the recorded one when there is one, else the simulator's."""
    for message in record.get("messages") or ():
        if message.get("role") == "user" and message.get("content"):
            return message["content"]
    scenario = as_dict(record.get("user_scenario"))
    return make_simulator(scenario, seed=seed, domain=domain_of(record)).opening_message()


def initial_messages(record: dict[str, Any], seed: int = 0) -> list[dict[str, str]]:
    """System policy plus the customer's opening message: the prompt of one task."""
    return [
        {"role": "system", "content": system_policy(domain_of(record))},
        {"role": "user", "content": opening_message(record, seed=seed)},
    ]


def parse_tool_calls(text: str, strict: bool = False) -> tuple[str, list[dict[str, Any]]]:
    """Split generated text into free text and tool calls.

    >>> parse_tool_calls('ok <tool_call>{"name": "think", "arguments": {"thought": "x"}}</tool_call>')
    ('ok', [{'name': 'think', 'arguments': {'thought': 'x'}}])

    A malformed block is kept as a call to the reserved name `__malformed__` (so the environment
    answers it with an Error and metrics can count it) unless `strict`, which raises instead.
    """
    calls: list[dict[str, Any]] = []
    for block in _TOOL_CALL.findall(text):
        try:
            payload = json.loads(block)
            if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
                raise ToolCallParseError(f"tool call without a name: {block[:200]!r}")
            arguments = payload.get("arguments", {})
            if isinstance(arguments, str):
                arguments = json.loads(arguments)
            if not isinstance(arguments, dict):
                raise ToolCallParseError(f"tool call arguments are not an object: {block[:200]!r}")
        except (json.JSONDecodeError, ToolCallParseError) as err:
            if strict:
                raise ToolCallParseError(str(err)) from err
            calls.append({"name": "__malformed__", "arguments": {"raw": block[:500]}})
            continue
        calls.append({"name": payload["name"], "arguments": arguments})
    content = _TOOL_CALL.sub("", text).strip()
    return content, calls
