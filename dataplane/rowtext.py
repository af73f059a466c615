"""A validated record as the text `interactions.record` stores and hashes: scrubbed, canonical, UTF-8.

The canonical form is JSON with sorted keys, no spaces and no ASCII escaping, so one interaction
always hashes alike whatever producer wrote it. A record that cannot have that form (a NaN or
infinite number, text UTF-8 cannot encode, two keys that mask alike) raises ContractError, and
ingestion quarantines it.
"""

from __future__ import annotations

import json
import json.encoder
import re
from json.encoder import encode_basestring
from typing import Any

import orjson

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.errors import ContractError
from dataplane.pii_records import domain_scanner, scrub_fields

# Built once: json.dumps would build the same encoder on every call. NaN and infinities are
# refused: they are not JSON, and a stored record must read back anywhere.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _c_encoder():
    """CPython's C encoder with `_CANONICAL`'s settings, built once; None where there is none.

    `JSONEncoder.encode` builds this object anew on every call, which costs as much as encoding
    a small object, and ingestion encodes each record and often some of its objects. The arguments are the ones
    `JSONEncoder.iterencode` passes; markers=None skips the cycle check (a decoded record has no
    cycles, and a cycle would still end in RecursionError, not a hang).
    """
    if json.encoder.c_make_encoder is None:
        return None
    e = _CANONICAL
    return json.encoder.c_make_encoder(
        None,
        e.default,
        encode_basestring,
        e.indent,
        e.key_separator,
        e.item_separator,
        e.sort_keys,
        e.skipkeys,
        e.allow_nan,
    )


_C_ENCODER = _c_encoder()


def _encode(value: Any) -> str:
    try:
        if _C_ENCODER is None:
            return _CANONICAL.encode(value)
        return "".join(_C_ENCODER(value, 0))
    except ValueError as err:  # the encoder's only ValueError here: allow_nan=False
        raise ContractError("non_finite_number", f"a number is NaN or infinite: {err}") from None
    except TypeError as err:  # e.g. a Parquet struct column holding a timestamp or bytes
        raise ContractError("wrong_type", f"a value is not JSON: {err}") from None


def canonical_json(record: dict) -> str:
    """The one serialisation of a record that is stored and hashed (sorted keys, no spaces).

    Raises ContractError: `non_finite_number` for a NaN or infinite number anywhere in it (also a
    float literal too large for a double), `invalid_unicode` for text UTF-8 cannot encode (a lone
    surrogate from a JSON escape such as \\ud800).
    """
    text = _encode(record)
    _require_utf8(text)
    return text


def stored_form(value: Any) -> Any:
    """`value` laid out as the store gives it back: decoded from its canonical JSON, so every
    object's keys are sorted. A simulated world is held in this form, so that what a model serves
    on and what the loop later replays from the store (a full tool result is the JSON of a record,
    keys in the record's order) are the same text."""
    return json.loads(canonical_json(value))


def scrubbed_canonical(
    record: dict, leave_out_domain: bool = False, pii_free: frozenset[str] = frozenset(), json_native: bool = False
) -> tuple[dict, str]:
    """(the record with PII masked, its canonical JSON): what ingestion stores.

    `leave_out_domain`: drop the record's `domain` key from both (the store leaves the default
    domain out of its text); the dict is copied once, by the scrub when it changed something.
    `pii_free`: free-form fields known to hold nothing to mask (`pii_records.scrub_fields`).
    `json_native`: every value in the record is a dict, list, str, int, float, bool or None (a
    reader's `RawRecord.json_native`), so `_native_text` may write it.

    PII is found as the record's domain finds it (`pii_records.domain_scanner`: its world keys
    survive); a record without `domain` is the default domain's. Every free-form field is walked
    (`pii_records.scrub_field`: short and remembered strings cost a lookup) and the record is
    serialised once. Nothing is gated on the serialised text first: the retail and airline
    worlds hold customers' e-mail addresses, so their objects are walked whatever a gate said,
    and a shape test of a whole record's text (ids, timestamps, prices) costs more than walking
    a small record's few strings.
    """
    clean = scrub_fields(record, domain_scanner(record.get("domain", DEFAULT_DOMAIN)), pii_free)
    if leave_out_domain and "domain" in clean:
        if clean is record:  # nothing was masked: `record` is the caller's, not to be changed
            clean = record.copy()
        del clean["domain"]
    text = _native_text(clean) if json_native else None
    if text is None:
        text = _encode(clean)
        _require_utf8(text)
    return clean, text


# orjson writes a record two to three times as fast as the json module's C encoder. Its text is
# used only where it is certainly the one `_encode` writes, byte for byte, since the stored text is
# hashed and a stored interaction must hash alike whoever wrote it; anything else goes to
# `_encode`, which also words the errors:
# - the record holds JSON-native values only (the caller says so): orjson writes a UUID or an
#   Enum that json refuses;
# - no other type reaches orjson's own writing: dataclasses, datetimes and subclasses of str, int,
#   dict and list are handed to `_not_native`, which refuses them (json writes a str subclass as
#   its text, orjson may differ), as does every type orjson cannot write (integers past 64 bits);
# - orjson writes a NaN or an infinity as `null` where json refuses it, so its text may hold
#   no `null` but the record's own top-level Nones (a nested null, or one in a text, takes the
#   slow path: the worlds' records have none);
# - the two spell a float below 1e-4 differently (json "1e-05" and "1e-07", orjson "0.00001" and
#   "1e-7"), so a text with "0.0000" or a digit before "e-" takes the slow path (every
#   difference is of that form: tests/test_dataplane_native_text.py checks every exponent);
# - every string (all of Unicode but lone surrogates, which orjson refuses and json's text then
#   fails `_require_utf8` on), every escape and the order of sorted keys are the same.
_NATIVE_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_SMALL_FLOAT = re.compile(rb"\de-")


def _not_native(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is left to the json module")


def _native_text(record: dict) -> str | None:
    """`_encode(record)` written by orjson, or None where orjson's text could differ (see above)."""
    try:
        out = orjson.dumps(record, default=_not_native, option=_NATIVE_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError is a TypeError
        return None
    if (
        out.count(b"null") != list(record.values()).count(None)
        or b"0.0000" in out
        or (b"e-" in out and _SMALL_FLOAT.search(out))
    ):
        return None
    return out.decode()


def _require_utf8(text: str) -> None:
    if not text.isascii():
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as err:
            raise ContractError(
                "invalid_unicode", f"the record holds {text[err.start : err.end]!a}, which UTF-8 cannot encode"
            ) from None


def storable_text(text: str) -> str:
    """`text` with any character UTF-8 cannot encode written as its escape, for a quarantine row."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")
