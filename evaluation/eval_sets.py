"""The two held-out evaluation sets, stored in DuckDB.

Calibration set: frozen and versioned. A version is frozen from calibration-split interactions that
carry gold actions (success is verified against the gold; which interactions people labelled plays
no part, see `evaluation.calibration_versions`); a stored version is never rewritten, and a new version appears
only through an explicit `freeze_calibration_set(..., force_new=True)` (or a new explicit version
name). When a new version is frozen, and which version each week is judged on (a week is pinned to
the version its first run used), is `evaluation.calibration_versions`.

Shadow set: per week, up to 5,000 (configurable) shadow-split conversations with gold, the newest
first, drawn from the whole stored log (`interactions`), not only the week's window: a week whose
window holds too few takes older ones. Only conversations that ended before the week's end (the
window's own exclusive cut-off) qualify, so a backfill of an old week never sees later traffic. The
selection is a top-N query in DuckDB; only the split, a hash of the customer id, is computed in
Python, over the distinct customers with gold. Candidate and champion replay the set with the same
seeds so outcomes pair up per conversation. Once stored, a week's set is reused on every re-run.

Both live in tables `calibration_sets` / `shadow_sets` (ids and positions only: the records
themselves stay in `interactions`, which is append-only, and the set hash covers each record's
content hash, so any drift of the underlying rows is detectable). The tables are created (and a
store from before domains migrated) here with the schema `dataplane.store_schema` declares, so
either module may be first to touch a database.

Every set belongs to one domain (`domain`, default retail): versions and weeks are keyed by
(domain, version) and (domain, week), and a set only ever holds its domain's interactions, each
one replayable (its initial_state rebuilt whole: every native record; see `dataplane.openai_chat`),
since both sets are evaluated by replaying conversations.

Neither set is ever trained on: splits are by customer (a shadow customer is never a train
customer, whichever week's window is trained on), and `assert_disjoint_from_training` is the
explicit check a training asset (and a test) runs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar

import duckdb

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.splits import split_of as default_split_of
from dataplane.store import gold_customers_before, load_records, newest_with_gold
from dataplane.store_schema import ensure_schema

DEFAULT_SHADOW_SIZE = 5_000

# The tables are part of the store's schema (dataplane.store_schema); one definition serves both.
_TABLES = ("calibration_sets", "calibration_week", "shadow_sets")

SplitFn = Callable[[str], str]


class EvalSetError(ValueError):
    """A record cannot enter an evaluation set, or a set operation breaks a rule.

    `.rule` is a short name (`not_calibration_split`, `no_gold`, `wrong_domain`,
    `not_replayable`, `duplicate_record`, `not_in_store`, `empty_set`, `frozen_version_exists`,
    `new_version_needs_force`, `pinned_version_missing`); `.record_id` names the offending
    interaction when there is one.
    """

    def __init__(self, rule: str, detail: str, record_id: str | None = None):
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail
        self.record_id = record_id


class TrainingLeakError(AssertionError):
    """Interactions of an evaluation set appear in a training set; `.overlap` lists them."""

    def __init__(self, set_name: str, overlap: Sequence[str]):
        super().__init__(
            f"{len(overlap)} interaction(s) of {set_name} are in the training data, e.g. {list(overlap)[:5]}"
        )
        self.set_name = set_name
        self.overlap = tuple(overlap)


@dataclass(frozen=True)
class StoredSet:
    """One stored evaluation set: its ids in stored order, the hash over their content, when it was
    stored. `key` names it within its table and domain (a calibration version, a shadow week);
    `created` is False when a set already stored was returned instead of a new one."""

    # Per kind: its stored rows, in position order, by key; one row's insert; how a message names it.
    select_sql: ClassVar[str]
    insert_sql: ClassVar[str]
    label_format: ClassVar[str]

    key: str
    interaction_ids: tuple[str, ...]
    set_hash: str
    created_at: datetime
    created: bool = False
    domain: str = DEFAULT_DOMAIN

    @property
    def rows(self) -> int:
        return len(self.interaction_ids)

    @property
    def label(self) -> str:
        label = self.label_format.format(self.key)
        return label if self.domain == DEFAULT_DOMAIN else f"{self.domain} {label}"

    def records(self, con: duckdb.DuckDBPyConnection) -> list[dict]:
        return load_records(con, list(self.interaction_ids))


class CalibrationSet(StoredSet):
    """One frozen calibration version."""

    select_sql = (
        "SELECT interaction_id, set_hash, created_at FROM calibration_sets WHERE domain = ? AND version = ? "
        "ORDER BY position"
    )
    insert_sql = (
        "INSERT INTO calibration_sets (domain, version, position, interaction_id, set_hash, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)"
    )
    label_format = "calibration set {}"

    @property
    def version(self) -> str:
        return self.key


class ShadowSet(StoredSet):
    """The shadow set of one week, most recent conversation first."""

    select_sql = (
        "SELECT interaction_id, set_hash, created_at FROM shadow_sets WHERE domain = ? AND week = ? ORDER BY position"
    )
    insert_sql = (
        "INSERT INTO shadow_sets (domain, week, position, interaction_id, set_hash, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)"
    )
    label_format = "shadow set of {}"

    @property
    def week(self) -> str:
        return self.key


S = TypeVar("S", bound=StoredSet)


def _load(con: duckdb.DuckDBPyConnection, kind: type[S], key: str, domain: str) -> S | None:
    rows = con.execute(kind.select_sql, [domain, key]).fetchall()
    if not rows:
        return None
    return kind(key, tuple(r[0] for r in rows), rows[0][1], rows[0][2], domain=domain)


def _store(
    con: duckdb.DuckDBPyConnection, kind: type[S], key: str, ids: Sequence[str], now: datetime | None, domain: str
) -> S:
    """Insert a new set (every id must be a replayable interaction of `domain` in `interactions`)
    and return it with `created=True`."""
    set_hash = _set_hash(con, ids, domain)
    created_at = now or datetime.now(UTC)
    con.executemany(kind.insert_sql, [[domain, key, i, rid, set_hash, created_at] for i, rid in enumerate(ids)])
    stored = _load(con, kind, key, domain)
    assert stored is not None
    return replace(stored, created=True)


def ensure_tables(con: duckdb.DuckDBPyConnection) -> None:
    """Create the evaluation-set tables that are missing, migrating them from before domains."""
    ensure_schema(con, _TABLES)


def calibration_problem(
    record: dict[str, Any], split_of: SplitFn = default_split_of, domain: str = DEFAULT_DOMAIN
) -> str | None:
    """The rule `record` breaks for `domain`'s calibration set, or None when it is eligible."""
    if record.get("domain", DEFAULT_DOMAIN) != domain:
        return "wrong_domain"
    if split_of(record["customer_id"]) != "calibration":
        return "not_calibration_split"
    if not record.get("gold"):
        return "no_gold"
    return None


def calibration_eligible(
    records: Iterable[dict], split_of: SplitFn = default_split_of, domain: str = DEFAULT_DOMAIN
) -> list[dict]:
    """The records that may enter `domain`'s calibration set, ordered by interaction id."""
    keep = [r for r in records if calibration_problem(r, split_of, domain) is None]
    return sorted(keep, key=lambda r: r["interaction_id"])


def _set_hash(con: duckdb.DuckDBPyConnection, ids: Sequence[str], domain: str) -> str:
    """sha256 over (position, id, content_hash): the set changes if any member's content does.

    Raises EvalSetError for an id that is not stored, not `domain`'s or not replayable."""
    rows = con.execute(
        "SELECT interaction_id, content_hash, domain, replayable FROM interactions "
        "WHERE interaction_id IN (SELECT unnest(?))",
        [list(ids)],
    ).fetchall()
    hashes = {rid: content for rid, content, _domain, _replayable in rows}
    missing = [i for i in ids if i not in hashes]
    if missing:
        raise EvalSetError(
            "not_in_store", f"{len(missing)} record(s) are not in `interactions`, e.g. {missing[:3]}", missing[0]
        )
    for rid, _content, found, replayable in rows:
        if found != domain:
            raise EvalSetError("wrong_domain", f"record {rid!r} is of domain {found!r}, not {domain!r}", rid)
        if not replayable:
            raise EvalSetError("not_replayable", f"record {rid!r} has no initial_state to replay it from", rid)
    digest = hashlib.sha256()
    for position, rid in enumerate(ids):
        digest.update(f"{position}\t{rid}\t{hashes[rid]}\n".encode())
    return digest.hexdigest()


def calibration_versions(con: duckdb.DuckDBPyConnection, domain: str = DEFAULT_DOMAIN) -> list[str]:
    """Every stored version of `domain`, oldest first."""
    ensure_tables(con)
    rows = con.execute(
        "SELECT version, min(created_at) AS t FROM calibration_sets WHERE domain = ? GROUP BY version "
        "ORDER BY t, version",
        [domain],
    ).fetchall()
    return [r[0] for r in rows]


def calibration_set(
    con: duckdb.DuckDBPyConnection, version: str, domain: str = DEFAULT_DOMAIN
) -> CalibrationSet | None:
    """A stored version of `domain` by name, or None."""
    ensure_tables(con)
    return _load(con, CalibrationSet, version, domain)


def current_calibration_set(con: duckdb.DuckDBPyConnection, domain: str = DEFAULT_DOMAIN) -> CalibrationSet | None:
    """`domain`'s most recently frozen version, or None before its first freeze."""
    versions = calibration_versions(con, domain)
    return _load(con, CalibrationSet, versions[-1], domain) if versions else None


def _next_version(existing: Sequence[str]) -> str:
    n = len(existing) + 1
    while f"v{n}" in existing:
        n += 1
    return f"v{n}"


def freeze_calibration_set(
    con: duckdb.DuckDBPyConnection,
    records: Sequence[dict],
    version: str | None = None,
    force_new: bool = False,
    *,
    split_of: SplitFn = default_split_of,
    now: datetime | None = None,
    domain: str = DEFAULT_DOMAIN,
) -> CalibrationSet:
    """Freeze `records` as a calibration version of `domain`, or return the version already frozen.

    - No version stored yet: store one (`version` or "v1").
    - A version stored and neither `force_new` nor a new `version` name: return the current one
      untouched (`created=False`); `records` are ignored. This is what makes "built once" hold
      when the weekly job calls it every week.
    - `version` names a stored version: returned if its content matches, else
      `frozen_version_exists` (a frozen version is never rewritten).
    - A new version while one exists requires `force_new=True` (the explicit command).
    Every record must be eligible (the domain's, calibration split, gold) and a
    replayable interaction in `interactions`. Versions are named per domain.
    """
    ensure_tables(con)
    existing = calibration_versions(con, domain)
    if existing and version is None and not force_new:
        current = _load(con, CalibrationSet, existing[-1], domain)
        assert current is not None
        return current
    ids = _validated_ids(records, split_of, domain)
    if version is not None and version in existing:
        stored = _load(con, CalibrationSet, version, domain)
        assert stored is not None
        if stored.set_hash != _set_hash(con, ids, domain):
            raise EvalSetError(
                "frozen_version_exists",
                f"calibration version {version!r} is frozen with different content; freeze a new version instead",
            )
        return stored
    if existing and not force_new:
        raise EvalSetError(
            "new_version_needs_force",
            f"calibration versions {existing} exist; a new version {version!r} needs force_new=True",
        )
    return _store(con, CalibrationSet, version or _next_version(existing), ids, now, domain)


def _validated_ids(records: Sequence[dict], split_of: SplitFn, domain: str) -> list[str]:
    if not records:
        raise EvalSetError("empty_set", "no eligible records to freeze")
    seen: set[str] = set()
    for record in records:
        rid = record["interaction_id"]
        problem = calibration_problem(record, split_of, domain)
        if problem is not None:
            raise EvalSetError(problem, f"record {rid!r} cannot enter the calibration set", rid)
        if rid in seen:
            raise EvalSetError("duplicate_record", f"record {rid!r} given twice", rid)
        seen.add(rid)
    return sorted(seen)


def select_shadow(
    con: duckdb.DuckDBPyConnection,
    before: datetime,
    size: int = DEFAULT_SHADOW_SIZE,
    split_of: SplitFn = default_split_of,
    domain: str = DEFAULT_DOMAIN,
) -> list[str]:
    """Ids of up to `size` of `domain`'s replayable shadow-split conversations with gold that ended
    before `before`, over the whole stored log, newest first (equal times by interaction id)."""
    if size < 1:
        raise ValueError(f"shadow set size must be positive, got {size}")
    if before.tzinfo is None or before.utcoffset() is None:
        # DuckDB would read a naive time in the session's zone: the cut-off would move with the machine.
        raise ValueError(f"the shadow cut-off must be timezone-aware, got naive {before.isoformat()}")
    shadow_customers = [c for c in gold_customers_before(con, before, domain) if split_of(c) == "shadow"]
    return newest_with_gold(con, shadow_customers, before, size, domain)


def shadow_set(con: duckdb.DuckDBPyConnection, week: str, domain: str = DEFAULT_DOMAIN) -> ShadowSet | None:
    """The stored shadow set of `domain`'s `week`, or None."""
    ensure_tables(con)
    return _load(con, ShadowSet, week, domain)


def build_shadow_set(
    con: duckdb.DuckDBPyConnection,
    week: str,
    before: datetime,
    size: int = DEFAULT_SHADOW_SIZE,
    *,
    split_of: SplitFn = default_split_of,
    now: datetime | None = None,
    domain: str = DEFAULT_DOMAIN,
) -> ShadowSet:
    """Select (`select_shadow`, ended before `before`: the week's end) and store `domain`'s shadow
    set of `week`, or return the one stored by an earlier run.

    Re-running a week never rewrites its shadow set, so a backfill evaluates on the same
    conversations as the original run did.
    """
    ensure_tables(con)
    stored = _load(con, ShadowSet, week, domain)
    if stored is not None:
        return stored
    chosen = select_shadow(con, before, size, split_of, domain)
    if not chosen:
        raise EvalSetError(
            "empty_set",
            f"week {week}: no replayable {domain} shadow-split conversation with gold ended before "
            f"{before.isoformat()}",
        )
    return _store(con, ShadowSet, week, chosen, now, domain)


def shadow_counts(shadow: ShadowSet, window_ids: Iterable[str], requested: int) -> dict[str, int]:
    """Where `shadow`'s conversations came from: the week's window (`window_ids`) or the log before it
    (the window is the newest interactions before the same cut-off, so any other member is older).

    `requested` is the size asked for; `found` falls short of it when the log holds too few. A set
    reused from an earlier run keeps the size it was built with.
    """
    in_window = len(set(window_ids).intersection(shadow.interaction_ids))
    return {
        "found_in_window": in_window,
        "found_before_window": shadow.rows - in_window,
        "found": shadow.rows,
        "requested": requested,
    }


def assert_disjoint_from_training(train_ids: Iterable[str], *sets: StoredSet) -> None:
    """Raise TrainingLeakError if any interaction of `sets` is among `train_ids`.

    The training asset calls this on the ids of its GRPO dataset before training starts.
    """
    train = set(train_ids)
    for eval_set in sets:
        overlap = sorted(train.intersection(eval_set.interaction_ids))
        if overlap:
            raise TrainingLeakError(eval_set.label, overlap)
