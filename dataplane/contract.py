"""The interaction record contract, schema_version 1 (docs/ARCHITECTURE.md, "The interaction record").

`validate_record` checks every field and returns a normalised copy (optional nullable fields
filled with None, empty `tool_calls` dropped, tool-call arguments given as JSON text decoded), so
that the same interaction always hashes to the same content whatever producer wrote it. Every
violation raises `ContractError` with a short rule name and a detail naming the field.
"""

from __future__ import annotations

import json
import math
import re
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

SCHEMA_VERSION = 1
INTENTS = frozenset(
    {
        "order_status",
        "cancel_order",
        "return_items",
        "exchange_items",
        "modify_order_items",
        "modify_order_address",
        "modify_order_payment",
        "modify_user_address",
        "other",
    }
)
OUTCOMES = frozenset({"completed", "failed", "escalated"})
ROLES = frozenset({"system", "user", "assistant", "tool"})
FUTURE_TOLERANCE = timedelta(minutes=5)

ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
# RFC 3339 date-time with a mandatory offset; fromisoformat alone would accept dates, week
# dates and naive times.
RFC3339_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")

REQUIRED_FIELDS = (
    "interaction_id",
    "started_at",
    "ended_at",
    "policy_version",
    "customer_id",
    "intent",
    "initial_state",
    "user_scenario",
    "messages",
    "outcome",
    "actions_taken",
    "customer_sentiment_delta",
    "schema_version",
)
NULLABLE_FIELDS = ("escalation_was_necessary", "gold", "human_label")
ALL_FIELDS = frozenset(REQUIRED_FIELDS + NULLABLE_FIELDS)


class ContractError(ValueError):
    """A record (or file) broke the contract; `.rule` is a stable snake_case name."""

    def __init__(self, rule: str, detail: str, record: Any = None):
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail
        self.record = record


def parse_timestamp(value: Any, field: str) -> datetime:
    """Parse an RFC 3339 timestamp with offset into an aware datetime, or raise bad_timestamp."""
    if type(value) is str:
        # Ingestion parses each timestamp twice (validation, then the stored row); the cache
        # makes the second parse a lookup. Failures are never cached, so errors stay per call.
        return _parse_text(value, field)
    if not isinstance(value, str):
        raise ContractError("wrong_type", f"{field} must be an RFC 3339 string, got {type(value).__name__}")
    return _parse_text.__wrapped__(value, field)


@lru_cache(maxsize=64)
def _parse_text(value: str, field: str) -> datetime:
    match = RFC3339_RE.fullmatch(value)
    if match is None:
        raise ContractError("bad_timestamp", f"{field}={value!r} is not RFC 3339 with an offset")
    frac = (match.group(7) or "")[:7]  # fromisoformat takes at most microseconds
    text = f"{value[:10]}T{value[11:19]}{frac}{match.group(8).upper().replace('Z', '+00:00')}"
    try:
        return datetime.fromisoformat(text)
    except ValueError as err:  # e.g. month 13, hour 25
        raise ContractError("bad_timestamp", f"{field}={value!r}: {err}") from err


def _require_type(value: Any, types: type | tuple[type, ...], field: str) -> None:
    # bool is a subclass of int; the contract treats them as different types.
    is_bool = isinstance(value, bool)
    wants_bool = types is bool or (isinstance(types, tuple) and bool in types)
    if not isinstance(value, types) or (is_bool and not wants_bool):
        names = types.__name__ if isinstance(types, type) else "|".join(t.__name__ for t in types)
        raise ContractError("wrong_type", f"{field} must be {names}, got {type(value).__name__}")


# The hot path below tests `type(x) is T` first (what json.loads and Arrow produce) and only falls
# back to `_require_type`, which accepts subclasses and builds the error, when that fails; field
# names are formatted only on that slow path.


def _check_id(value: Any, field: str) -> None:
    if type(value) is not str:
        _require_type(value, str, field)
    if ID_RE.fullmatch(value) is None:
        raise ContractError("bad_interaction_id", f"{field}={value[:140]!r} must be 1-128 of [A-Za-z0-9_.:-]")


def _tool_call(call: Any, field: str) -> dict:
    if type(call) is not dict:
        _require_type(call, dict, field)
    if "name" not in call or "arguments" not in call:
        key = "name" if "name" not in call else "arguments"
        raise ContractError("missing_field", f"{field}.{key} is missing")
    name = call["name"]
    if type(name) is not str:
        _require_type(name, str, f"{field}.name")
    args = call["arguments"]
    if isinstance(args, str):  # OpenAI-style producers send arguments as JSON text
        try:
            args = json.loads(args)
        except json.JSONDecodeError as err:
            raise ContractError("wrong_type", f"{field}.arguments is not a JSON object: {err}") from err
    if type(args) is not dict:
        _require_type(args, dict, f"{field}.arguments")
    return {"name": name, "arguments": args}


_MESSAGE_KEYS = frozenset({"role", "content", "tool_calls", "name"})


def _messages(value: Any) -> list[dict]:
    if type(value) is not list:
        _require_type(value, list, "messages")
    if not value:
        raise ContractError("empty_messages", "messages must hold at least one message")
    return [_message(msg, i) for i, msg in enumerate(value)]


def _message(msg: Any, i: int) -> dict:
    if type(msg) is not dict:
        _require_type(msg, dict, f"messages[{i}]")
    if not msg.keys() <= _MESSAGE_KEYS:
        raise ContractError("unknown_field", f"messages[{i}] has unknown keys {sorted(set(msg) - _MESSAGE_KEYS)}")
    if "role" not in msg or "content" not in msg:
        key = "role" if "role" not in msg else "content"
        raise ContractError("missing_field", f"messages[{i}].{key} is missing")
    role, content = msg["role"], msg["content"]
    if type(role) is not str:
        _require_type(role, str, f"messages[{i}].role")
    if role not in ROLES:
        raise ContractError("unknown_role", f"messages[{i}].role={role!r} not in {sorted(ROLES)}")
    if type(content) is not str:
        _require_type(content, str, f"messages[{i}].content")
    clean: dict[str, Any] = {"role": role, "content": content}
    calls = msg.get("tool_calls")
    if calls is not None:
        if type(calls) is not list:
            _require_type(calls, list, f"messages[{i}].tool_calls")
        if calls and role != "assistant":
            raise ContractError("tool_calls_on_non_assistant", f"messages[{i}].tool_calls on a {role!r} message")
        if calls:
            clean["tool_calls"] = [_tool_call(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
    name = msg.get("name")
    if name is None:
        if role == "tool":
            raise ContractError("missing_field", f"messages[{i}].name is required on tool messages")
    else:
        if type(name) is not str:
            _require_type(name, str, f"messages[{i}].name")
        clean["name"] = name
    return clean


def _initial_state(value: Any, customer_id: str) -> dict:
    if type(value) is not dict:
        _require_type(value, dict, "initial_state")
    for key in ("users", "orders", "products"):
        if key not in value:
            raise ContractError("missing_field", f"initial_state.{key} is missing")
        if type(value[key]) is not dict:
            _require_type(value[key], dict, f"initial_state.{key}")
    if customer_id not in value["users"]:
        raise ContractError("customer_not_in_state", f"customer_id={customer_id!r} not in initial_state.users")
    return value


def _user_scenario(value: Any) -> dict:
    if type(value) is not dict:
        _require_type(value, dict, "user_scenario")
    for key, kind in (("instruction", str), ("known_info", dict), ("persona", str)):
        if key not in value:
            raise ContractError("missing_field", f"user_scenario.{key} is missing")
        if type(value[key]) is not kind:
            _require_type(value[key], kind, f"user_scenario.{key}")
    return value


def _gold(value: Any) -> dict | None:
    if value is None:
        return None
    if type(value) is not dict:
        _require_type(value, dict, "gold")
    for key in ("actions", "outputs"):
        if key not in value:
            raise ContractError("missing_field", f"gold.{key} is missing")
        if type(value[key]) is not list:
            _require_type(value[key], list, f"gold.{key}")
    actions = [_tool_call(a, f"gold.actions[{i}]") for i, a in enumerate(value["actions"])]
    outputs = value["outputs"]
    for i, text in enumerate(outputs):
        if type(text) is not str:
            _require_type(text, str, f"gold.outputs[{i}]")
    return {"actions": actions, "outputs": list(outputs)}


def _human_label(value: Any) -> dict | None:
    if value is None:
        return None
    _require_type(value, dict, "human_label")
    for key in ("task_success", "rater", "labeled_at"):
        if key not in value:
            raise ContractError("missing_field", f"human_label.{key} is missing")
    _require_type(value["task_success"], bool, "human_label.task_success")
    _require_type(value["rater"], str, "human_label.rater")
    parse_timestamp(value["labeled_at"], "human_label.labeled_at")
    return {"task_success": value["task_success"], "rater": value["rater"], "labeled_at": value["labeled_at"]}


def validate_record(obj: Any, now: datetime | None = None) -> dict:
    """Check `obj` against schema_version 1 and return the normalised record.

    `now` (aware datetime, default the current UTC time) anchors the future-timestamp rule so
    tests and backfills are deterministic. Raises ContractError on the first violation.
    """
    if not isinstance(obj, dict):
        raise ContractError("wrong_type", f"record must be a JSON object, got {type(obj).__name__}", obj)
    try:
        return _validate(obj, now or datetime.now(UTC))
    except ContractError as err:
        err.record = obj
        raise


_REQUIRED_SET = frozenset(REQUIRED_FIELDS)


def _validate(obj: dict, now: datetime) -> dict:
    keys = obj.keys()
    if not keys >= _REQUIRED_SET:
        raise ContractError("missing_field", f"missing field(s) {[f for f in REQUIRED_FIELDS if f not in obj]}")
    if not keys <= ALL_FIELDS:
        raise ContractError("unknown_field", f"unknown field(s) {sorted(set(obj) - ALL_FIELDS)}")
    version = obj["schema_version"]
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise ContractError("unknown_schema_version", f"schema_version={version!r}, expected {SCHEMA_VERSION}")
    _check_id(obj["interaction_id"], "interaction_id")
    _check_times(obj, now)
    _check_scalars(obj)
    escalation = obj.get("escalation_was_necessary")
    return {
        "interaction_id": obj["interaction_id"],
        "started_at": obj["started_at"],
        "ended_at": obj["ended_at"],
        "policy_version": obj["policy_version"],
        "customer_id": obj["customer_id"],
        "intent": obj["intent"],
        "initial_state": _initial_state(obj["initial_state"], obj["customer_id"]),
        "user_scenario": _user_scenario(obj["user_scenario"]),
        "messages": _messages(obj["messages"]),
        "outcome": obj["outcome"],
        "escalation_was_necessary": escalation,
        "actions_taken": obj["actions_taken"],
        "customer_sentiment_delta": float(obj["customer_sentiment_delta"]),  # 0 and 0.0 must hash alike
        "gold": _gold(obj.get("gold")),
        "human_label": _human_label(obj.get("human_label")),
        "schema_version": SCHEMA_VERSION,
    }


def _check_times(obj: dict, now: datetime) -> None:
    started = parse_timestamp(obj["started_at"], "started_at")
    ended = parse_timestamp(obj["ended_at"], "ended_at")
    if ended < started:
        raise ContractError("ended_before_started", f"ended_at={obj['ended_at']} < started_at={obj['started_at']}")
    if ended > now + FUTURE_TOLERANCE:
        raise ContractError("future_timestamp", f"ended_at={obj['ended_at']} is after now+5min ({now.isoformat()})")


def _check_scalars(obj: dict) -> None:
    """The flat fields after the timestamps, in the order their rules are reported."""
    policy = obj["policy_version"]
    if type(policy) is not str:
        _require_type(policy, str, "policy_version")
    if not policy:
        raise ContractError("wrong_type", "policy_version must be a non-empty string")
    _check_id(obj["customer_id"], "customer_id")
    intent, outcome = obj["intent"], obj["outcome"]
    if type(intent) is not str:
        _require_type(intent, str, "intent")
    if intent not in INTENTS:
        raise ContractError("unknown_intent", f"intent={intent!r} not in the intent set")
    if type(outcome) is not str:
        _require_type(outcome, str, "outcome")
    if outcome not in OUTCOMES:
        raise ContractError("unknown_outcome", f"outcome={outcome!r} not in {sorted(OUTCOMES)}")
    escalation = obj.get("escalation_was_necessary")
    if escalation is not None and type(escalation) is not bool:
        _require_type(escalation, bool, "escalation_was_necessary")
    actions = obj["actions_taken"]
    if type(actions) is not int:
        _require_type(actions, int, "actions_taken")
    if actions < 0:
        raise ContractError("negative_actions", f"actions_taken={actions} < 0")
    sentiment = obj["customer_sentiment_delta"]
    if type(sentiment) is not float and type(sentiment) is not int:
        _require_type(sentiment, (int, float), "customer_sentiment_delta")
    if not -1.0 <= sentiment <= 1.0 or not math.isfinite(sentiment):
        raise ContractError("sentiment_out_of_range", f"customer_sentiment_delta={sentiment} not in [-1, 1]")
