"""PII in whole records: a cheap gate, the scrubbing walk, and the scan every no-PII check uses.

`dataplane.scrub` finds PII in one text. Here: `may_hold_pii`, a necessary condition that lets
most texts skip the passes; `scrub_record`, which masks (and, for e-mail addresses,
pseudonymises) every free-form field of a validated record at any depth (values and keys, and
integers that read as a card or social security number), keeping the record's domain's world
keys (`domain_scanner`); and `suspect_texts` / `record_pii`, which read every place of any stored
record, so checks judge a record by what it holds rather than by where the scrubber looked.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from dataplane.domain_rules import DEFAULT_DOMAIN, domain_rules
from dataplane.errors import ContractError
from dataplane.scrub import _NINO_RE, STRICT, PiiScanner, scanner_for
from dataplane.scrub import may_hold_pii as may_hold_pii

# Free-form fields: text a producer writes (at any depth, keys included). The other fields are
# identifiers the contract refuses when they read as PII (masking would break them as keys),
# timestamps and enums it checks by shape, and numbers.
FREE_FORM_FIELDS = ("policy_version", "initial_state", "user_scenario", "messages", "gold", "human_label")

# Integers that can read as PII: a bare social security number (9 digits) or a card (13-19).
_SSN_INT_LOW, _SSN_INT_HIGH = 10**8, 10**9
_CARD_INT_LOW, _CARD_INT_HIGH = 10**12, 10**19
_NOT_DIGITS = bytes(b for b in range(256) if not 48 <= b <= 57)
_IBAN_MIN_LEN = 15
# The shortest text any pass replaces: an e-mail address ("a@b.co"); any other kind needs 9
# characters or more (an SSN or UK National Insurance number without separators). ASCII keys and
# values shorter (roles, most keys, short ids) skip even the gate.
_SHORTEST, _SHORTEST_BUT_EMAIL = 6, 9
_SHORT = _SHORTEST_BUT_EMAIL  # the walk leaves ASCII strings shorter than this without an '@' inline


def _int_may_hold_pii(value: int) -> bool:
    size = abs(value)
    return _SSN_INT_LOW <= size < _SSN_INT_HIGH or _CARD_INT_LOW <= size < _CARD_INT_HIGH


# Domain name -> (the domain object it was built for, its scanner): ingestion asks once per record.
_DOMAIN_SCANNERS: dict[str, tuple[object, PiiScanner]] = {}


def domain_scanner(domain: str = DEFAULT_DOMAIN) -> PiiScanner:
    """The scanner of `domain`'s records: it keeps the domain's `world_key_patterns`.

    Raises ContractError `unknown_domain` for a domain that is not installed."""
    loaded = domain_rules(domain).domain
    cached = _DOMAIN_SCANNERS.get(domain)
    if cached is None or cached[0] is not loaded:
        cached = _DOMAIN_SCANNERS[domain] = (loaded, scanner_for(loaded.world_key_patterns))
    return cached[1]


class KeyCollisionError(ContractError):
    """Two keys of one object mask to the same text; keeping either would lose the other."""


def scrub_record(record: dict[str, Any], scanner: PiiScanner | None = None) -> dict[str, Any]:
    """Mask PII in every free-form field of a (validated) record, at any depth.

    Strings and object keys are scrubbed; so are integers (inside free-form objects) that read as
    a card or social security number, which become the masked string. `scanner`: by default the
    record's domain's (`domain_scanner`). Returns a new top-level dict; nested objects that need
    no change are shared, not copied.
    """
    scanner = scanner or domain_scanner(record.get("domain", DEFAULT_DOMAIN))
    return dict(scrub_fields(record, scanner))


def scrub_fields(record: dict[str, Any], scanner: PiiScanner, pii_free: frozenset[str] = frozenset()) -> dict[str, Any]:
    """`scrub_record` that returns `record` itself when nothing in it changed (else a new dict).

    `pii_free`: fields known to hold nothing any scanner masks (decoded from a JSON text that
    `json_text_pii_free` cleared): the walk would return them as they are, and skips them."""
    walk = _WALKS.get(id(scanner)) or _walk_for(scanner)
    clean = record
    for key in FREE_FORM_FIELDS:
        value = record[key]
        if not value or key in pii_free:  # None (no gold), an empty text or object, or cleared: kept as is
            continue
        try:
            new = walk.messages(value) if key == "messages" else walk.value(value)
        except KeyCollisionError as err:
            raise KeyCollisionError(err.rule, f"{key}: {err.detail}") from None
        if new is not value:
            if clean is record:
                clean = dict(record)
            clean[key] = new
    return clean


def json_text_pii_free(text: str) -> bool:
    """Whether nothing decoded from the JSON `text` can be masked by any scanner's walk.

    True only for ASCII text without a backslash (so every string and integer of the decoded
    value, keys included, stands in `text` as written, between quotes or JSON punctuation) on
    which no pass's cheap shape test fires (`may_hold_pii`). Those tests only ever look for
    substrings, counts that cannot shrink when text is added around, and patterns whose context
    characters ('"', ':', ',', '[', a space) read like the start of a string: a test that fires
    on any string or integer of the value fires on the whole text. Validation builds the field
    from parts of that value only (a tool call's arguments decoded from text need escaped quotes,
    so a backslash), so the walk of the validated field would return it unchanged.
    """
    return text.isascii() and "\\" not in text and not may_hold_pii(text)


def scrub_field(value: Any, name: str, scanner: PiiScanner = STRICT) -> Any:
    """`value` (the validated record's field `name`) with PII masked at any depth; shared where
    unchanged."""
    walk = _WALKS.get(id(scanner)) or _walk_for(scanner)
    try:
        if name == "messages":
            return walk.messages(value)
        return walk.value(value)
    except KeyCollisionError as err:
        raise KeyCollisionError(err.rule, f"{name}: {err.detail}") from None


def _replaced(old: list, new: list) -> list:
    """`new` if any item differs (by identity) from `old`'s, else `old` itself (shared, not copied)."""
    for a, b in zip(new, old):
        if a is not b:
            return new
    return old


# Short strings found clean, remembered per scanner: tool names, canned replies and personas recur
# in almost every record, and a set lookup costs a fraction of the shape test. Scanning is a pure
# function of the text and the scanner's world keys (a pseudonym depends on the key, but a text
# holding an address to pseudonymise is never clean), so a remembered answer stays right; a set
# is emptied when full, which bounds it.
_REMEMBER_UP_TO = 64  # characters; longer texts are rarely repeated, and hashing them costs more
_KNOWN_CLEAN_MAX = 4096


class _Walk:
    """The scrubbing walk of one scanner, with the clean strings it remembers."""

    __slots__ = ("scrub", "known")

    def __init__(self, scanner: PiiScanner):
        self.scrub = scanner.scrub
        self.known: set[str] = set()

    def text(self, text: str) -> str:
        size = len(text)
        # Without an '@', a text under 15 characters can hold no IBAN, and any other kind needs 6
        # digits or more (a UK National Insurance number; 8 for the next, an international phone
        # number). Lengths and digits of ASCII text only: normalising may lengthen other text
        # ("⑽" -> "(10)").
        # With fewer than 8 digits only that UK number can be there, which its own pattern (starting
        # with a capital) finds faster than the shape tests.
        if size < _IBAN_MIN_LEN and "@" not in text and text.isascii():
            if size < _SHORTEST_BUT_EMAIL:
                return text
            if text in self.known:
                return text
            digits = len(text.encode().translate(None, _NOT_DIGITS))
            if digits < 6 or (digits < 8 and _NINO_RE.search(text) is None):
                if not digits:  # keys and canned words recur (ids, with digits, mostly do not)
                    self._remember(text)
                return text
        elif size < _SHORTEST and text.isascii():
            return text
        if size <= _REMEMBER_UP_TO and text in self.known:
            return text
        clean = self.scrub(text)
        if clean is text and size <= _REMEMBER_UP_TO:
            self._remember(text)
        return clean

    def _remember(self, text: str) -> None:
        if len(self.known) >= _KNOWN_CLEAN_MAX:
            self.known.clear()
        self.known.add(text)

    def messages(self, messages: list[dict]) -> list[dict]:
        # Validated messages have only the contract's keys (role, content, tool_calls, name) and a
        # role from its set: neither can hold PII, so only the values that can are visited. This
        # is the field every record has, and the one PII is most often in.
        return _replaced(messages, [self.message(m) for m in messages])

    def message(self, message: dict) -> dict:
        # `in known` after the short-text test: a text remembered clean costs a set lookup, not a
        # call (known is only ever cleared, never replaced, so it can be held in a local).
        known = self.known
        content = message["content"]
        new_content = (
            content
            if (len(content) < _SHORT and "@" not in content and content.isascii()) or content in known
            else self.text(content)
        )
        if len(message) == 2 and "role" in message:  # role and content alone, as most messages are
            return message if new_content is content else {**message, "content": new_content}
        calls = message.get("tool_calls")
        new_calls = _replaced(calls, [self.call(c) for c in calls]) if calls else calls
        name = message.get("name")
        new_name = (
            name
            if name is None or (len(name) < _SHORT and "@" not in name and name.isascii()) or name in known
            else self.text(name)
        )
        if new_content is content and new_calls is calls and new_name is name:
            return message
        out = {**message, "content": new_content}
        if calls:
            out["tool_calls"] = new_calls
        if name is not None:
            out["name"] = new_name
        return out

    def call(self, call: dict) -> dict:
        name, arguments = call["name"], call["arguments"]
        new_name = (
            name
            if (len(name) < _SHORT and "@" not in name and name.isascii()) or name in self.known
            else self.text(name)
        )
        new_arguments = self.value(arguments)
        if new_name is name and new_arguments is arguments:
            return call
        return {"name": new_name, "arguments": new_arguments}

    def value(self, value: Any) -> Any:
        # Called for every container of every record: strings are handled inline (no call per
        # leaf), short ones skip even the gate, empty containers return at once, and paths are
        # not built.
        kind = type(value)
        if kind is str:
            return self.text(value)
        if not value:
            return value
        known = self.known  # as in `message`: a remembered clean text costs a set lookup
        if kind is dict:
            out = None  # built only from the first change on: most objects come back as they are
            for i, (key, item) in enumerate(value.items()):
                new_key = (
                    key if (len(key) < _SHORT and "@" not in key and key.isascii()) or key in known else self.text(key)
                )
                if type(item) is str:
                    new_item = (
                        item
                        if (len(item) < _SHORT and "@" not in item and item.isascii()) or item in known
                        else self.text(item)
                    )
                elif not item:  # an empty object or array, null, false, 0
                    new_item = item
                else:
                    new_item = self.value(item)
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
                (
                    item
                    if (len(item) < _SHORT and "@" not in item and item.isascii()) or item in known
                    else self.text(item)
                )
                if type(item) is str
                else self.value(item)
                for item in value
            ]
            return _replaced(value, items)
        if kind is int and _int_may_hold_pii(value):
            text = str(value)
            clean = self.scrub(text)
            return value if clean == text else clean
        return value


# One walk per scanner (scanners live for the process, `scrub.scanner_for` keeps them, so their
# ids are never reused).
_WALKS: dict[int, _Walk] = {}


def _walk_for(scanner: PiiScanner) -> _Walk:
    walk = _WALKS[id(scanner)] = _Walk(scanner)
    return walk


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
    elif ints and type(value) is int and _int_may_hold_pii(value):
        yield path, str(value)


def record_pii(record: Any, scanner: PiiScanner = STRICT) -> list[tuple[str, list[str]]]:
    """Where a record holds PII, as (path, kinds) per place (see `suspect_texts`); never the PII.

    `scanner`: the record's domain's (`domain_scanner`) to judge it as ingestion did."""
    return [(path, kinds) for path, text in suspect_texts(record) if (kinds := scanner.find(text))]
