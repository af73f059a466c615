"""Weekly partitions (a key is the Monday a week starts) and the live watch's daily ones, in UTC."""

from __future__ import annotations

import os
from datetime import UTC, date, datetime, time, timedelta

import dagster as dg

DEFAULT_START = "2026-01-05"  # a Monday; RETRAIN_START_DATE moves it

START_DATE = os.environ.get("RETRAIN_START_DATE", DEFAULT_START)

weekly_partitions = dg.WeeklyPartitionsDefinition(start_date=START_DATE, day_offset=1, timezone="UTC")

# The live watch judges one UTC day of served traffic per partition, from the same first day.
daily_partitions = dg.DailyPartitionsDefinition(start_date=START_DATE, timezone="UTC")


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
