"""RFC 3339 timestamps as the record contract reads them: a mandatory offset, a real instant."""

from __future__ import annotations

import re
from datetime import datetime
from functools import lru_cache
from typing import Any

from dataplane.errors import ContractError

# RFC 3339 date-time with a mandatory offset; fromisoformat alone would accept dates, week
# dates and naive times.
RFC3339_RE = re.compile(r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


def parse_timestamp(value: Any, field: str) -> datetime:
    """Parse an RFC 3339 timestamp with offset into an aware datetime, or raise bad_timestamp."""
    if not isinstance(value, str):
        raise ContractError("wrong_type", f"{field} must be an RFC 3339 string, got {type(value).__name__}")
    if RFC3339_RE.fullmatch(value) is None:
        raise ContractError("bad_timestamp", f"{field}={value[:100]!r} is not RFC 3339 with an offset")
    return valid_instant(str(value), field)


@lru_cache(maxsize=64)
def valid_instant(value: str, field: str) -> datetime:
    """The instant of `value`, which has already matched RFC3339_RE (the contract's Timestamp
    pattern, checked in pydantic-core): a record field that passed validation.

    Ingestion needs each timestamp twice (the month-13 rule in validation, then the stored row);
    the cache makes the second a lookup, and knowing the shape spares a second regex match.
    Failures are never cached, so errors stay per call.
    """
    # Python 3.11's fromisoformat reads the common spellings ('T' or ' ', 'Z' or an offset, any
    # number of fraction digits, cut to microseconds) as the rewrite below would, in a fifth of
    # the time; what it refuses (a lower-case 't' or 'z', month 13) takes the rewrite, which also
    # words the error.
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        pass
    # value = date, one separator, time, an optional fraction, then "Z"/"z" or "+HH:MM"/"-HH:MM".
    tail = value[19:]
    offset_at = len(tail) - (1 if tail[-1] in "Zz" else 6)
    offset = tail[offset_at:]
    frac = tail[:offset_at][:7]  # fromisoformat takes at most microseconds
    text = f"{value[:10]}T{value[11:19]}{frac}{'+00:00' if offset in ('Z', 'z') else offset}"
    try:
        return datetime.fromisoformat(text)
    except ValueError as err:  # e.g. month 13, hour 25
        raise ContractError("bad_timestamp", f"{field}={value!r}: {err}") from err
