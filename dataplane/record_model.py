"""The interaction record, schema_version 1, as pydantic v2 types (docs/ARCHITECTURE.md, "The interaction record").

The types are TypedDicts validated by one TypeAdapter built at import: validation runs in
pydantic-core and returns plain dicts, so no model object is built per record and dumped again.
Every check the types cannot say (a timestamp that must parse, a tool message that needs a name,
the cross-field rules) is a validator raising `PydanticCustomError` whose type is the quarantine
rule itself; `dataplane.contract` maps pydantic's built-in error types to rule names. The
validators also normalise: optional nullable fields filled with None, empty `tool_calls`
dropped, tool-call arguments given as JSON text decoded, extra keys of tool calls, gold and human
labels dropped, so the same interaction always hashes alike whatever producer wrote it.
`record_json_schema` publishes the same types as JSON Schema.
"""

import json
import re
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Annotated, Any, Literal, NotRequired

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, TypeAdapter, ValidationInfo, WithJsonSchema
from pydantic import with_config as _with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from dataplane.errors import ContractError
from dataplane.jsontext import decode_json
from dataplane.scrub import find_pii

SCHEMA_VERSION = 1
INTENT_NAMES = (
    "order_status",
    "cancel_order",
    "return_items",
    "exchange_items",
    "modify_order_items",
    "modify_order_address",
    "modify_order_payment",
    "modify_user_address",
    "other",
)
INTENTS = frozenset(INTENT_NAMES)
OUTCOMES = frozenset({"completed", "failed", "escalated"})
ROLES = frozenset({"system", "user", "assistant", "tool"})
FUTURE_TOLERANCE = timedelta(minutes=5)
MAX_INT64 = 2**63 - 1  # actions_taken is a BIGINT column

ID_PATTERN = r"[A-Za-z0-9_.:-]{1,128}"
ID_RE = re.compile(ID_PATTERN)
# RFC 3339 date-time with a mandatory offset; fromisoformat alone would accept dates, week
# dates and naive times.
RFC3339_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


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
        raise ContractError("bad_timestamp", f"{field}={value[:100]!r} is not RFC 3339 with an offset")
    frac = (match.group(7) or "")[:7]  # fromisoformat takes at most microseconds
    text = f"{value[:10]}T{value[11:19]}{frac}{match.group(8).upper().replace('Z', '+00:00')}"
    try:
        return datetime.fromisoformat(text)
    except ValueError as err:  # e.g. month 13, hour 25
        raise ContractError("bad_timestamp", f"{field}={value!r}: {err}") from err


def _path(info: ValidationInfo) -> str:
    return info.field_name or "value"


def _custom(err: ContractError) -> PydanticCustomError:
    # The detail is passed as context, not as the template: a detail holding "{...}" (JSON)
    # must not be read as a placeholder.
    return PydanticCustomError(err.rule, "{detail}", {"detail": err.detail})


def _timestamp(value: str, info: ValidationInfo) -> str:
    try:
        parse_timestamp(value, _path(info))
    except ContractError as err:
        raise _custom(err) from None
    return value


# What any PII pattern needs within an identifier's characters ([A-Za-z0-9_.:-], no space, '+' or
# parentheses): 13 contiguous digits (a card), three digits then '.' or '-' and a digit (grouped
# cards, national ids, phone numbers) or a UK National Insurance shape. Ids without one skip
# `find_pii`, which would cost more than the rest of an id's validation.
_ID_MAY_HOLD_PII = re.compile(r"\d{13}|\d{3}[.-]\d|[A-Z]{2}\d{6}")


def _identifier(value: str, info: ValidationInfo) -> str:
    # An id is a key (of the store, of initial_state.users): it cannot be masked like free text,
    # so one that reads as PII is refused instead of stored.
    kinds = find_pii(value) if _ID_MAY_HOLD_PII.search(value) else None
    if kinds:
        raise PydanticCustomError("pii_in_id", "{field} reads as PII ({kinds})", {"field": _path(info), "kinds": kinds})
    return value


def _arguments(value: Any) -> Any:
    if isinstance(value, str):  # OpenAI-style producers send arguments as JSON text
        try:
            return decode_json(value, "arguments")
        except ContractError as err:
            if err.rule == "invalid_json":  # the rule this has always had: not a JSON object
                raise PydanticCustomError(
                    "wrong_type", "arguments is not a JSON object: {e}", {"e": err.detail}
                ) from None
            raise _custom(err) from None
    return value


def _version(value: Any) -> int:
    # JSON has one number type: 1.0 is version 1 too, but true is not.
    if isinstance(value, bool) or value != SCHEMA_VERSION:
        raise PydanticCustomError(
            "unknown_schema_version",
            "schema_version={value}, expected {expected}",
            {"value": repr(value)[:50], "expected": SCHEMA_VERSION},
        )
    return SCHEMA_VERSION


Timestamp = Annotated[
    str,
    AfterValidator(_timestamp),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": f"^{RFC3339_RE.pattern}$"}),
]
Identifier = Annotated[str, Field(pattern=f"^{ID_PATTERN}$"), AfterValidator(_identifier)]
_STRICT = ConfigDict(strict=True, extra="forbid")
_OPEN = ConfigDict(strict=True, extra="allow")  # free-form objects: extra keys kept as given
_TRIM = ConfigDict(strict=True, extra="ignore")  # extra keys dropped by normalisation


@_with_config(_TRIM)
class ToolCall(TypedDict):
    name: str
    arguments: Annotated[dict[str, Any], BeforeValidator(_arguments)]


@_with_config(_STRICT)
class Message(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: NotRequired[list[ToolCall] | None]
    name: NotRequired[str | None]


def _message(msg: dict) -> dict:
    role = msg["role"]
    clean: dict[str, Any] = {"role": role, "content": msg["content"]}
    calls = msg.get("tool_calls")
    if calls:
        if role != "assistant":
            raise PydanticCustomError("tool_calls_on_non_assistant", "tool_calls on a {role!r} message", {"role": role})
        clean["tool_calls"] = calls
    name = msg.get("name")
    if name is None:
        if role == "tool":
            raise PydanticCustomError("missing_field", "name is required on tool messages")
    else:
        clean["name"] = name
    return clean


@_with_config(_OPEN)
class InitialState(TypedDict):
    users: dict[str, Any]
    orders: dict[str, Any]
    products: dict[str, Any]


@_with_config(_OPEN)
class UserScenario(TypedDict):
    instruction: str
    known_info: dict[str, Any]
    persona: str


@_with_config(_TRIM)
class Gold(TypedDict):
    actions: list[ToolCall]
    outputs: list[str]


@_with_config(_TRIM)
class HumanLabel(TypedDict):
    task_success: bool
    rater: str
    labeled_at: Timestamp


@_with_config(ConfigDict(strict=True, extra="forbid", title="InteractionRecord"))
class InteractionRecord(TypedDict):
    """One customer-service conversation, as a producer lands it (schema_version 1)."""

    schema_version: Annotated[Any, AfterValidator(_version), WithJsonSchema({"const": SCHEMA_VERSION})]
    interaction_id: Identifier
    started_at: Timestamp
    ended_at: Timestamp
    policy_version: Annotated[str, Field(min_length=1)]
    customer_id: Identifier
    intent: Literal[INTENT_NAMES]  # type: ignore[valid-type]
    outcome: Literal["completed", "failed", "escalated"]
    escalation_was_necessary: NotRequired[bool | None]
    actions_taken: Annotated[int, Field(ge=0, le=MAX_INT64)]
    customer_sentiment_delta: Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)]
    initial_state: InitialState
    user_scenario: UserScenario
    messages: Annotated[list[Annotated[Message, AfterValidator(_message)]], Field(min_length=1)]
    gold: NotRequired[Gold | None]
    human_label: NotRequired[HumanLabel | None]


def _record(obj: dict, info: ValidationInfo) -> dict:
    """The cross-field rules, then the normalised record in its canonical key order."""
    now: datetime = info.context["now"]
    started = parse_timestamp(obj["started_at"], "started_at")
    ended = parse_timestamp(obj["ended_at"], "ended_at")
    if ended < started:
        raise PydanticCustomError(
            "ended_before_started", "ended_at={e} < started_at={s}", {"e": obj["ended_at"], "s": obj["started_at"]}
        )
    if ended > now + FUTURE_TOLERANCE:
        raise PydanticCustomError(
            "future_timestamp", "ended_at={e} is after now+5min ({now})", {"e": obj["ended_at"], "now": now.isoformat()}
        )
    if obj["customer_id"] not in obj["initial_state"]["users"]:
        raise PydanticCustomError(
            "customer_not_in_state", "customer_id={c!r} not in initial_state.users", {"c": obj["customer_id"]}
        )
    return {
        "interaction_id": obj["interaction_id"],
        "started_at": obj["started_at"],
        "ended_at": obj["ended_at"],
        "policy_version": obj["policy_version"],
        "customer_id": obj["customer_id"],
        "intent": obj["intent"],
        "initial_state": obj["initial_state"],
        "user_scenario": obj["user_scenario"],
        "messages": obj["messages"],
        "outcome": obj["outcome"],
        "escalation_was_necessary": obj.get("escalation_was_necessary"),
        "actions_taken": obj["actions_taken"],
        "customer_sentiment_delta": obj["customer_sentiment_delta"],  # a float: 0 and 0.0 hash alike
        "gold": obj.get("gold"),
        "human_label": obj.get("human_label"),
        "schema_version": SCHEMA_VERSION,
    }


RECORD_ADAPTER: TypeAdapter[dict] = TypeAdapter(Annotated[InteractionRecord, AfterValidator(_record)])
REQUIRED_FIELDS = tuple(k for k in InteractionRecord.__annotations__ if k in InteractionRecord.__required_keys__)
NULLABLE_FIELDS = tuple(k for k in InteractionRecord.__annotations__ if k in InteractionRecord.__optional_keys__)
ALL_FIELDS = frozenset(REQUIRED_FIELDS + NULLABLE_FIELDS)


def record_schema_text() -> str:
    """`record_json_schema` as the text `retrain schema` prints and docs/record.schema.json holds."""
    return json.dumps(record_json_schema(), indent=2, sort_keys=True) + "\n"


def record_json_schema() -> dict:
    """The record contract as JSON Schema (draft 2020-12), as pydantic generates it from the types."""
    schema = RECORD_ADAPTER.json_schema(mode="validation")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"agent-retrain/interaction-record/v{SCHEMA_VERSION}",
        **schema,
    }
