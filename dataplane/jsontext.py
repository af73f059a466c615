"""Decoding one JSON text (a landing line, a JSON-text column, tool-call arguments) without surprises.

`json.loads` alone keeps the last of two equal keys silently, raises RecursionError on deep
nesting and a bare ValueError on integers of over 4,300 digits; every one of those becomes a
ContractError here, so the caller quarantines the record and reads on:

- `duplicate_key`: an object (at any depth) names a key twice;
- `too_deep`: arrays and objects nest more than MAX_DEPTH levels (the record walkers recurse, and
  a real record nests under ten);
- `number_too_large`: an integer Python refuses to convert;
- `invalid_json`: anything else the decoder rejects.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dataplane.errors import ContractError

MAX_DEPTH = 64

# A JSON string (unrolled loop: runs of plain characters, then one escape); brackets inside one
# do not nest.
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_INNERMOST = re.compile(r"\{[^{}\[\]]*\}|\[[^{}\[\]]*\]")


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


_DECODER = json.JSONDecoder(object_pairs_hook=_object)


def nesting_exceeds(text: str, limit: int = MAX_DEPTH) -> bool:
    """Whether the JSON `text` nests arrays and objects more than `limit` levels deep.

    Counting brackets bounds the depth from above, so most texts stop there. Otherwise strings are
    blanked and innermost pairs peeled off one level per pass (each pass a C-speed regex), at most
    `limit` passes: whatever bracket survives them sits deeper than `limit`.
    """
    if text.count("{") + text.count("[") <= limit:
        return False
    bare = _STRING.sub('""', text)
    for _ in range(limit):
        bare, peeled = _INNERMOST.subn("", bare)
        if not peeled:
            return False  # unbalanced or flat: the decoder judges it
    return _INNERMOST.search(bare) is not None


def decode_json(text: str, where: str) -> Any:
    """Decode `text`; `where` (e.g. "line 12") starts every error detail."""
    if nesting_exceeds(text):
        raise ContractError("too_deep", f"{where}: arrays and objects nest deeper than {MAX_DEPTH} levels")
    try:
        return _DECODER.decode(text)
    except _DuplicateKey as err:
        raise ContractError("duplicate_key", f"{where}: an object repeats the key {err.key[:100]!r}") from None
    except json.JSONDecodeError as err:
        raise ContractError("invalid_json", f"{where}: {err}") from err
    except RecursionError:
        # Unbalanced text is not peeled above, so a long run of '[' can still reach here.
        raise ContractError("too_deep", f"{where}: arrays and objects nest too deep to decode") from None
    except ValueError as err:  # the decoder's only other ValueError: int() over its digit limit
        raise ContractError("number_too_large", f"{where}: {err}") from err
