"""The verifiable core: did the conversation leave the world exactly as the gold actions would,
did the customer hear every gold fact, and did the agent gather the evidence it answered from?

Everything here reads an `Episode` only (the environment's states and audit log); nothing looks at
the policy's text except the messages it sent to the customer, which are part of the audit log.
"""

from __future__ import annotations

import json
import re
from typing import Any

from domains.api import ToolKind
from domains.registry import load_domain
from training.sandbox.episode import MESSAGE_KIND, AuditEntry, Episode

# Thousands separators only when they group exactly three digits, so "1,2,3" stays three numbers.
_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?")
_NO_EVIDENCE_KINDS = frozenset({MESSAGE_KIND, ToolKind.THINK.value})


class GoldError(ValueError):
    """The episode's gold cannot be used as a reference (malformed, or unreplayable)."""

    def __init__(self, rule: str, detail: str, gold: Any) -> None:
        super().__init__(f"{rule}: {detail} (gold={gold!r:.300})")
        self.rule = rule
        self.detail = detail
        self.gold = gold


def _canonical_number(match: re.Match[str]) -> str:
    text = match.group(0).replace(",", "")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def normalise_text(text: str) -> str:
    """Lower-case, drop currency signs, canonicalise numbers, collapse whitespace.

    >>> normalise_text("Refund of $1,234.50 issued")
    'refund of 1234.5 issued'
    """
    lowered = text.lower().replace("$", "")
    return " ".join(_NUMBER.sub(_canonical_number, lowered).split())


def mentions(haystack: str, needle: str) -> bool:
    """Whether `needle` occurs in `haystack` after normalisation, on token boundaries.

    Boundaries matter for numbers: "10" must not be found inside "100" or "10.5".

    >>> mentions("Your total is $10.00.", "10")
    True
    >>> mentions("Your total is $100.", "10")
    False
    """
    hay, pin = normalise_text(haystack), normalise_text(needle)
    if not pin:
        return True
    pattern = r"(?<![0-9a-z])" + re.escape(pin) + r"(?![0-9a-z])(?!\.\d)"
    return re.search(pattern, hay) is not None


def gold_actions(episode: Episode) -> list[dict[str, Any]]:
    """The gold's tool calls, validated as `[{"name": str, "arguments": dict}]`."""
    gold = episode.gold
    if gold is None:
        return []
    actions = gold.get("actions", [])
    if not isinstance(actions, list):
        raise GoldError("gold_actions_not_list", "gold['actions'] must be a list", gold)
    for action in actions:
        if (
            not isinstance(action, dict)
            or not isinstance(action.get("name"), str)
            or not isinstance(action.get("arguments", {}), dict)
        ):
            raise GoldError("bad_gold_action", f"not a {{name, arguments}} object: {action!r:.200}", gold)
    return actions


def expected_final_state(episode: Episode) -> dict[str, Any]:
    """The world after replaying the gold actions on the episode's initial state.

    Gold calls that fail in the reference (e.g. a second modification of one order) change nothing,
    exactly as they did when the gold was verified, so their errors are not a reason to reject.
    """
    final, _errors = load_domain(episode.domain).replay(episode.initial_state, gold_actions(episode))
    return final


def state_matches_gold(episode: Episode) -> bool:
    """Final state equals the gold replay, record for record.

    >>> from training.sandbox.episode import Episode
    >>> world = {table: {} for table in load_domain("retail").tables}
    >>> state_matches_gold(Episode(world, world, [], gold={"actions": [], "outputs": []}))
    True
    """
    return _comparable(episode, episode.final_state) == _comparable(episode, expected_final_state(episode))


def _comparable(episode: Episode, state: dict[str, Any]) -> dict[str, Any]:
    # Only the domain's tables are the world; anything else a state carries is not judged.
    return {key: state.get(key, {}) for key in episode.tables}


def outputs_told(episode: Episode) -> bool:
    """Every gold output string appears in some message sent to the customer.

    >>> from training.sandbox.episode import Episode
    >>> ep = Episode({}, {}, [], told=["Your refund is $54.04."], gold={"actions": [], "outputs": ["54.04"]})
    >>> outputs_told(ep)
    True
    """
    outputs = (episode.gold or {}).get("outputs", []) or []
    return all(any(mentions(message, str(output)) for message in episode.told) for output in outputs)


def _evidence_key(episode: Episode, tool: str, arguments: dict[str, Any]) -> tuple[str, ...] | None:
    """What a call proves, independent of incidental argument differences."""
    kind = episode.kind_of_name(tool)
    if kind in _NO_EVIDENCE_KINDS:
        return None
    if kind == ToolKind.IDENTIFY:
        # Any successful identification proves the customer was looked up; which one is the
        # skipped-verification term's business.
        return ("authenticated",)
    if kind == ToolKind.HAND_OVER:
        return ("transferred",)
    record = episode.record_of_call(tool, arguments)
    if kind == ToolKind.READ and record is not None:
        # A read proves the record it names, whichever read tool fetched it.
        return ("read", *record)
    return (tool, json.dumps(arguments, sort_keys=True, default=str))


def required_evidence(episode: Episode) -> set[tuple[str, ...]]:
    """The calls a task whose gold changes nothing must have made (empty when the gold changes state).

    A read-only task (order status), or one whose gold write fails in the reference (insufficient
    gift-card balance), leaves the state untouched, so the state check alone would pass an agent
    that did nothing (a policy finds such a hole within tens of steps). Required instead: the gold's own non-write calls, and a
    read of every record the gold's writes name (the order's details, the user's profile), which is
    what the answer to the customer must rest on.
    """
    actions = gold_actions(episode)
    is_write = [episode.kind_of_name(a["name"]) == ToolKind.WRITE for a in actions]
    writes = [a for a, w in zip(actions, is_write) if w]
    if writes and _comparable(episode, expected_final_state(episode)) != _comparable(episode, episode.initial_state):
        return set()
    keys = {_evidence_key(episode, a["name"], a.get("arguments", {})) for a, w in zip(actions, is_write) if not w}
    for action in writes:
        record = episode.record_of_call(action["name"], action.get("arguments", {}))
        if record is not None:
            keys.add(("read", *record))
    return {key for key in keys if key is not None}


def evidence_gathered(episode: Episode) -> bool:
    """Every required evidence call appears in the audit log as a successful call."""
    seen = {_evidence_key(episode, e.tool, e.arguments) for e in episode.audit_log if not e.error}
    return required_evidence(episode) <= seen


def verified_success(episode: Episode) -> bool:
    """The verifiable core: state equals the gold replay, gold outputs told, evidence gathered.

    An episode without gold, or whose gold has nothing to check (no calls and no outputs), is never
    a success: nothing certifies it, and "doing nothing" must not pass.

    >>> from training.sandbox.episode import Episode
    >>> verified_success(Episode({}, {}, [], gold=None))
    False
    """
    gold = episode.gold
    if gold is None:
        return False
    if not gold_actions(episode) and not (gold.get("outputs") or []):
        return False
    return evidence_gathered(episode) and outputs_told(episode) and state_matches_gold(episode)


def successful_auth_users(episode: Episode, entries: list[AuditEntry]) -> set[str]:
    """Customer ids returned by successful identification calls among `entries`."""
    return {e.result.strip() for e in entries if episode.kind_of(e) == ToolKind.IDENTIFY and not e.error}
