"""Weekly partitions: a partition key is the Monday a week starts (UTC)."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, time, timedelta

import dagster as dg

DEFAULT_START = "2026-01-05"  # a Monday; RETRAIN_START_DATE moves it

weekly_partitions = dg.WeeklyPartitionsDefinition(
    start_date=os.environ.get("RETRAIN_START_DATE", DEFAULT_START), day_offset=1, timezone="UTC"
)


class WeekError(ValueError):
    """A --week value that is not a date, or before the first partition."""


def week_key(day: str | date) -> str:
    """The partition key (Monday, YYYY-MM-DD) of the week that contains `day`."""
    if isinstance(day, str):
        try:
            day = date.fromisoformat(day)
        except ValueError as err:
            raise WeekError(f"week {day!r} is not a date in YYYY-MM-DD form") from err
    monday = day - timedelta(days=day.weekday())
    return monday.isoformat()


def week_end(key: str) -> datetime:
    """The exclusive end of week `key`: the next Monday 00:00 UTC."""
    start = datetime.combine(date.fromisoformat(key), time(0), tzinfo=UTC)
    return start + timedelta(days=7)
