"""Calibration versions over time: when a new one is frozen, and which one each week is judged on.

A version is frozen (`evaluation.eval_sets.freeze_calibration_set`, never rewritten) from the pool
of eligible interactions: stored conversations of calibration-split customers that carry gold and
an agreed human verdict (the record's own `human_label`, review labels, or both when the raters
agree). Labels keep arriving each week, so the pool grows; a new version is frozen from the whole
pool when at least `refresh_after` eligible interactions are not in the current version (the
weekly run, `week_calibration`), or whenever someone asks (`refresh_calibration`, behind
`retrain calibration refresh`).

Each week is pinned, in DuckDB `calibration_week`, to the version its first run used. A re-run of
the week (a retry or a backfill) reads the pin and evaluates on that version again, never a newer
one; candidate and baseline are rolled out on the same records of it within a run. So a week never
compares two different versions, and its number stays comparable with what it reported first.

All of it is per domain (`domain`, default retail): a domain has its own versions, pool and pins,
and the pool holds only its replayable interactions (the set is evaluated by replaying them).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

import duckdb

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.labels import labels_for, records_with_verdicts, tally
from dataplane.splits import split_of as default_split_of
from evaluation.eval_sets import (
    CalibrationSet,
    EvalSetError,
    SplitFn,
    calibration_eligible,
    calibration_set,
    calibration_versions,
    current_calibration_set,
    ensure_tables,
    freeze_calibration_set,
)

# Eligible interactions that must accrue outside the current version before the weekly run freezes
# a new one: enough to move the set's success estimate, few enough to refresh every few weeks of a
# 200-a-week review. The run config `calibration_report.calibration_refresh_after` overrides it.
DEFAULT_REFRESH_AFTER = 50


@dataclass(frozen=True)
class WeekCalibration:
    """The version a week is judged on and how it was chosen: `pinned_before` when an earlier run of
    the week had pinned it, `frozen_now` when this call froze it, `new_eligible` how many eligible
    interactions are outside the version (None when the pin decided and the pool was not read)."""

    week: str
    version: CalibrationSet
    pinned_before: bool
    frozen_now: bool
    new_eligible: int | None


@dataclass(frozen=True)
class Refresh:
    """What `refresh_calibration` did: the version now current, whether it froze it, and how many
    eligible interactions were outside the previous version."""

    version: CalibrationSet
    frozen_now: bool
    new_eligible: int


def check_refresh_after(refresh_after: int) -> int:
    if isinstance(refresh_after, bool) or not isinstance(refresh_after, int) or refresh_after < 1:
        raise ValueError(f"calibration_refresh_after must be an integer >= 1, got {refresh_after!r}")
    return refresh_after


def eligible_verdicts(
    con: duckdb.DuckDBPyConnection,
    before: datetime | None = None,
    split_of: SplitFn = default_split_of,
    domain: str = DEFAULT_DOMAIN,
) -> dict[str, bool]:
    """`domain`'s calibration pool by interaction id, with each one's agreed verdict: calibration-split
    customers' stored replayable interactions with gold that ended before `before` (None: any time).

    Only labelled interactions are read (a record label, or a row in `labels`, which every writer's
    `open_store` creates), so the cost follows the labels, not the size of the log.
    """
    rows = con.execute(
        "SELECT interaction_id, customer_id FROM interactions WHERE has_gold AND replayable AND domain = $domain "
        "AND (human_task_success IS NOT NULL OR interaction_id IN (SELECT interaction_id FROM labels)) "
        "AND ($before IS NULL OR ended_at < $before)",
        {"before": before, "domain": domain},
    ).fetchall()
    splits: dict[str, str] = {}
    for _rid, customer in rows:
        if customer not in splits:
            splits[customer] = split_of(customer)
    candidates = [rid for rid, customer in rows if splits[customer] == "calibration"]
    return tally(labels_for(con, candidates)).agreed if candidates else {}


def outside(version: CalibrationSet | None, pool: dict[str, bool]) -> int:
    """How many of the pool's interactions are not in `version` (all of them before any version)."""
    members = set(version.interaction_ids) if version else set()
    return sum(rid not in members for rid in pool)


def _freeze_pool(
    con: duckdb.DuckDBPyConnection,
    pool: dict[str, bool],
    current: CalibrationSet | None,
    split_of: SplitFn,
    now: datetime | None,
    domain: str,
) -> CalibrationSet:
    if not pool:
        raise EvalSetError(
            "empty_set",
            f"no stored replayable {domain} interaction of a calibration-split customer has gold and an agreed "
            "human label (label some: retrain review export / import, or human_label in the records)",
        )
    records = calibration_eligible(records_with_verdicts(con, pool), split_of, domain)
    return freeze_calibration_set(
        con, records, force_new=current is not None, split_of=split_of, now=now, domain=domain
    )


def pinned_version(con: duckdb.DuckDBPyConnection, week: str, domain: str = DEFAULT_DOMAIN) -> str | None:
    """The version `domain`'s `week` is pinned to, or None before its first run."""
    ensure_tables(con)
    row = con.execute("SELECT version FROM calibration_week WHERE domain = ? AND week = ?", [domain, week]).fetchone()
    return None if row is None else row[0]


def pinned_weeks(con: duckdb.DuckDBPyConnection, domain: str = DEFAULT_DOMAIN) -> dict[str, list[str]]:
    """`domain`'s weeks pinned to each version, by version, weeks in order."""
    ensure_tables(con)
    rows = con.execute("SELECT version, week FROM calibration_week WHERE domain = ? ORDER BY week", [domain]).fetchall()
    out: dict[str, list[str]] = {}
    for version, week in rows:
        out.setdefault(version, []).append(week)
    return out


def week_calibration(
    con: duckdb.DuckDBPyConnection,
    week: str,
    *,
    before: datetime,
    refresh_after: int = DEFAULT_REFRESH_AFTER,
    split_of: SplitFn = default_split_of,
    now: datetime | None = None,
    domain: str = DEFAULT_DOMAIN,
) -> WeekCalibration:
    """The calibration version `week` is judged on; see the module docstring.

    A week already pinned gets its pinned version. Otherwise the pool is read as of `before` (the
    week's end: a backfill of an old week never freezes later interactions in), a new version is
    frozen when none exists or at least `refresh_after` eligible interactions are outside the
    current one, and the week is pinned to the result. All in one transaction: a failure pins
    nothing and freezes nothing. Raises EvalSetError (`empty_set`) when no version exists and the
    pool is empty, `pinned_version_missing` when the pinned version is gone.
    """
    check_refresh_after(refresh_after)
    ensure_tables(con)
    con.begin()
    try:
        pinned = pinned_version(con, week, domain)
        if pinned is not None:
            stored = calibration_set(con, pinned, domain)
            if stored is None:
                raise EvalSetError(
                    "pinned_version_missing", f"week {week} is pinned to calibration version {pinned!r}, not stored"
                )
            con.commit()
            return WeekCalibration(week, stored, pinned_before=True, frozen_now=False, new_eligible=None)
        current = current_calibration_set(con, domain)
        pool = eligible_verdicts(con, before, split_of, domain)
        accrued = outside(current, pool)
        chosen = current
        if current is None or accrued >= refresh_after:
            chosen = _freeze_pool(con, pool, current, split_of, now, domain)
        assert chosen is not None
        con.execute(
            "INSERT INTO calibration_week (domain, week, version, pinned_at) VALUES (?, ?, ?, ?)",
            [domain, week, chosen.version, now or datetime.now(UTC)],
        )
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return WeekCalibration(week, chosen, pinned_before=False, frozen_now=chosen is not current, new_eligible=accrued)


def refresh_calibration(
    con: duckdb.DuckDBPyConnection,
    *,
    before: datetime | None = None,
    split_of: SplitFn = default_split_of,
    now: datetime | None = None,
    domain: str = DEFAULT_DOMAIN,
) -> Refresh:
    """Freeze a new version from the whole pool now, whatever the weekly threshold, when at least one
    eligible interaction is outside the current version; otherwise keep the current one.

    Weeks already pinned keep their versions; the next week not yet run picks the new one up.
    """
    ensure_tables(con)
    con.begin()
    try:
        current = current_calibration_set(con, domain)
        pool = eligible_verdicts(con, before, split_of, domain)
        accrued = outside(current, pool)
        chosen = _freeze_pool(con, pool, current, split_of, now, domain) if current is None or accrued else current
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return Refresh(chosen, frozen_now=chosen is not current, new_eligible=accrued)


def version_listing(con: duckdb.DuckDBPyConnection, domain: str = DEFAULT_DOMAIN) -> list[dict]:
    """`domain`'s versions, oldest first: rows, digest (the set hash), created_at and the weeks pinned to it."""
    weeks = pinned_weeks(con, domain)
    out = []
    for name in calibration_versions(con, domain):
        stored = calibration_set(con, name, domain)
        assert stored is not None
        out.append(
            {
                "version": name,
                "rows": stored.rows,
                "digest": stored.set_hash,
                "created_at": stored.created_at.astimezone(UTC).isoformat(),
                "weeks": weeks.get(name, []),
            }
        )
    return out
