"""The interaction record contract, schema_version 1: `validate_record` and the quarantine rule names.

The contract itself is the pydantic model in `dataplane.record_model` (published as JSON Schema by
`retrain schema`). `validate_record` runs it and returns the normalised record; on a violation it
raises `ContractError` whose `.rule` is a stable snake_case name and whose detail names the field.
`_rule` below is the one place pydantic's error types become those rule names. The rules that
depend on the record's domain (`unknown_domain`, `unknown_intent`, `bad_initial_state`,
`customer_not_in_state`, `bad_handoff`) read the domain through `dataplane.domain_rules`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from pydantic import ValidationError

from dataplane.domain_rules import DomainLookup
from dataplane.errors import ContractError
from dataplane.record_model import (
    ALL_FIELDS,
    FUTURE_TOLERANCE,
    ID_RE,
    NULLABLE_FIELDS,
    OUTCOMES,
    RECORD_ADAPTER,
    REQUIRED_FIELDS,
    ROLES,
    SCHEMA_VERSION,
    TIMESTAMP_FIELDS,
    validation_context,
)
from dataplane.timestamps import RFC3339_RE, parse_timestamp

__all__ = [
    "ALL_FIELDS",
    "FUTURE_TOLERANCE",
    "ID_RE",
    "NULLABLE_FIELDS",
    "OUTCOMES",
    "REQUIRED_FIELDS",
    "RFC3339_RE",
    "ROLES",
    "SCHEMA_VERSION",
    "ContractError",
    "parse_timestamp",
    "validate_record",
]


def validate_record(
    obj: Any, now: datetime | None = None, domains: DomainLookup | None = None, rebuilt: bool = False
) -> dict:
    """Check `obj` against schema_version 1 and return the normalised record (carrying `domain`).

    `now` (aware datetime, default the current UTC time) anchors the future-timestamp rule so
    tests and backfills are deterministic. `domains` resolves the record's domain (pass one
    `DomainLookup` for a whole ingest pass: it remembers what it looked up). `rebuilt` marks an
    initial_state rebuilt from a log, whose customer record may be missing
    (`dataplane.openai_chat`). Raises ContractError naming the first violation.
    """
    try:
        return _VALIDATE(obj, context=_context(now, domains, rebuilt))
    except ValidationError as err:
        rule, detail = _first_violation(err.errors(include_url=False))
        raise ContractError(rule, detail, obj) from None


# `TypeAdapter.validate_python` only checks its by_alias/by_name arguments and forwards to the
# core validator: ingestion validates every record, so it calls the validator itself.
_VALIDATE = RECORD_ADAPTER.validator.validate_python
# The last context built, by the identity of what it was built from: an ingest pass validates
# every record with the same `now` and `DomainLookup`. (The validators only read the context.)
_LAST_CONTEXT: tuple[object, object, bool, dict] = (None, None, False, {})


def _context(now: datetime | None, domains: DomainLookup | None, rebuilt: bool) -> dict:
    global _LAST_CONTEXT
    last_now, last_domains, last_rebuilt, context = _LAST_CONTEXT
    if now is None or domains is None or now is not last_now or domains is not last_domains or rebuilt != last_rebuilt:
        context = validation_context(now or datetime.now(UTC), domains, rebuilt)
        if now is not None and domains is not None:
            _LAST_CONTEXT = (now, domains, rebuilt, context)
    return context


# Python type names for pydantic's "wrong type" errors, as the details have always said them.
_EXPECTED = {
    "string_type": "str",
    "int_type": "int",
    "bool_type": "bool",
    "float_type": "int|float",
    "dict_type": "dict",
    "list_type": "list",
}
_ENUM_RULES = {"role": "unknown_role", "outcome": "unknown_outcome"}


def _first_violation(errors: list[dict]) -> tuple[str, str]:
    """The rule and detail to report: missing fields first, then unknown ones, then the first error.

    Pydantic reports errors in field order, which is the order the contract's rules have always
    been reported in.
    """
    missing = [e["loc"][0] for e in errors if e["type"] == "missing" and len(e["loc"]) == 1]
    if missing:
        return "missing_field", f"missing field(s) {[f for f in REQUIRED_FIELDS if f in missing]}"
    extra = [e["loc"][0] for e in errors if e["type"] == "extra_forbidden" and len(e["loc"]) == 1]
    if extra:
        return "unknown_field", f"unknown field(s) {sorted(map(str, extra))}"
    first = errors[0]
    if first["loc"][:1] == ("handoff",):
        # Any shape error of the person's part is one rule, whatever pydantic called it.
        return "bad_handoff", f"{_dotted(first['loc'])}: {first['msg']}"
    if first["type"] == "extra_forbidden":
        parent = first["loc"][:-1]
        keys = sorted(str(e["loc"][-1]) for e in errors if e["type"] == "extra_forbidden" and e["loc"][:-1] == parent)
        return "unknown_field", f"{_dotted(parent)} has unknown keys {keys}"
    return _rule(first)


def _rule(error: dict) -> tuple[str, str]:
    """Pydantic error -> (rule, detail): the one mapping from pydantic's error types to rule names."""
    kind, loc, value = error["type"], error["loc"], error.get("input")
    where = _dotted(loc)
    field = str(loc[-1]) if loc else ""
    shown = repr(value)[:100]
    if kind == "missing":
        return "missing_field", f"{where} is missing"
    if not loc and kind == "dict_type":
        return "wrong_type", f"record must be a JSON object, got {type(value).__name__}"
    if field == "customer_sentiment_delta" and (
        kind in ("greater_than_equal", "less_than_equal", "finite_number")
        or (kind == "float_type" and type(value) is int)  # an int too large for a float
    ):
        return "sentiment_out_of_range", f"customer_sentiment_delta={shown} not in [-1, 1]"
    if field == "actions_taken" and kind == "greater_than_equal":
        return "negative_actions", f"actions_taken={shown} < 0"
    if field == "actions_taken" and kind == "less_than_equal":
        return "number_too_large", f"actions_taken={shown} does not fit a 64-bit integer"
    if kind == "string_unicode":  # a lone surrogate: the same rule as at storing time
        return "invalid_unicode", f"{where} holds text UTF-8 cannot encode"
    if kind in _EXPECTED:
        return "wrong_type", f"{where} must be {_EXPECTED[kind]}, got {type(value).__name__}"
    if kind == "is_instance_of":  # the free-form JSON objects
        return "wrong_type", f"{where} must be dict, got {type(value).__name__}"
    if kind == "literal_error":
        if not isinstance(value, str):
            return "wrong_type", f"{where} must be str, got {type(value).__name__}"
        allowed = sorted(OUTCOMES if field == "outcome" else ROLES)
        return _ENUM_RULES[field], f"{where}={shown} not in {allowed}"
    if kind == "string_pattern_mismatch" and field in TIMESTAMP_FIELDS:
        return "bad_timestamp", f"{where}={repr(value)[:100]} is not RFC 3339 with an offset"
    if kind == "string_pattern_mismatch":  # the other patterned fields are the identifiers
        return "bad_interaction_id", f"{where}={repr(value)[:140]} must be 1-128 of [A-Za-z0-9_.:-]"
    if kind == "too_short":
        if field == "messages":
            return "empty_messages", "messages must hold at least one message"
        return "wrong_type", f"{where} must be a non-empty string"
    message = error["msg"]
    if loc and message.startswith(f"{field}"):  # a custom rule whose detail already names the field
        return kind, f"{_dotted(loc[:-1])}.{message}" if len(loc) > 1 else message
    # Custom rules pass through under their own names; any other pydantic type does too, so an
    # unforeseen violation is still quarantined under a stable name rather than mislabelled.
    return kind, f"{where}: {message}" if where else message


def _dotted(loc: tuple) -> str:
    """('messages', 1, 'tool_calls', 0, 'name') -> 'messages[1].tool_calls[0].name'."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
