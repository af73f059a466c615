"""Calibration versions over time: when a new one is frozen, and which one each week is judged on.

A version is frozen (`evaluation.eval_sets.freeze_calibration_set`, never rewritten) from a draw of
the pool of eligible interactions: stored replayable conversations of calibration-split customers
that carry gold (their success is verified against the gold, so no person's verdict is needed).
The draw never looks at labels: it is the `size` interactions of the pool with the lowest stable
hash of their id (`dataplane.splits.stable_point` with its own salt, as the split places
customers), so which interactions somebody labelled, or left unlabelled, cannot choose the set.
Traffic keeps arriving, so the pool grows; a new version is frozen from the draw when at least
`refresh_after` drawn interactions are not in the current version (the weekly run,
`week_calibration`), or whenever someone asks (`refresh_calibration`, behind `retrain calibration
refresh`).

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
from dataplane.settings import setting
from dataplane.splits import split_of as default_split_of
from dataplane.splits import stable_point
from dataplane.store import load_records
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


@dataclass(frozen=True)
class RefreshSettings:
    """When the weekly run freezes a new calibration version (`calibration_report`'s run config
    `calibration_refresh_after`); `retrain calibration refresh` freezes one at any time."""

    # Enough to move the set's success estimate, few enough to refresh every few weeks of a
    # 200-a-week review.
    refresh_after: int = setting(
        50,
        "eligible interactions (calibration customer, gold, agreed human label) that must accrue outside "
        "the current calibration version before the week's first run freezes a new one",
    )


DEFAULT_REFRESH_AFTER = RefreshSettings.refresh_after
# The most interactions a version holds: five times the 200 tasks `calibration_report` evaluates by
# default, so a curriculum level's filter still leaves enough, while a version of a busy log stays
# bounded (the pool holds every calibration customer's gold conversation ever stored).
DEFAULT_CALIBRATION_SIZE = 1_000
# The draw's own salt: its hash is unrelated to the split's (which is of the customer, not the
# interaction), and changing it would redraw every future version.
DRAW_SALT = "agent-retrain/calibration-draw/v1"


@dataclass(frozen=True)
class WeekCalibration:
    """The version a week is judged on and how it was chosen: `pinned_before` when an earlier run of
    the week had pinned it, `frozen_now` when this call froze it, `new_eligible` how many drawn
    interactions are outside the version (None when the pin decided and the pool was not read)."""

    week: str
    version: CalibrationSet
    pinned_before: bool
    frozen_now: bool
    new_eligible: int | None


@dataclass(frozen=True)
class Refresh:
    """What `refresh_calibration` did: the version now current, whether it froze it, and how many
    drawn interactions were outside the previous version."""

    version: CalibrationSet
    frozen_now: bool
    new_eligible: int


def check_refresh_after(refresh_after: int) -> int:
    if isinstance(refresh_after, bool) or not isinstance(refresh_after, int) or refresh_after < 1:
        raise ValueError(f"calibration_refresh_after must be an integer >= 1, got {refresh_after!r}")
    return refresh_after


def check_size(size: int) -> int:
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        raise ValueError(f"calibration size must be an integer >= 1, got {size!r}")
    return size


def eligible_pool(
    con: duckdb.DuckDBPyConnection,
    before: datetime | None = None,
    split_of: SplitFn = default_split_of,
    domain: str = DEFAULT_DOMAIN,
) -> list[str]:
    """`domain`'s calibration pool, ids in order: calibration-split customers' stored replayable
    interactions with gold that ended before `before` (None: any time). Labels play no part."""
    rows = con.execute(
        "SELECT interaction_id, customer_id FROM interactions WHERE has_gold AND replayable AND domain = $domain "
        "AND ($before IS NULL OR ended_at < $before) ORDER BY interaction_id",
        {"before": before, "domain": domain},
    ).fetchall()
    splits: dict[str, str] = {}
    for _rid, customer in rows:
        if customer not in splits:
            splits[customer] = split_of(customer)
    return [rid for rid, customer in rows if splits[customer] == "calibration"]


def calibration_draw(pool: list[str], size: int = DEFAULT_CALIBRATION_SIZE) -> list[str]:
    """The `size` ids of `pool` with the lowest stable hash (ties: by id), in that order.

    A function of the ids alone: the same pool gives the same draw on any machine, an interaction
    once drawn stays drawn until `size` lower-hashed ones have arrived, and nothing about labels
    (who labelled what, or whether) can move an interaction in or out.
    """
    check_size(size)
    return sorted(pool, key=lambda rid: (stable_point(rid, DRAW_SALT), rid))[:size]


def spread_over_customers(tasks: list[dict], n: int) -> list[dict]:
    """`n` of `tasks` (in the version's order) taking every customer's first task before anyone's
    second, and so on: the gates' intervals resample customers, so a report of n tasks from as many
    customers as the version holds is judged on as many clusters as it can be. Label-blind like the
    draw: only the order and the customer ids decide."""
    check_size(n)
    rounds: dict[str, int] = {}
    ranked = []
    for position, task in enumerate(tasks):
        customer = str(task.get("customer_id", ""))
        rounds[customer] = rounds.get(customer, 0) + 1
        ranked.append((rounds[customer], position, task))
    return [task for _, _, task in sorted(ranked, key=lambda item: item[:2])[:n]]


def outside(version: CalibrationSet | None, drawn: list[str]) -> int:
    """How many of the drawn interactions are not in `version` (all of them before any version)."""
    members = set(version.interaction_ids) if version else set()
    return sum(rid not in members for rid in drawn)


def _freeze_draw(
    con: duckdb.DuckDBPyConnection,
    drawn: list[str],
    current: CalibrationSet | None,
    split_of: SplitFn,
    now: datetime | None,
    domain: str,
) -> CalibrationSet:
    if not drawn:
        raise EvalSetError(
            "empty_set",
            f"no stored replayable {domain} interaction of a calibration-split customer has gold "
            "(calibration needs recorded conversations with gold actions to verify success against)",
        )
    records = calibration_eligible(load_records(con, drawn), split_of, domain)
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
    size: int = DEFAULT_CALIBRATION_SIZE,
) -> WeekCalibration:
    """The calibration version `week` is judged on; see the module docstring.

    A week already pinned gets its pinned version. Otherwise the pool is read as of `before` (the
    week's end: a backfill of an old week never freezes later interactions in) and drawn
    (`calibration_draw`, `size`), a new version is frozen when none exists or at least
    `refresh_after` drawn interactions are outside the current one, and the week is pinned to the
    result. All in one transaction: a failure pins
    nothing and freezes nothing. Raises EvalSetError (`empty_set`) when no version exists and the
    pool is empty, `pinned_version_missing` when the pinned version is gone.
    """
    check_refresh_after(refresh_after)
    check_size(size)
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
        drawn = calibration_draw(eligible_pool(con, before, split_of, domain), size)
        accrued = outside(current, drawn)
        chosen = current
        if current is None or accrued >= refresh_after:
            chosen = _freeze_draw(con, drawn, current, split_of, now, domain)
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
    size: int = DEFAULT_CALIBRATION_SIZE,
) -> Refresh:
    """Freeze a new version from the pool's draw (`calibration_draw`, `size`) now, whatever the weekly
    threshold, when at least one drawn interaction is outside the current version; otherwise keep
    the current one.

    Weeks already pinned keep their versions; the next week not yet run picks the new one up.
    """
    check_size(size)
    ensure_tables(con)
    con.begin()
    try:
        current = current_calibration_set(con, domain)
        drawn = calibration_draw(eligible_pool(con, before, split_of, domain), size)
        accrued = outside(current, drawn)
        chosen = _freeze_draw(con, drawn, current, split_of, now, domain) if current is None or accrued else current
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
