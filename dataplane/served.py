"""What one policy version served, read from the store: by UTC day, and its latest interactions.

Days are UTC calendar days of `ended_at` (the daily watch's partitions are UTC days too), read as
half-open ranges [midnight, next midnight) so the query does not depend on the DuckDB session's
time zone.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import duckdb

# Queries group by `CAST(timezone('UTC', ended_at) AS DATE)`: the UTC calendar day an interaction
# ended on, whatever the session's time zone. Written out in each query, not interpolated: no SQL
# text here is built from Python values (tests/test_security.py).


def day_range(day: date | str) -> tuple[datetime, datetime]:
    """[start, end) of the UTC day `day` (a date or YYYY-MM-DD)."""
    first = date.fromisoformat(day) if isinstance(day, str) else day
    start = datetime.combine(first, time(0), tzinfo=UTC)
    return start, start + timedelta(days=1)


def records_served_on(con: duckdb.DuckDBPyConnection, policy_version: str, day: date | str) -> list[dict]:
    """Every interaction `policy_version` served that ended on the UTC day `day`, in (ended_at, id) order."""
    start, end = day_range(day)
    rows = con.execute(
        "SELECT record FROM interactions WHERE policy_version = ? AND ended_at >= ? AND ended_at < ? "
        "ORDER BY ended_at, interaction_id",
        [policy_version, start, end],
    ).fetchall()
    return [json.loads(row[0]) for row in rows]


def latest_served(con: duckdb.DuckDBPyConnection, policy_version: str, limit: int) -> list[dict]:
    """The latest `limit` interactions `policy_version` served, newest first."""
    rows = con.execute(
        "SELECT record FROM interactions WHERE policy_version = ? ORDER BY ended_at DESC, interaction_id LIMIT ?",
        [policy_version, limit],
    ).fetchall()
    return [json.loads(row[0]) for row in rows]


@dataclass(frozen=True)
class ServedDay:
    """One UTC day of a policy version's traffic: how many interactions, how many carry gold."""

    day: str
    interactions: int
    with_gold: int


def served_days(con: duckdb.DuckDBPyConnection, policy_version: str) -> list[ServedDay]:
    """Every UTC day on which `policy_version` served, oldest first."""
    rows = con.execute(
        "SELECT CAST(timezone('UTC', ended_at) AS DATE) AS day, count(*), count(*) FILTER (WHERE has_gold) "
        "FROM interactions "
        "WHERE policy_version = ? GROUP BY day ORDER BY day",
        [policy_version],
    ).fetchall()
    return [ServedDay(day.isoformat(), n, gold) for day, n, gold in rows]
