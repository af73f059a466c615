"""A record's JSON fields (`initial_state`, `user_scenario`, `gold`, call arguments) arrive as text
from the interaction log or DuckDB, or already parsed from a test or the simulator."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any


def as_dict(value: Any) -> Any:
    """The parsed field: JSON text decoded, a parsed value as it is, a missing one as `{}`."""
    return json.loads(value) if isinstance(value, str) else (value or {})


def tool_results_after(messages: Sequence[Any], index: int, calls: int) -> list[Mapping[str, Any]]:
    """The recorded results of the `calls` tool calls of the assistant message at `index`: the tool
    messages right after it, in order, at most `calls` of them (fewer where the record has fewer)."""
    results: list[Mapping[str, Any]] = []
    for message in messages[index + 1 :]:
        if not isinstance(message, Mapping) or message.get("role") != "tool" or len(results) == calls:
            break
        results.append(message)
    return results
