"""The interaction record, schema_version 1, as pydantic v2 types (docs/ARCHITECTURE.md, "The interaction record").

The types are TypedDicts validated by one TypeAdapter built at import: validation runs in
pydantic-core and returns plain dicts, so no model object is built per record and dumped again.
Every check the types cannot say (a timestamp that must be a real instant, a tool message that
needs a name, an id that reads as PII, the cross-field rules) sits in one record-level validator,
`_record`, raising `PydanticCustomError` whose type is the quarantine rule itself;
`dataplane.contract` maps pydantic's built-in error types to rule names. The validators also
normalise: optional nullable fields filled with None, empty `tool_calls`
dropped, tool-call arguments given as JSON text decoded, extra keys of tool calls, gold and human
labels dropped, so the same interaction always hashes alike whatever producer wrote it.
The domain rules (the intent set, `initial_state`'s model, the customer table) come from the
record's domain (`dataplane.domain_rules`); `dataplane.record_schema` publishes the types as JSON
Schema, per domain.
"""

import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal, NotRequired

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    InstanceOf,
    TypeAdapter,
    ValidationInfo,
    WithJsonSchema,
)
from pydantic import with_config as _with_config
from pydantic_core import PydanticCustomError
from typing_extensions import TypedDict  # pydantic needs this one before Python 3.12

from dataplane.domain_rules import DEFAULT_DOMAIN, DomainLookup, DomainRules
from dataplane.errors import ContractError
from dataplane.jsontext import decode_json
from dataplane.scrub import find_pii
from dataplane.timestamps import RFC3339_RE, valid_instant
from domains.api import ToolKind

SCHEMA_VERSION = 1
OUTCOMES = frozenset({"completed", "failed", "escalated"})
ROLES = frozenset({"system", "user", "assistant", "tool"})
FUTURE_TOLERANCE = timedelta(minutes=5)
MAX_INT64 = 2**63 - 1  # actions_taken is a BIGINT column

ID_PATTERN = r"[A-Za-z0-9_.:-]{1,128}"
ID_RE = re.compile(ID_PATTERN)


def _custom(err: ContractError) -> PydanticCustomError:
    # The detail is passed as context, not as the template: a detail holding "{...}" (JSON)
    # must not be read as a placeholder.
    return PydanticCustomError(err.rule, "{detail}", {"detail": err.detail})


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


# The shapes are checked in pydantic-core; whether a timestamp is a real instant (no month 13)
# and whether an id reads as PII are checked in `_record`, with the other rules that need Python:
# each call from pydantic-core into a Python validator costs about as much as the check itself.
TIMESTAMP_FIELDS = frozenset({"started_at", "ended_at", "labeled_at"})
Timestamp = Annotated[str, Field(pattern=f"^{RFC3339_RE.pattern}$", json_schema_extra={"format": "date-time"})]
Identifier = Annotated[str, Field(pattern=f"^{ID_PATTERN}$")]
# A free-form JSON object: checked to be an object, passed through as is (not copied key by key,
# which would cost more than the rest of a record's validation; its keys are strings, as every
# JSON and Parquet object's are).
JsonObject = Annotated[InstanceOf[dict], WithJsonSchema({"type": "object"})]
_STRICT = ConfigDict(strict=True, extra="forbid")
_OPEN = ConfigDict(strict=True, extra="allow")  # free-form objects: extra keys kept as given
_TRIM = ConfigDict(strict=True, extra="ignore")  # extra keys dropped by normalisation


@_with_config(_TRIM)
class ToolCall(TypedDict):
    name: str
    arguments: Annotated[JsonObject, BeforeValidator(_arguments)]


@_with_config(_STRICT)
class Message(TypedDict):
    role: Literal["system", "user", "assistant", "tool"]
    content: str
    tool_calls: NotRequired[list[ToolCall] | None]
    name: NotRequired[str | None]


@_with_config(_OPEN)
class UserScenario(TypedDict):
    instruction: str
    known_info: JsonObject
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


@_with_config(_STRICT)
class Handoff(TypedDict):
    """Who finished a conversation the agent handed over: `messages[at_message:]` are the person's
    (`by`), and `outcome` is how the person's part ended (checked against gold where it exists).
    The record's own `outcome` stays the agent's."""

    at_message: Annotated[int, Field(ge=1)]
    by: Identifier
    outcome: Literal["completed", "failed"]


@_with_config(ConfigDict(strict=True, extra="forbid", title="InteractionRecord"))
class InteractionRecord(TypedDict):
    """One customer-service conversation, as a producer lands it (schema_version 1)."""

    schema_version: Annotated[Any, AfterValidator(_version), WithJsonSchema({"const": SCHEMA_VERSION})]
    interaction_id: Identifier
    started_at: Timestamp
    ended_at: Timestamp
    policy_version: Annotated[str, Field(min_length=1)]
    customer_id: Identifier
    # Absent means the retail domain, so logs written before domains still ingest.
    domain: NotRequired[Annotated[str, Field(min_length=1)]]
    intent: str  # one of the domain's intents: checked in `_record`, the set depends on `domain`
    outcome: Literal["completed", "failed", "escalated"]
    escalation_was_necessary: NotRequired[bool | None]
    actions_taken: Annotated[int, Field(ge=0, le=MAX_INT64)]
    customer_sentiment_delta: Annotated[float, Field(ge=-1.0, le=1.0, allow_inf_nan=False)]
    initial_state: JsonObject  # checked by the domain's own model in `_record`
    user_scenario: UserScenario
    messages: Annotated[list[Message], Field(min_length=1)]
    gold: NotRequired[Gold | None]
    human_label: NotRequired[HumanLabel | None]
    # Absent (or null) when no person took over: records from before it hash as they did.
    handoff: NotRequired[Handoff | None]


def _message(msg: dict, i: int) -> dict:
    """Message `i` normalised (empty tool_calls and a null name dropped), or its rule broken."""
    role = msg["role"]
    calls = msg.get("tool_calls")
    if calls and role != "assistant":
        raise _rule("tool_calls_on_non_assistant", f"messages[{i}].tool_calls on a {role!r} message")
    name = msg.get("name")
    if name is None and role == "tool":
        raise _rule("missing_field", f"messages[{i}].name is required on tool messages")
    if ("tool_calls" in msg and not calls) or ("name" in msg and name is None):
        clean: dict[str, Any] = {"role": role, "content": msg["content"]}
        if calls:
            clean["tool_calls"] = calls
        if name is not None:
            clean["name"] = name
        return clean
    return msg


# An identifier's shape (its pattern allows only [A-Za-z0-9_.:-]): digits "d", '.' and '-' "s",
# capitals "L", the rest "_". Within those characters a PII pattern needs 13 digits in a row, three
# digits, a separator and a digit (grouped card, national id, phone), a UK id's two capitals and
# six digits, or an IBAN's two letters and two digits at the start of 15 or more letters and
# digits; a bare run of digits (an SSN, a national phone number) or one in groups of two is read
# as PII only at the start or after ':' (after a letter, digit, '_', '.' or '-' it is part of an
# identifier). An id with none of them skips `find_pii`, which costs more than the id's other
# checks together.
# A bytes table: an id that passed its pattern is ASCII, and `bytes.translate` is a plain C loop
# where `str.translate` looks every character up in a dict (several times slower on a 14-character
# id; ingestion shapes two ids per record).
_ID_SHAPE = (
    bytes(
        ord("d") if chr(c).isdigit() else ord("s") if chr(c) in ".-" else ord("L") if chr(c).isupper() else ord("_")
        for c in range(128)
    )
    + b"_" * 128
)
_ID_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Za-z]{2}[0-9]{2}[A-Za-z0-9]{11}")


def _id_may_hold_pii(value: str) -> bool:
    if value[:1].isdigit() or ":" in value:
        return True
    if not value.isascii():  # not an id that passed its pattern: let the full scan judge it
        return True
    shape = value.encode().translate(_ID_SHAPE)
    if b"d" * 13 in shape or b"dddsd" in shape or b"LLdddddd" in shape:
        return True
    return len(value) >= 15 and _ID_IBAN.search(value) is not None


def _rule(rule: str, detail: str) -> PydanticCustomError:
    return PydanticCustomError(rule, "{detail}", {"detail": detail})


def _instant(value: str, field: str) -> datetime:
    try:
        return valid_instant(value, field)
    except ContractError as err:
        raise _custom(err) from None


def _domain_rules(obj: dict, context: dict) -> DomainRules:
    """The record's domain, once the rules it alone decides hold: the intent and initial_state."""
    try:
        rules = context["domains"](obj.get("domain", DEFAULT_DOMAIN))
    except ContractError as err:
        raise _custom(err) from None
    intent = obj["intent"]
    if intent not in rules.intents:
        raise _rule("unknown_intent", f"intent={intent[:100]!r} not in the {rules.name} intent set")
    try:
        # A check only: the state is stored as given, so a record hashes alike whatever the
        # domain's model would normalise.
        rules.validate_state(obj["initial_state"])
    except (ValueError, TypeError, LookupError, AttributeError) as err:  # a domain's model, any rule it names
        raise _rule("bad_initial_state", f"initial_state: {str(err)[:300]}") from None
    return rules


def _record(obj: dict, info: ValidationInfo) -> dict:
    """The rules that need Python, in the order they are reported, then the normalised record.

    Runs once per record after pydantic-core has checked every field's type and shape. The
    domain's intent and state rules come first, as the intent's did when pydantic-core checked it.
    """
    context = info.context
    rules = _domain_rules(obj, context)
    for field in ("interaction_id", "customer_id"):
        # An id is a key (of the store, of the customer table): it cannot be masked like free
        # text, so one that reads as PII is refused instead of stored.
        value = obj[field]
        if _id_may_hold_pii(value) and (kinds := find_pii(value)):
            raise _rule("pii_in_id", f"{field} reads as PII ({kinds})")
    started = _instant(obj["started_at"], "started_at")
    ended = _instant(obj["ended_at"], "ended_at")
    if ended < started:
        raise _rule("ended_before_started", f"ended_at={obj['ended_at']} < started_at={obj['started_at']}")
    now: datetime = context["now"]
    if ended > now + FUTURE_TOLERANCE:
        raise _rule("future_timestamp", f"ended_at={obj['ended_at']} is after now+5min ({now.isoformat()})")
    # A rebuilt state (an OpenAI-shape log, dataplane.openai_chat) holds only what the log showed:
    # its customer record may be missing, and the record is then stored as not replayable.
    if not context["rebuilt"]:
        customers = obj["initial_state"].get(rules.customer_table)
        # The exact-type test first: decoded JSON is a dict, and an ABC isinstance costs more.
        if (type(customers) is not dict and not isinstance(customers, Mapping)) or obj["customer_id"] not in customers:
            raise _rule(
                "customer_not_in_state",
                f"customer_id={obj['customer_id']!r} not in initial_state.{rules.customer_table}",
            )
    # A message of role and content alone breaks no rule of `_message` unless it is a tool's (which
    # needs a name) and comes back as it is: most messages are, and skip the call.
    obj["messages"] = [
        msg if len(msg) == 2 and msg["role"] != "tool" else _message(msg, i) for i, msg in enumerate(obj["messages"])
    ]
    label = obj.get("human_label")
    if label is not None:
        _instant(label["labeled_at"], "human_label.labeled_at")
    # The normalised record is pydantic-core's own output dict, completed in place: it is a new
    # dict per validation, holding only the contract's keys (extra keys are refused), so filling
    # the optional fields costs a few stores where building a copy cost a lookup and a store per
    # field. Key order is not part of the record (its stored text sorts keys).
    record = obj
    if "escalation_was_necessary" not in record:
        record["escalation_was_necessary"] = None
    if "gold" not in record:
        record["gold"] = None
    if "human_label" not in record:
        record["human_label"] = None
    record["schema_version"] = SCHEMA_VERSION
    record["domain"] = rules.name  # always present once normalised; the store leaves the default out of its text
    handoff = record.pop("handoff", None)
    if handoff is not None:
        _check_handoff(handoff, record, rules)
        record["handoff"] = handoff
    flag = record["escalation_was_necessary"]
    if flag is not None and record["outcome"] != "escalated":
        # The README's rule, also the window suite's `escalation_consistent_with_outcome`: checked
        # here so one such record is quarantined with its reason instead of failing every window
        # that holds it.
        raise _rule(
            "escalation_flag_without_escalation",
            f"escalation_was_necessary={flag} with outcome={record['outcome']!r}: it is set only on escalated "
            "conversations, null otherwise",
        )
    return record


def _check_handoff(handoff: dict, obj: dict, rules: DomainRules) -> None:
    """A person's part must follow the agent's hand-over, and the record's outcome stay the agent's."""
    at, messages = handoff["at_message"], obj["messages"]
    if at >= len(messages):
        raise _rule("bad_handoff", f"handoff.at_message={at} but the record has {len(messages)} messages")
    if obj["outcome"] != "escalated":
        raise _rule("bad_handoff", f"outcome={obj['outcome']!r}: a record a person took over is the agent's escalation")
    handed = any(
        rules.kind(str(call.get("name"))) == ToolKind.HAND_OVER
        for message in messages[:at]
        if message["role"] == "assistant"
        for call in message.get("tool_calls") or ()
    )
    if not handed:
        raise _rule("bad_handoff", f"no {rules.name} hand-over call among messages[:{at}], the agent's part")
    if _id_may_hold_pii(handoff["by"]) and (kinds := find_pii(handoff["by"])):
        raise _rule("pii_in_id", f"handoff.by reads as PII ({kinds})")


RECORD_ADAPTER: TypeAdapter[dict] = TypeAdapter(Annotated[InteractionRecord, AfterValidator(_record)])
REQUIRED_FIELDS = tuple(k for k in InteractionRecord.__annotations__ if k in InteractionRecord.__required_keys__)
NULLABLE_FIELDS = tuple(
    k for k in InteractionRecord.__annotations__ if k in InteractionRecord.__optional_keys__ and k != "domain"
)
ALL_FIELDS = frozenset((*REQUIRED_FIELDS, *NULLABLE_FIELDS, "domain"))


def validation_context(now: datetime, domains: DomainLookup | None = None, rebuilt: bool = False) -> dict:
    """The context `RECORD_ADAPTER` validates with: `now` anchors the future-timestamp rule,
    `domains` resolves domain names (one lookup per ingest pass), `rebuilt` marks a state rebuilt
    from a log."""
    return {"now": now, "domains": domains or DomainLookup(), "rebuilt": rebuilt}
