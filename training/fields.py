"""A record's JSON fields (`initial_state`, `user_scenario`, `gold`, call arguments) arrive as text
from the interaction log or DuckDB, or already parsed from a test or the simulator."""

from __future__ import annotations

import json
from typing import Any


def as_dict(value: Any) -> Any:
    """The parsed field: JSON text decoded, a parsed value as it is, a missing one as `{}`."""
    return json.loads(value) if isinstance(value, str) else (value or {})
