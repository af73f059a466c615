"""Conversations logged in the OpenAI chat-completions shape, mapped onto the interaction record.

One conversation a line (`retrain ingest --format openai`, or a `*.openai.jsonl` landing file):
`{"id", "domain" (default retail), "created_at", "ended_at" (RFC 3339), "model", "user" (the
customer id), "messages"}`, the messages as the chat API takes them: assistant `tool_calls` of
`{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}`, tool messages
with `tool_call_id`. The mapped record then goes through the same contract, scrub, dedup and
store as a native one; what the log cannot say is derived through the domain, as follows.

- Tool results are paired with their calls by id; a tool message gets its call's name, and a run
  of tool messages is put in its calls' order (a native transcript pairs them by position). A tool
  message answering no earlier call quarantines the line (`unknown_tool_call_id`), as does a
  second answer (`tool_call_answered_twice`), a repeated call id (`duplicate_tool_call_id`) and
  arguments that are not a JSON object (`bad_tool_arguments`, naming the call). A call never
  answered is kept: a conversation cut off (a transfer, a crash) is traffic the live watch must
  see; that call counts as not succeeded, and its conversation is not replayable.
- `intent`: `domain.classify_intent(messages)`. `actions_taken`: the tool calls except think and
  hand-over kinds. `outcome`, an unverified heuristic over tool kinds: a hand-over call that did
  not fail (or was never answered: the transfer ended the log) -> `escalated`; otherwise
  `completed` when some write call's result does not start with "Error", or when no write was
  tried, no call failed and an assistant reply ends the log (a question answered from reads);
  else `failed`.
  `escalation_was_necessary` and `gold` stay null: nothing here verified the outcome, so these
  conversations never become training tasks.
- `initial_state`: rebuilt from what read tools returned before any write succeeded (a later read
  shows the state after the write): a read tool whose `RecordRef` is (argument, table) and whose
  result parses as a JSON object gives `initial_state[table][arguments[argument]]`. A state the
  domain's model refuses is dropped for empty tables.
- `replayable`: the rebuilt state holds the customer record and every record the write calls
  name, every write was answered, and replaying the calls through the domain's world from that
  state fails and succeeds where the log did. Conversations that are not replayable are stored
  all the same (`interactions.replayable` false: the live watch, review and window statistics
  read them); calibration and shadow sets, which replay, never draw them.
- `user_scenario`: `instruction` = the customer's turns, `known_info` = what the customer gave
  the identify calls, `persona` = "unknown". `policy_version` = `model`; sentiment 0.0.
- The customer is `user`, or when absent, what the last successful identify call returned.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dataplane.contract import validate_record
from dataplane.domain_rules import DEFAULT_DOMAIN, DomainLookup, DomainRules
from dataplane.errors import ContractError
from dataplane.jsontext import decode_json
from dataplane.timestamps import parse_timestamp
from domains.api import ToolKind

FIELDS = ("id", "domain", "created_at", "ended_at", "model", "user", "messages")
REQUIRED = ("id", "created_at", "ended_at", "model", "messages")
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}
NOT_ACTIONS = frozenset({ToolKind.THINK, ToolKind.HAND_OVER})
# Native field -> the OpenAI field it came from, for details that name a native field.
_RENAMED = {"interaction_id": "id", "started_at": "created_at", "customer_id": "user", "policy_version": "model"}


@dataclass
class Call:
    """One tool call of the conversation and, once its tool message is read, its result."""

    id: str
    name: str
    arguments: dict[str, Any]
    number: int  # the call's place in the conversation, from 0
    result: str | None = None

    @property
    def failed(self) -> bool:
        return self.result is None or self.result.lstrip().startswith("Error")


def openai_record(obj: Any, now: datetime | None = None, domains: DomainLookup | None = None) -> tuple[dict, bool]:
    """(the validated, normalised native record, whether it is replayable) for one conversation.

    Raises ContractError naming the rule and the message or call at fault.
    """
    if type(obj) is not dict:
        raise ContractError("wrong_type", f"a conversation must be a JSON object, got {type(obj).__name__}")
    if unknown := sorted(set(obj) - set(FIELDS)):
        raise ContractError(
            "unknown_field", f"unknown field(s) {unknown[:10]}; an OpenAI-shape line has {list(FIELDS)}"
        )
    if missing := [f for f in REQUIRED if f not in obj]:
        raise ContractError("missing_field", f"missing field(s) {missing}")
    name = obj.get("domain", DEFAULT_DOMAIN)
    if not isinstance(name, str):
        raise ContractError("wrong_type", f"domain must be str, got {type(name).__name__}")
    lookup = domains or DomainLookup()
    rules = lookup(name)
    for field in ("created_at", "ended_at"):  # checked here to name the producer's own field
        parse_timestamp(obj[field], field)
    messages, calls = _messages(obj["messages"], rules)
    customer = obj["user"] if "user" in obj else _identified(calls, rules)
    state = _rebuilt_state(rules, calls)
    replayable = _replayable(rules, state, calls, customer)
    record = {
        "interaction_id": obj["id"],
        "started_at": obj["created_at"],
        "ended_at": obj["ended_at"],
        "policy_version": obj["model"],
        "customer_id": customer,
        "domain": name,
        "intent": rules.domain.classify_intent(messages),
        "initial_state": state,
        "user_scenario": _scenario(messages, calls, rules),
        "messages": messages,
        "outcome": _outcome(calls, messages, rules),
        "escalation_was_necessary": None,
        "actions_taken": sum(rules.kind(c.name) not in NOT_ACTIONS for c in calls),
        "customer_sentiment_delta": 0.0,
        "gold": None,
        "human_label": None,
        "schema_version": 1,
    }
    try:
        return validate_record(record, now, lookup, rebuilt=True), replayable
    except ContractError as err:
        renamed = [f"{native}={openai}" for native, openai in _RENAMED.items() if native in err.detail]
        note = f" (OpenAI shape: {', '.join(renamed)})" if renamed else ""
        raise ContractError(err.rule, err.detail + note) from None


def _content(value: Any, where: str) -> str:
    """A message's content as text: a string, null (an assistant turn of tool calls only) or the
    chat API's list of parts, whose text parts are joined."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, list):
        texts = []
        for part in value:
            if type(part) is not dict:
                raise ContractError("wrong_type", f"{where}.content parts must be objects")
            text = part.get("text")
            if isinstance(text, str):
                texts.append(text)
        return "\n".join(texts)
    raise ContractError("wrong_type", f"{where}.content must be a string, null or a list of parts")


def _messages(raw: Any, rules: DomainRules) -> tuple[list[dict], list[Call]]:
    """The native messages and the tool calls in call order, each paired with its result."""
    if not isinstance(raw, list):
        raise ContractError("wrong_type", f"messages must be a list, got {type(raw).__name__}")
    native: list[dict] = []
    calls: dict[str, Call] = {}  # by id, in call order
    answers: dict[int, int] = {}  # position in `native` of a tool message -> its call's number
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if type(message) is not dict:
            raise ContractError("wrong_type", f"{where} must be an object")
        given = message.get("role")
        role = ROLES.get(given) if isinstance(given, str) else None
        if role is None:
            raise ContractError("unknown_role", f"{where}.role={repr(given)[:50]} not in {list(ROLES)}")
        if "function_call" in message:
            raise ContractError(
                "unknown_field", f"{where}.function_call: the legacy shape has no call id; log tool_calls"
            )
        content = _content(message.get("content"), where)
        out: dict[str, Any] = {"role": role, "content": content}
        if role == "assistant" and message.get("tool_calls"):
            out["tool_calls"] = []
            for j, raw_call in enumerate(_list(message["tool_calls"], f"{where}.tool_calls")):
                call = _call(raw_call, f"{where}.tool_calls[{j}]", len(calls))
                if call.id in calls:
                    raise ContractError("duplicate_tool_call_id", f"{where}.tool_calls[{j}].id={call.id!r} used twice")
                calls[call.id] = call
                out["tool_calls"].append({"name": call.name, "arguments": call.arguments})
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                raise ContractError("missing_field", f"{where}.tool_call_id is required on tool messages")
            call = calls.get(call_id)
            if call is None:
                raise ContractError(
                    "unknown_tool_call_id", f"{where}.tool_call_id={call_id[:100]!r} answers no earlier call"
                )
            if call.result is not None:
                raise ContractError("tool_call_answered_twice", f"{where} answers call {call_id[:100]!r} again")
            call.result = content
            out["name"] = call.name
            answers[len(native)] = call.number
        native.append(out)
    return _in_call_order(native, answers), list(calls.values())


def _in_call_order(native: list[dict], answers: dict[int, int]) -> list[dict]:
    """`native` with each run of consecutive tool messages sorted by the order of their calls."""
    out, i = list(native), 0
    while i < len(native):
        j = i
        while j in answers:
            j += 1
        if j > i + 1:
            out[i:j] = [native[k] for k in sorted(range(i, j), key=answers.__getitem__)]
        i = max(j, i + 1)
    return out


def _list(value: Any, where: str) -> list:
    if not isinstance(value, list):
        raise ContractError("wrong_type", f"{where} must be a list")
    return value


def _call(raw: Any, where: str, number: int) -> Call:
    if type(raw) is not dict or type(raw.get("function")) is not dict:
        raise ContractError("wrong_type", f'{where} must be {{"id", "type": "function", "function": {{...}}}}')
    call_id, kind, function = raw.get("id"), raw.get("type", "function"), raw["function"]
    if not isinstance(call_id, str) or not call_id:
        raise ContractError("missing_field", f"{where}.id is required")
    if kind != "function":
        raise ContractError("wrong_type", f"{where}.type={repr(kind)[:50]}: only function calls are tool calls")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ContractError("missing_field", f"{where}.function.name is required")
    arguments = function.get("arguments", "{}")
    label = f"{where} (call {call_id[:100]!r}, {name[:100]})"
    if isinstance(arguments, str):
        try:
            arguments = decode_json(arguments, "arguments") if arguments.strip() else {}
        except ContractError as err:
            raise ContractError(
                "bad_tool_arguments", f"{label}: arguments are not JSON ({err.rule}: {err.detail})"
            ) from None
    if type(arguments) is not dict:
        raise ContractError("bad_tool_arguments", f"{label}: arguments must be a JSON object")
    return Call(call_id, name, arguments, number)


def _identified(calls: list[Call], rules: DomainRules) -> Any:
    """The customer id the last successful identify call returned (a log without `user`)."""
    for call in reversed(calls):
        if rules.kind(call.name) == ToolKind.IDENTIFY and not call.failed:
            return (call.result or "").strip()
    raise ContractError("missing_field", "user (the customer id) is missing and no identify call found the customer")


def _record_of(call: Call, rules: DomainRules) -> tuple[str, str, dict] | None:
    """(table, key, record) a read call's result shows, or None."""
    spec = rules.specs.get(call.name)
    if spec is None or spec.kind != ToolKind.READ or spec.record is None or call.failed:
        return None
    key = call.arguments.get(spec.record.argument)
    if not isinstance(key, str):
        return None
    try:
        record = decode_json(call.result or "", "result")
    except ContractError:
        return None  # a result that is not JSON (a compact rendering, a message) shows no record
    return (spec.record.table, key, record) if type(record) is dict else None


def _rebuilt_state(rules: DomainRules, calls: list[Call]) -> dict[str, dict]:
    state: dict[str, dict] = {table: {} for table in rules.domain.tables}
    for call in calls:
        kind = rules.kind(call.name)
        if kind == ToolKind.WRITE and (call.result is None or not call.failed):
            break  # from here on reads show the state after a write (or maybe after one)
        found = _record_of(call, rules)
        if found is not None and found[0] in state:
            state[found[0]].setdefault(found[1], found[2])
    try:
        rules.validate_state(state)
    except (ValueError, TypeError, LookupError, AttributeError):
        # The reads returned something the domain's model refuses: keep the conversation, without
        # a state to replay it from.
        return {table: {} for table in rules.domain.tables}
    return state


def _replayable(rules: DomainRules, state: dict, calls: list[Call], customer: Any) -> bool:
    if not isinstance(customer, str) or customer not in state.get(rules.customer_table, {}):
        return False
    writes = [c for c in calls if rules.kind(c.name) == ToolKind.WRITE]
    for call in writes:
        ref = rules.specs[call.name].record
        if call.result is None:
            return False
        if ref is not None:
            key = call.arguments.get(ref.argument)
            if not isinstance(key, str) or key not in state.get(ref.table, {}):
                return False
    return _replays_as_logged(rules, state, calls)


def _replays_as_logged(rules: DomainRules, state: dict, calls: list[Call]) -> bool:
    """Whether the domain's world, from `state`, fails and succeeds each write as the log did."""
    try:
        world = rules.domain.make_environment()
        world.reset(initial_state=state)
        for call in calls:
            if call.result is None:
                continue  # an unanswered read or hand-over: nothing to compare, nothing written
            result = world.call(call.name, call.arguments)
            if rules.kind(call.name) == ToolKind.WRITE and result.lstrip().startswith("Error") != call.failed:
                return False
    except Exception:  # a domain without a world, or one that breaks on this state: not replayable
        return False
    return True


def _outcome(calls: list[Call], messages: list[dict], rules: DomainRules) -> str:
    kinds = [(rules.kind(c.name), c) for c in calls]
    if any(kind == ToolKind.HAND_OVER and (c.result is None or not c.failed) for kind, c in kinds):
        return "escalated"
    writes = [c for kind, c in kinds if kind == ToolKind.WRITE]
    if any(not c.failed for c in writes):
        return "completed"
    # A question answered from reads alone (an order's status, a baggage allowance) changes no
    # record: it completed when every call worked and the agent had the last word.
    last = messages[-1] if messages else {}
    answered = last.get("role") == "assistant" and bool(last.get("content")) and not last.get("tool_calls")
    return "completed" if not writes and answered and not any(c.failed for c in calls) else "failed"


def _scenario(messages: list[dict], calls: list[Call], rules: DomainRules) -> dict:
    known: dict[str, Any] = {}
    for call in calls:
        if rules.kind(call.name) == ToolKind.IDENTIFY:
            known.update(
                {k: v for k, v in call.arguments.items() if isinstance(v, str | int) and not isinstance(v, bool)}
            )
    instruction = "\n".join(m["content"] for m in messages if m["role"] == "user" and m["content"])
    return {"instruction": instruction, "known_info": known, "persona": "unknown"}
