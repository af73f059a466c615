"""The interaction record contract, schema_version 1 (DESIGN section 3).

`validate_record` checks every field and returns a normalised copy (optional nullable fields
filled with None, empty `tool_calls` dropped, tool-call arguments given as JSON text decoded), so
that the same interaction always hashes to the same content whatever producer wrote it. Every
violation raises `ContractError` with a short rule name and a detail naming the field.
"""
from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any

SCHEMA_VERSION = 1
INTENTS = frozenset({
    "order_status", "cancel_order", "return_items", "exchange_items", "modify_order_items",
    "modify_order_address", "modify_order_payment", "modify_user_address", "other",
})
OUTCOMES = frozenset({"completed", "failed", "escalated"})
ROLES = frozenset({"system", "user", "assistant", "tool"})
FUTURE_TOLERANCE = timedelta(minutes=5)

ID_RE = re.compile(r"[A-Za-z0-9_.:-]{1,128}")
# RFC 3339 date-time with a mandatory offset; fromisoformat alone would accept dates, week
# dates and naive times.
RFC3339_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")

REQUIRED_FIELDS = (
    "interaction_id", "started_at", "ended_at", "policy_version", "customer_id", "intent",
    "initial_state", "user_scenario", "messages", "outcome", "actions_taken",
    "customer_sentiment_delta", "schema_version",
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
    if not isinstance(value, str):
        raise ContractError("wrong_type", f"{field} must be an RFC 3339 string, got {type(value).__name__}")
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


def _check_id(value: Any, field: str) -> None:
    _require_type(value, str, field)
    if ID_RE.fullmatch(value) is None:
        raise ContractError("bad_interaction_id", f"{field}={value[:140]!r} must be 1-128 of [A-Za-z0-9_.:-]")


def _tool_call(call: Any, field: str) -> dict:
    _require_type(call, dict, field)
    for key in ("name", "arguments"):
        if key not in call:
            raise ContractError("missing_field", f"{field}.{key} is missing")
    _require_type(call["name"], str, f"{field}.name")
    args = call["arguments"]
    if isinstance(args, str):  # OpenAI-style producers send arguments as JSON text
        try:
            args = json.loads(args)
        except json.JSONDecodeError as err:
            raise ContractError("wrong_type", f"{field}.arguments is not a JSON object: {err}") from err
    _require_type(args, dict, f"{field}.arguments")
    return {"name": call["name"], "arguments": args}


def _messages(value: Any) -> list[dict]:
    _require_type(value, list, "messages")
    if not value:
        raise ContractError("empty_messages", "messages must hold at least one message")
    out = []
    for i, msg in enumerate(value):
        where = f"messages[{i}]"
        _require_type(msg, dict, where)
        unknown = set(msg) - {"role", "content", "tool_calls", "name"}
        if unknown:
            raise ContractError("unknown_field", f"{where} has unknown keys {sorted(unknown)}")
        for key in ("role", "content"):
            if key not in msg:
                raise ContractError("missing_field", f"{where}.{key} is missing")
        role = msg["role"]
        _require_type(role, str, f"{where}.role")
        if role not in ROLES:
            raise ContractError("unknown_role", f"{where}.role={role!r} not in {sorted(ROLES)}")
        _require_type(msg["content"], str, f"{where}.content")
        clean: dict[str, Any] = {"role": role, "content": msg["content"]}
        calls = msg.get("tool_calls")
        if calls is not None:
            _require_type(calls, list, f"{where}.tool_calls")
            if calls and role != "assistant":
                raise ContractError("tool_calls_on_non_assistant", f"{where}.tool_calls on a {role!r} message")
            if calls:
                clean["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
        name = msg.get("name")
        if role == "tool":
            if name is None:
                raise ContractError("missing_field", f"{where}.name is required on tool messages")
            _require_type(name, str, f"{where}.name")
        if name is not None:
            _require_type(name, str, f"{where}.name")
            clean["name"] = name
        out.append(clean)
    return out


def _initial_state(value: Any, customer_id: str) -> dict:
    _require_type(value, dict, "initial_state")
    for key in ("users", "orders", "products"):
        if key not in value:
            raise ContractError("missing_field", f"initial_state.{key} is missing")
        _require_type(value[key], dict, f"initial_state.{key}")
    if customer_id not in value["users"]:
        raise ContractError("customer_not_in_state", f"customer_id={customer_id!r} not in initial_state.users")
    return value


def _user_scenario(value: Any) -> dict:
    _require_type(value, dict, "user_scenario")
    for key, kind in (("instruction", str), ("known_info", dict), ("persona", str)):
        if key not in value:
            raise ContractError("missing_field", f"user_scenario.{key} is missing")
        _require_type(value[key], kind, f"user_scenario.{key}")
    return value


def _gold(value: Any) -> dict | None:
    if value is None:
        return None
    _require_type(value, dict, "gold")
    for key in ("actions", "outputs"):
        if key not in value:
            raise ContractError("missing_field", f"gold.{key} is missing")
        _require_type(value[key], list, f"gold.{key}")
    actions = [_tool_call(a, f"gold.actions[{i}]") for i, a in enumerate(value["actions"])]
    for i, text in enumerate(value["outputs"]):
        _require_type(text, str, f"gold.outputs[{i}]")
    return {"actions": actions, "outputs": list(value["outputs"])}


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
        return _validate(obj, now or datetime.now(timezone.utc))
    except ContractError as err:
        err.record = obj
        raise


def _validate(obj: dict, now: datetime) -> dict:
    missing = [f for f in REQUIRED_FIELDS if f not in obj]
    if missing:
        raise ContractError("missing_field", f"missing field(s) {missing}")
    unknown = set(obj) - ALL_FIELDS
    if unknown:
        raise ContractError("unknown_field", f"unknown field(s) {sorted(unknown)}")
    version = obj["schema_version"]
    if isinstance(version, bool) or version != SCHEMA_VERSION:
        raise ContractError("unknown_schema_version", f"schema_version={version!r}, expected {SCHEMA_VERSION}")
    _check_id(obj["interaction_id"], "interaction_id")
    started = parse_timestamp(obj["started_at"], "started_at")
    ended = parse_timestamp(obj["ended_at"], "ended_at")
    if ended < started:
        raise ContractError("ended_before_started", f"ended_at={obj['ended_at']} < started_at={obj['started_at']}")
    if ended > now + FUTURE_TOLERANCE:
        raise ContractError("future_timestamp", f"ended_at={obj['ended_at']} is after now+5min ({now.isoformat()})")
    _require_type(obj["policy_version"], str, "policy_version")
    if not obj["policy_version"]:
        raise ContractError("wrong_type", "policy_version must be a non-empty string")
    _check_id(obj["customer_id"], "customer_id")
    _require_type(obj["intent"], str, "intent")
    if obj["intent"] not in INTENTS:
        raise ContractError("unknown_intent", f"intent={obj['intent']!r} not in the intent set")
    _require_type(obj["outcome"], str, "outcome")
    if obj["outcome"] not in OUTCOMES:
        raise ContractError("unknown_outcome", f"outcome={obj['outcome']!r} not in {sorted(OUTCOMES)}")
    escalation = obj.get("escalation_was_necessary")
    if escalation is not None:
        _require_type(escalation, bool, "escalation_was_necessary")
    _require_type(obj["actions_taken"], int, "actions_taken")
    if obj["actions_taken"] < 0:
        raise ContractError("negative_actions", f"actions_taken={obj['actions_taken']} < 0")
    sentiment = obj["customer_sentiment_delta"]
    _require_type(sentiment, (int, float), "customer_sentiment_delta")
    if not math.isfinite(sentiment) or not -1.0 <= sentiment <= 1.0:
        raise ContractError("sentiment_out_of_range", f"customer_sentiment_delta={sentiment} not in [-1, 1]")
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
        "customer_sentiment_delta": float(sentiment),  # 0 and 0.0 must hash alike
        "gold": _gold(obj.get("gold")),
        "human_label": _human_label(obj.get("human_label")),
        "schema_version": SCHEMA_VERSION,
    }
