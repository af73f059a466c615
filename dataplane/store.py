"""The DuckDB store `interactions.duckdb`: schema, opening with a clear lock error, record loading.

`interactions.interaction_id` is a PRIMARY KEY: a plain INSERT checks it through the index, so a
duplicate id can never be stored twice. Ingestion first tries a file with plain INSERTs alone;
only if the key refuses one does it redo the file asking, per chunk, which ids are stored already
(to count duplicates and quarantine conflicts), restricted to the chunk's id range so that
DuckDB's zone maps skip the row groups that cannot hold them, and plain-inserting the rest.
(`INSERT ... ON CONFLICT DO NOTHING` would do both in one statement, but DuckDB 2.0 runs it as a
MERGE that hash-joins against a full scan of every stored id: about 0.3 s per statement at 10
million rows, whatever the chunk's size.)
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.compute as pc

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.rowtext import scrubbed_canonical, storable_text
from dataplane.scrub import scrub_json_text
from dataplane.store_schema import SCHEMA as SCHEMA  # re-exported: the tables' one definition
from dataplane.store_schema import ensure_schema, needs_migration, table_columns
from dataplane.timestamps import valid_instant

_LOCK_POLL_SECONDS = 0.5


class StoreLockedError(RuntimeError):
    """Another process holds the DuckDB file; carries the path and DuckDB's own message."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"the store {path} is locked by another process: {reason}")
        self.path = path
        self.reason = reason


def open_store(
    path: str | os.PathLike, read_only: bool = False, wait_seconds: float = 0.0
) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) the store at `path` with every table in place.

    Read-only opens of a store that does not exist yet create it first, so readers never race the
    first writer over the schema. A lock held by another process raises StoreLockedError, at once
    or, with `wait_seconds`, once the lock has been held that long: DuckDB lets one process write
    at a time, and the other holders (an ingest, the live watch) let go within seconds.
    """
    path = Path(path)
    if read_only and not path.exists():
        open_store(path, wait_seconds=wait_seconds).close()
    path.parent.mkdir(parents=True, exist_ok=True)
    con = _connect(path, read_only, wait_seconds)
    if not read_only:
        ensure_schema(con)
    elif needs_migration(table_columns(con)):
        # A store from before domains, opened read-only first: migrate it once with a writer.
        con.close()
        open_store(path, wait_seconds=wait_seconds).close()
        con = _connect(path, read_only, wait_seconds)
    return con


def _connect(path: Path, read_only: bool, wait_seconds: float) -> duckdb.DuckDBPyConnection:
    deadline = time.monotonic() + max(wait_seconds, 0.0)
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.IOException as err:
            if "lock" not in str(err).lower():
                raise
            if time.monotonic() >= deadline:
                raise StoreLockedError(path, str(err)) from err
            time.sleep(_LOCK_POLL_SECONDS)


def load_records(con: duckdb.DuckDBPyConnection, ids: list[str]) -> list[dict]:
    """Full scrubbed records for `ids`, in the order given, each carrying `domain` (see
    `stored_record`); an unknown id raises KeyError."""
    if not ids:
        return []
    rows = con.execute(
        "SELECT interaction_id, record FROM interactions WHERE interaction_id IN (SELECT unnest(?))", [list(ids)]
    ).fetchall()
    by_id = {rid: text for rid, text in rows}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise KeyError(f"{len(missing)} interaction id(s) not in the store, e.g. {missing[:3]}")
    return [stored_record(by_id[i]) for i in ids]


def stored_record(text: str) -> dict:
    """A stored record's JSON as the normalised record it was: the default domain is left out of the
    stored text (so a record hashes as it did before domains), and is put back here."""
    record = json.loads(text)
    record.setdefault("domain", DEFAULT_DOMAIN)
    return record


def gold_customers_before(con: duckdb.DuckDBPyConnection, before: datetime, domain: str = DEFAULT_DOMAIN) -> list[str]:
    """Distinct customers of `domain` with at least one replayable interaction carrying gold that
    ended before `before`.

    Splits are a hash of the customer id computed in Python (`dataplane.splits`), so a caller picks a
    split's customers from this list rather than from every stored record.
    """
    rows = con.execute(
        "SELECT DISTINCT customer_id FROM interactions WHERE has_gold AND replayable AND domain = ? "
        "AND ended_at < ? ORDER BY customer_id",
        [domain, before],
    ).fetchall()
    return [r[0] for r in rows]


def newest_with_gold(
    con: duckdb.DuckDBPyConnection,
    customers: Sequence[str],
    before: datetime,
    limit: int,
    domain: str = DEFAULT_DOMAIN,
) -> list[str]:
    """Ids of up to `limit` replayable interactions of `domain`'s `customers` that carry gold and
    ended before `before`, newest first, equal times by interaction id: the top-N runs in DuckDB
    over the whole stored log, so only the chosen rows reach Python. (Replayable: the evaluation
    sets replay a conversation from its initial_state.)"""
    if not customers:
        return []
    con.register("_customers", pa.table({"customer_id": pa.array(list(customers), pa.string())}))
    try:
        rows = con.execute(
            "SELECT interaction_id FROM interactions "
            "WHERE has_gold AND replayable AND domain = ? AND ended_at < ? "
            "AND customer_id IN (SELECT customer_id FROM _customers) "
            "ORDER BY ended_at DESC, interaction_id LIMIT ?",
            [domain, before, limit],
        ).fetchall()
    finally:
        con.unregister("_customers")
    return [r[0] for r in rows]


_INTERACTION_COLUMNS = (
    "interaction_id",
    "started_at",
    "ended_at",
    "policy_version",
    "customer_id",
    "intent",
    "outcome",
    "escalation_was_necessary",
    "actions_taken",
    "customer_sentiment_delta",
    "has_gold",
    "human_task_success",
    "schema_version",
    "record",
    "content_hash",
    "domain",
    "replayable",
)
_HASH_AT = _INTERACTION_COLUMNS.index("content_hash")
_ARROW_TYPES = {
    "started_at": pa.timestamp("us", tz="UTC"),
    "ended_at": pa.timestamp("us", tz="UTC"),
    "escalation_was_necessary": pa.bool_(),
    "actions_taken": pa.int64(),
    "customer_sentiment_delta": pa.float64(),
    "has_gold": pa.bool_(),
    "human_task_success": pa.bool_(),
    "schema_version": pa.int32(),
    "replayable": pa.bool_(),
}


@dataclass
class PreparedRow:
    """A validated record scrubbed and serialised, ready for `interactions`."""

    values: tuple

    @property
    def interaction_id(self) -> str:
        return self.values[0]

    @property
    def content_hash(self) -> str:
        return self.values[_HASH_AT]

    @property
    def started_at(self) -> datetime:
        return self.values[1]

    @property
    def ended_at(self) -> datetime:
        return self.values[2]


def prepare_row(
    record: dict, replayable: bool = True, pii_free: frozenset[str] = frozenset(), json_native: bool = False
) -> PreparedRow:
    """Scrub a validated record and compute its stored JSON and content hash.

    `replayable`: whether the record's initial_state lets its calls be replayed (every native
    record's does). The default domain is left out of the stored text, so a record that says
    `"domain": "retail"` and one that says nothing are one interaction, hashed as before domains.
    `pii_free`: free-form fields known to hold nothing to mask (a reader's `RawRecord.pii_free`).
    `json_native`: the record holds JSON-native values only (a reader's `RawRecord.json_native`).
    Raises ContractError for a record that cannot be stored (see `rowtext.scrubbed_canonical`).
    """
    domain = record.get("domain", DEFAULT_DOMAIN)
    clean, text = scrubbed_canonical(
        record, leave_out_domain=domain == DEFAULT_DOMAIN, pii_free=pii_free, json_native=json_native
    )
    label = clean["human_label"]
    return PreparedRow(
        (
            clean["interaction_id"],
            valid_instant(clean["started_at"], "started_at"),
            valid_instant(clean["ended_at"], "ended_at"),
            clean["policy_version"],
            clean["customer_id"],
            clean["intent"],
            clean["outcome"],
            clean["escalation_was_necessary"],
            clean["actions_taken"],
            clean["customer_sentiment_delta"],
            clean["gold"] is not None,
            None if label is None else label["task_success"],
            clean["schema_version"],
            text,
            hashlib.sha256(text.encode()).hexdigest(),
            domain,
            replayable,
        )
    )


@dataclass
class FlushResult:
    inserted: list[str]
    not_inserted: dict[str, tuple[Any, str]]  # id -> (the caller's tag, stored content hash)


@dataclass
class RowBatch:
    """Accepted rows of one file awaiting a bulk insert; `flush` reports which ids were new."""

    source_file: str
    ingested_at: datetime
    rows: list[PreparedRow] = field(default_factory=list)
    tags: list[Any] = field(default_factory=list)
    ids_in_batch: set[str] = field(default_factory=set)
    # False: insert without asking which ids are stored; the primary key then raises
    # duckdb.ConstraintException on a stored id (the caller rolls back and retries with True).
    look_up_stored: bool = True

    def __len__(self) -> int:
        return len(self.rows)

    def append(self, row: PreparedRow, tag: Any) -> None:
        self.rows.append(row)
        self.tags.append(tag)
        self.ids_in_batch.add(row.interaction_id)

    def flush(self, con: duckdb.DuckDBPyConnection) -> FlushResult:
        """Insert the rows whose ids are new; ids already stored come back with their stored hash."""
        if not self.rows:
            return FlushResult([], {})
        table = rows_table(self.rows)
        stored = _stored_hashes(con, table.column("interaction_id")) if self.look_up_stored else {}
        if stored:
            table = table.filter(pc.invert(pc.is_in(table.column("interaction_id"), pa.array(list(stored)))))
        insert_interactions(con, table, self.source_file, self.ingested_at)
        inserted = table.column("interaction_id").to_pylist()
        # Stored ids are rare (a re-sent file): without any, no row of the chunk needs visiting.
        not_inserted = (
            {
                r.interaction_id: (tag, stored[r.interaction_id])
                for r, tag in zip(self.rows, self.tags)
                if r.interaction_id in stored
            }
            if stored
            else {}
        )
        self.rows, self.tags, self.ids_in_batch = [], [], set()
        return FlushResult(inserted, not_inserted)


def rows_table(rows: list[PreparedRow]) -> pa.Table:
    """Prepared rows as an Arrow table with the `interactions` columns but source_file and ingested_at."""
    columns = list(zip(*(r.values for r in rows)))
    return pa.table(
        {
            name: pa.array(col, type=_ARROW_TYPES.get(name, pa.string()))
            for name, col in zip(_INTERACTION_COLUMNS, columns)
        }
    )


# The BETWEEN on the looked-up ids' own range is implied by the IN; it is there because DuckDB
# prunes row groups with it (zone maps on interaction_id), so when ids grow with time, as
# sequential or time-ordered ids do, only the newest row groups are read. Random ids get no
# pruning: then a lookup reads every stored id, as ON CONFLICT did.
_STORED_IDS = (
    "SELECT interaction_id FROM interactions WHERE interaction_id BETWEEN ? AND ? "
    "AND interaction_id IN (SELECT interaction_id FROM _lookup_ids)"
)
_STORED_HASHES = (
    "SELECT interaction_id, content_hash FROM interactions WHERE interaction_id BETWEEN ? AND ? "
    "AND interaction_id IN (SELECT interaction_id FROM _lookup_ids)"
)


def _stored_hashes(con: duckdb.DuckDBPyConnection, ids: pa.ChunkedArray) -> dict[str, str]:
    """Content hash of each of `ids` already in `interactions` (exact).

    Asks for the ids alone first: with random ids that query reads every stored id, and reading
    the content hashes of every row as well would double it. The hashes are then fetched only for
    the ids found, which are rare (a re-sent file).
    """
    found = [row[0] for row in _lookup(con, _STORED_IDS, ids)]
    if not found:
        return {}
    return dict(_lookup(con, _STORED_HASHES, pa.array(found, pa.string())))


def _lookup(con: duckdb.DuckDBPyConnection, query: str, ids: pa.Array | pa.ChunkedArray) -> list[tuple]:
    """Run `query` (one of the lookups above) with `ids` as `_lookup_ids` and their range as parameters."""
    bounds = pc.min_max(ids)
    con.register("_lookup_ids", pa.table({"interaction_id": ids}))
    try:
        return con.execute(query, [bounds["min"].as_py(), bounds["max"].as_py()]).fetchall()
    finally:
        con.unregister("_lookup_ids")


# Columns named (not positional), so the layout of a migrated store and of a new one both fit.
_INSERT = (
    "INSERT INTO interactions (interaction_id, started_at, ended_at, policy_version, customer_id, intent, outcome, "
    "escalation_was_necessary, actions_taken, customer_sentiment_delta, has_gold, human_task_success, "
    "schema_version, record, content_hash, domain, replayable, source_file, ingested_at) "
    "SELECT *, ? AS source_file, ? AS ingested_at FROM _incoming"
)


def insert_interactions(
    con: duckdb.DuckDBPyConnection, table: pa.Table, source_file: str, ingested_at: datetime
) -> None:
    """Plain INSERT of rows with new ids (the primary key still rejects a stored one, with an error)."""
    if table.num_rows == 0:
        return
    con.register("_incoming", table)
    con.execute(_INSERT, [source_file, ingested_at]).fetchall()
    # Not in a `finally`: after a failed INSERT the transaction is aborted and refuses even this,
    # which would hide the real error; the caller rolls back, and the next register replaces it.
    con.unregister("_incoming")


def newest_ended_at(con: duckdb.DuckDBPyConnection) -> datetime | None:
    """The latest `ended_at` stored (None for an empty store): what ingestion's age horizon counts from."""
    # fetchall, not fetchone: DuckDB refuses a `register` while a result is left unfinished.
    [(newest,)] = con.execute("SELECT max(ended_at) FROM interactions").fetchall()
    return newest


@dataclass
class QuarantineRows:
    """Quarantine rows of one file, written in the file's transaction. `file_sha256`: the version
    of the file they came from (None when the file was not read), so that a later, complete
    version of it can mark them superseded (`supersede_quarantine`)."""

    source_file: str
    quarantined_at: datetime
    rows: list[tuple] = field(default_factory=list)
    file_sha256: str | None = None

    def add(
        self,
        line_no: int | None,
        rule: str,
        detail: str,
        raw: str | None,
        interaction_id: str | None,
        file_level: bool = False,
    ) -> None:
        # A rejected line is stored as read, so its free text is masked here: PII must not reach
        # any table, and the raw line, the rule's detail (which may quote a value) and an id
        # recovered from an invalid record are all free text.
        self.rows.append(
            (
                storable_text(self.source_file),
                line_no,
                rule,
                storable_text(scrub_json_text(detail)),
                None if raw is None else storable_text(scrub_json_text(raw)),
                None if interaction_id is None else storable_text(scrub_json_text(interaction_id)),
                file_level,
                self.quarantined_at,
                self.file_sha256,
            )
        )

    def flush(self, con: duckdb.DuckDBPyConnection) -> None:
        if self.rows:
            con.executemany(_INSERT_QUARANTINE, self.rows)
            self.rows = []


# Columns named: a store migrated in place has the later columns last, as a new one does.
_INSERT_QUARANTINE = (
    "INSERT INTO quarantine (source_file, line_no, rule, detail, raw, interaction_id, file_level, "
    "quarantined_at, file_sha256) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def supersede_quarantine(con: duckdb.DuckDBPyConnection, source_file: str, versions: list[str], by: str) -> int:
    """Mark the standing quarantine rows of `source_file`'s earlier `versions` (sha256s) as
    superseded by version `by`, which was read whole and holds each of them as its prefix; returns
    how many. (Rows from before versions were recorded carry none and are left standing.)"""
    if not versions:
        return 0
    [(count,)] = con.execute(
        "UPDATE quarantine SET superseded_by = ? WHERE source_file = ? AND superseded_by IS NULL "
        "AND file_sha256 IN (SELECT unnest(?))",
        [by, storable_text(source_file), list(versions)],
    ).fetchall()
    return int(count)
