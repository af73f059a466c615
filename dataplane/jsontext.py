"""Decoding one JSON text (a landing line, a JSON-text column, tool-call arguments) without surprises.

`json.loads` alone keeps the last of two equal keys silently, raises RecursionError on deep
nesting and a bare ValueError on integers of over 4,300 digits; every one of those becomes a
ContractError here, so the caller quarantines the record and reads on:

- `duplicate_key`: an object (at any depth) names a key twice;
- `too_deep`: arrays and objects nest more than MAX_DEPTH levels (the record walkers recurse, and
  a real record nests under ten);
- `number_too_large`: an integer, at any depth, outside the signed 64-bit range (what DuckDB, Arrow
  and most JSON readers can hold; the contract's top-level `actions_taken` has the same bound);
- `invalid_json`: anything else the decoder rejects.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from dataplane.errors import ContractError

MAX_DEPTH = 64
INT64_RANGE = (-(2**63), 2**63 - 1)
# Digits of the longest int64 literal with its sign: a longer one is out of range without converting.
_INT64_DIGITS = len(str(INT64_RANGE[0]))


class _DuplicateKey(Exception):
    """Raised from inside the decoder; not a ValueError, so it cannot pass for a syntax error."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def _object(pairs: list[tuple[str, Any]]) -> dict:
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _value in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return obj


class _IntTooLarge(Exception):
    """Raised from inside the decoder, like _DuplicateKey: an integer literal out of the int64 range."""

    def __init__(self, literal: str):
        super().__init__(literal)
        self.literal = literal


def _int64(literal: str) -> int:
    """The decoder's integer conversion, range-checked at every depth of the text.

    Called by the C scanner for integer literals only, so the check costs a length test per
    integer: a literal of 19 characters or fewer can be out of range only from 9223372036854775808
    up, and the digits of a longer one are never converted (int() of thousands of digits is slow).
    """
    if len(literal) < 19:
        return int(literal)
    value = int(literal) if len(literal) <= _INT64_DIGITS else None
    if value is None or not INT64_RANGE[0] <= value <= INT64_RANGE[1]:
        raise _IntTooLarge(literal)
    return value


_DECODER = json.JSONDecoder(object_pairs_hook=_object, parse_int=_int64)


def nesting_exceeds(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether the decoded JSON `value` nests arrays and objects more than `limit` levels deep.

    Visits containers only (an explicit stack, so any depth is safe to measure) and stops at the
    first one deeper than `limit`.
    """
    if type(value) is not dict and type(value) is not list:
        return False
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                if depth >= limit:
                    return True
                stack.append((child, depth + 1))
    return False


_SCAN = _DECODER.scan_once  # the C scanner the decoder wraps


def decode_json(text: str, where: str = "") -> Any:
    """Decode `text`; `where` (e.g. "line 12"), when given, starts every error detail.

    A caller that decodes many values may leave `where` out and name the place only on failure,
    with `ContractError.at`.
    """
    value = _read_fast(text) if len(text) >= _FAST_FROM else _SLOW
    fast = value is not _SLOW
    if not fast:
        value = _read_slow(text, where)
    # The bracket count is `_text_nests_deeper`'s first test, inlined: most texts stop at it.
    if text.count("[") + text.count("{") > MAX_DEPTH and _text_nests_deeper(text, value):
        if fast:  # orjson reads deeper than the json module: the slow reader's own error, if any
            _read_slow(text, where)
        raise _located(ContractError("too_deep", f"arrays and objects nest deeper than {MAX_DEPTH} levels"), where)
    return value


def _read_slow(text: str, where: str) -> Any:
    """`text` read by `_DECODER`, every rule of the module docstring raised as its ContractError."""
    try:
        # The decoder's C scanner is called directly when `text` is one bare JSON value:
        # `JSONDecoder.decode` runs two whitespace regexes and a Python frame around it, which on
        # the four JSON texts of a Parquet row is a tenth of ingesting it. Anything the scanner
        # does not take whole (whitespace around the value, trailing data, no value at all) goes
        # through `decode`, so every error and its message is the decoder's own.
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            end = None
        if end != len(text):
            value = _DECODER.decode(text)
    except _DuplicateKey as err:
        raise _located(ContractError("duplicate_key", f"an object repeats the key {err.key[:100]!r}"), where) from None
    except _IntTooLarge as err:
        raise _located(_too_large(err.literal), where) from None
    except json.JSONDecodeError as err:
        raise _located(ContractError("invalid_json", str(err)), where) from err
    except RecursionError:  # far deeper than MAX_DEPTH: the decoder itself gives up
        raise _located(ContractError("too_deep", "arrays and objects nest too deep to decode"), where) from None
    return value


# orjson reads JSON four to ten times as fast as the json module's decoder with this module's
# hooks (a Python call per object and per integer). Its value is used only where it is certainly
# the one the hooks would let through, and everything else is read again the slow way, which
# also words every error:
# - orjson reads an integer past the unsigned 64-bit range as a float, and one past int64 but in
#   uint64 as an int: a text with 19 digits in a row (every integer outside int64 has them) is
#   read the slow way;
# - orjson keeps the last of two equal keys silently. A key's ':' is the only colon outside
#   strings, and a colon inside a string is either written as one or escaped as \u003a: so the
#   value orjson writes back holds as many colons as the text (escaped ones counted) exactly
#   when no key was dropped, and fewer when one was (with its value's). A literal backslash
#   before "u003a" is counted too, which only sends a good text the slow way;
# - every text orjson refuses (NaN and Infinity, which json reads; a number that overflows to
#   infinity; a lone surrogate, escaped or not; any syntax error) is read the slow way;
# - strings, floats (both round correctly), key order and whitespace otherwise read alike
#   (tests/test_dataplane_fastpaths.py compares the two on generated texts).
_SLOW = object()
# Below this many characters the checks cost more than orjson saves (the json module reads a
# 100-character object in 1.7 µs, orjson and its checks in 1.9; 340 characters: 5.2 against 4.0).
_FAST_FROM = 128
_DIGITS_AS_ZERO = bytes(ord("0") if 48 <= b <= 57 else ord("x") for b in range(256))
_LONG_INTEGER = b"0" * 19


def _read_fast(text: str) -> Any:
    """The value of `text` as orjson reads it, or _SLOW where that could differ from `_DECODER`'s."""
    try:
        raw = text.encode()
    except UnicodeEncodeError:  # a lone surrogate character
        return _SLOW
    if _LONG_INTEGER in raw.translate(_DIGITS_AS_ZERO):
        return _SLOW
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return _SLOW
    if b"{" in raw:  # else no object, so no key to lose
        colons = raw.count(b":")
        if b"\\u003" in raw:
            colons += raw.count(b"\\u003a") + raw.count(b"\\u003A")
        try:
            written = orjson.dumps(value)
        except orjson.JSONEncodeError:  # nested deeper than orjson writes (it reads deeper)
            return _SLOW
        if written.count(b":") != colons:
            return _SLOW
    return value


def _too_large(literal: str, path: str = "") -> ContractError:
    shown = literal if len(literal) <= 40 else f"{literal[:20]}...({len(literal)} digits)"
    at = f"{path}=" if path else "the integer "
    return ContractError("number_too_large", f"{at}{shown} does not fit a 64-bit integer")


def check_int_range(value: Any) -> None:
    """Raise number_too_large for an integer outside the int64 range at any depth of `value`.

    For values that did not come through `decode_json` (whose decoder checks every integer as it
    reads it): Parquet columns of unsigned 64-bit integers. Walks containers with an explicit stack.
    """
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend((child, f"{path}.{key}" if path else str(key)) for key, child in item.items())
        elif kind is list:
            stack.extend((child, f"{path}[{i}]") for i, child in enumerate(item))
        elif kind is int and not INT64_RANGE[0] <= item <= INT64_RANGE[1]:
            raise _too_large(str(item), path)


def _located(err: ContractError, where: str) -> ContractError:
    return err.at(where) if where else err


_INNERMOST = re.compile(rb"\{\}|\[\]")  # on a skeleton of brackets alone, an innermost pair is adjacent
_NOT_STRUCTURE = bytes(b for b in range(256) if b not in b'[]{}"')


def _text_nests_deeper(text: str, value: Any) -> bool:
    """`nesting_exceeds(value)`, mostly read off the decoded `text` with C-speed string operations.

    Fewer brackets than the limit cannot nest deeper than it: most texts stop at the count. Else,
    when no string in the text holds an escaped quote, splitting at the quotes leaves the text
    outside strings at the even places; innermost bracket pairs are then peeled off it, one level
    per regex pass, and any pair left after MAX_DEPTH passes sits deeper. (Walking the decoded
    containers instead costs more than decoding a reference-world record.)
    """
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return False
    if '\\"' in text:  # an escaped quote breaks the split's parity: walk the containers instead
        return nesting_exceeds(value)
    # Only brackets and quotes matter; deleting the rest first (a C loop over bytes) leaves the
    # split and the peeling a text a fraction as long.
    skeleton = text.encode("utf-8", "surrogatepass").translate(None, _NOT_STRUCTURE)
    bare = b"".join(skeleton.split(b'"')[0::2])
    for _ in range(MAX_DEPTH):
        bare, peeled = _INNERMOST.subn(b"", bare)
        if not peeled:
            return False
    return _INNERMOST.search(bare) is not None
