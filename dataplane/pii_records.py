"""PII in whole records: a cheap gate, the scrubbing walk, and the scan every no-PII check uses.

`dataplane.scrub` masks PII in one text. Here: `may_hold_pii`, a necessary condition that lets most
texts skip the masking passes; `scrub_record`, which masks every free-form field of a validated
record at any depth (values and keys, and integers that read as card numbers); and
`suspect_texts` / `record_pii`, which read every place of any stored record, so checks judge a
record by what it holds rather than by where the scrubber looked.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from typing import Any

from dataplane.errors import ContractError
from dataplane.scrub import find_pii, scrub_text

# Free-form fields: text a producer writes (at any depth, keys included). The other fields are
# identifiers the contract refuses when they read as PII (masking would break them as keys),
# timestamps and enums it checks by shape, and numbers.
FREE_FORM_FIELDS = ("policy_version", "initial_state", "user_scenario", "messages", "gold", "human_label")

# A necessary condition for any pass above to mask anything: each masked span contains one of
# 13 contiguous digits; 4 digits, a separator, 4 digits; a national-id or phone digit-group shape;
# '+', 1-3 digits and a separator (an international number; a timestamp's "+00:00" is not one);
# the UK id's letters and digits. Every alternative starts with a digit, '+' or
# a capital, and the pattern leads with that one character class so the regex engine skips every
# other character without trying the alternatives (several times faster than plain alternation).
# Most strings, digit-bearing ids included, fail it and skip the passes; an ASCII-only variant is
# faster still for ASCII text, the usual case.
_GATE = (
    r"[{d}+A-Z](?:(?<=[{d}])(?:[{d}]{{12}}|[{d}]{{3}}[ -][{d}]{{4}}|[{d}]{{2}}[ -][{d}]{{2}}[ -][{d}]{{4}}"
    r"|[{d}]{{2}}[ .-][{d}]{{4}})|(?<=\+)[{d}]{{1,3}}[ -]|(?<=[A-Z])[A-Z] ?[{d}]{{2}} ?[{d}]{{2}} ?[{d}]{{2}} ?[A-D])"
)
_GATE_ASCII = re.compile(_GATE.format(d="0-9"))
_GATE_ANY = re.compile(_GATE.format(d="\\d"))  # \d: every Unicode decimal digit, as the passes read
# Only integers of 13-19 digits can read as a card; no other kind is a bare digit run.
_CARD_INT_LOW, _CARD_INT_HIGH = 10**12, 10**19


# For long texts (a whole serialised record) even that regex tries thousands of digit and capital
# positions. There the same condition is checked on the text's shape: bytes.translate maps each
# ASCII digit to "d", each separator to "s", each capital to "L" and everything else to "_" (both
# C loops), and the digit alternatives become substring tests; the UK id's, rare, is checked
# with a regex on the shape only when its start ("LLd", "LLsd") occurs. Decimal digits outside ASCII, which the
# passes read as digits too, send the text to the regex gate.
_SHAPE = bytes(
    ord("d")
    if "0" <= chr(b) <= "9"
    else ord("s")
    if chr(b) in " .-"
    else ord("L")
    if "A" <= chr(b) <= "Z"
    else b
    if chr(b) == "+"
    else ord("_")
    for b in range(256)
)
_SHAPE_INTL = (b"+ds", b"+dds", b"+ddds")
_SHAPE_NI = re.compile(rb"LLs?dds?dds?dds?L")  # the UK id's shape (its last letter A-D is an "L")
_SHORT = 256  # below this many characters the regex gate is the cheaper one
# The shortest text any pass masks: a UK National Insurance number without spaces ("AB123456C");
# a card has 13 characters, a phone number 10 and separators, a US national id 11. Keys and
# values shorter than this (roles, most keys, short ids) skip even the gate.
_SHORTEST = 9
_NON_ASCII = re.compile(r"[^\x00-\x7f]+")


def may_hold_pii(text: str) -> bool:
    """False only when `text` cannot hold PII: no pass of `scrub_text` would mask anything."""
    if len(text) < _SHORT:
        return len(text) >= _SHORTEST and (_GATE_ASCII if text.isascii() else _GATE_ANY).search(text) is not None
    if not text.isascii() and any(c.isdecimal() for c in set("".join(_NON_ASCII.findall(text)))):
        return _GATE_ANY.search(text) is not None
    shape = text.encode("utf-8", "surrogatepass").translate(_SHAPE)
    if (
        b"d" * 13 in shape or b"dddsdddd" in shape or b"dddsddsdddd" in shape
    ):  # card; grouped card or phone; national id
        return True
    if b"+d" in shape and any(part in shape for part in _SHAPE_INTL):
        return True
    return (b"LLd" in shape or b"LLsd" in shape) and _SHAPE_NI.search(shape) is not None


class KeyCollisionError(ContractError):
    """Two keys of one object mask to the same text; keeping either would lose the other."""


def scrub_record(record: dict[str, Any]) -> dict[str, Any]:
    """Mask PII in every free-form field of a (validated) record, at any depth.

    Strings and object keys are scrubbed; so are integers (inside free-form objects) that read as
    a card number, which become the masked string. Returns a new top-level dict; nested objects
    that need no change are shared, not copied.
    """
    out = dict(record)
    for key in FREE_FORM_FIELDS:
        out[key] = scrub_field(record[key], key)
    return out


def scrub_field(value: Any, name: str) -> Any:
    """`value` (the validated record's field `name`) with PII masked at any depth; shared where
    unchanged."""
    try:
        if name == "messages":
            return _clean_messages(value)
        return _clean(value)
    except KeyCollisionError as err:
        raise KeyCollisionError(err.rule, f"{name}: {err.detail}") from None


def _clean_messages(messages: list[dict]) -> list[dict]:
    # Validated messages have only the contract's keys (role, content, tool_calls, name) and a
    # role from its set: neither can hold PII, so only the values that can are visited. This is
    # the field every record has, and the one PII is most often in.
    return _replaced(messages, [_clean_message(m) for m in messages])


def _replaced(old: list, new: list) -> list:
    """`new` if any item differs (by identity) from `old`'s, else `old` itself (shared, not copied)."""
    for a, b in zip(new, old):
        if a is not b:
            return new
    return old


def _clean_message(message: dict) -> dict:
    content = message["content"]
    new_content = content if len(content) < _SHORTEST else _clean_text(content)
    calls = message.get("tool_calls")
    new_calls = _replaced(calls, [_clean_call(c) for c in calls]) if calls else calls
    name = message.get("name")
    new_name = name if name is None or len(name) < _SHORTEST else _clean_text(name)
    if new_content is content and new_calls is calls and new_name is name:
        return message
    out = {**message, "content": new_content}
    if calls:
        out["tool_calls"] = new_calls
    if name is not None:
        out["name"] = new_name
    return out


def _clean_call(call: dict) -> dict:
    name, arguments = call["name"], call["arguments"]
    new_name = name if len(name) < _SHORTEST else _clean_text(name)
    new_arguments = _clean(arguments)
    if new_name is name and new_arguments is arguments:
        return call
    return {"name": new_name, "arguments": new_arguments}


def _clean(value: Any) -> Any:
    # Called for every container of every flagged record: strings are handled inline (no call
    # per leaf), short ones skip even the gate, and paths are not built.
    kind = type(value)
    if kind is str:
        return _clean_text(value)
    if kind is dict:
        out = None  # built only from the first change on: most objects come back as they are
        for i, (key, item) in enumerate(value.items()):
            new_key = key if len(key) < _SHORTEST else _clean_text(key)
            if type(item) is str:
                new_item = item if len(item) < _SHORTEST else _clean_text(item)
            else:
                new_item = _clean(item)
            if out is None:
                if new_key == key and new_item is item:
                    continue
                out = dict(itertools.islice(value.items(), i))
            if new_key in out:
                raise KeyCollisionError("pii_key_collision", f"two keys of one object mask to {new_key!r}")
            out[new_key] = new_item
        return value if out is None else out
    if kind is list:
        items = [
            (item if len(item) < _SHORTEST else _clean_text(item)) if type(item) is str else _clean(item)
            for item in value
        ]
        return _replaced(value, items)
    if kind is int and _CARD_INT_LOW <= abs(value) < _CARD_INT_HIGH:
        text = str(value)
        clean = scrub_text(text)
        return value if clean == text else clean
    return value


# Short strings found clean, remembered: tool names, canned replies and personas recur in almost
# every record, and a set lookup costs a fraction of the shape test. `scrub_text` is a pure
# function, so a remembered answer stays right; the set is emptied when full, which bounds it.
_KNOWN_CLEAN: set[str] = set()
_REMEMBER_UP_TO = 64  # characters; longer texts are rarely repeated, and hashing them costs more
_KNOWN_CLEAN_MAX = 4096


def _clean_text(text: str) -> str:
    # ASCII text goes straight to `scrub_text`: its own shape test skips every pass the gate
    # would, and the gate's regex costs more than the shape on digit-heavy text.
    size = len(text)
    if size < _SHORTEST or (size <= _REMEMBER_UP_TO and text in _KNOWN_CLEAN):
        return text
    if not text.isascii() and _GATE_ANY.search(text) is None:
        return text
    clean = scrub_text(text)
    if clean is text and size <= _REMEMBER_UP_TO:
        if len(_KNOWN_CLEAN) >= _KNOWN_CLEAN_MAX:
            _KNOWN_CLEAN.clear()
        _KNOWN_CLEAN.add(text)
    return clean


def suspect_texts(record: Any) -> Iterator[tuple[str, str]]:
    """(path, text) of every place in a record that may hold PII, however the record was stored.

    Covers everything: every field, every string and object key at any depth, and every integer
    inside an object or array (the record's own top-level numbers are counts and measurements).
    Places `may_hold_pii` clears are left out: they cannot hold any.
    """
    if isinstance(record, dict):
        for key, value in record.items():
            yield from _suspects(key, "<key>", ints=False)
            yield from _suspects(value, str(key), ints=False)
    else:
        yield from _suspects(record, "record", ints=True)


def _suspects(value: Any, path: str, ints: bool) -> Iterator[tuple[str, str]]:
    if isinstance(value, str):
        if may_hold_pii(value):
            yield path, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _suspects(key, f"{path}.<key>", ints=True)
            yield from _suspects(item, f"{path}.{key}", ints=True)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            yield from _suspects(item, f"{path}[{i}]", ints=True)
    elif ints and type(value) is int and _CARD_INT_LOW <= abs(value) < _CARD_INT_HIGH:
        yield path, str(value)


def record_pii(record: Any) -> list[tuple[str, list[str]]]:
    """Where a record holds PII, as (path, kinds) per place (see `suspect_texts`); never the PII."""
    return [(path, kinds) for path, text in suspect_texts(record) if (kinds := find_pii(text))]
