"""The tables of `interactions.duckdb`, and the migration of a store written before domains.

Every table that depends on a domain carries `domain` (default 'retail'): `interactions` (plus
`replayable`: whether the record's initial_state lets its calls be replayed, false only for logs
whose state could not be rebuilt, see `dataplane.openai_chat`), and the per-domain sets keyed by
it: `windows` (domain, week), `calibration_sets` (domain, version), `calibration_week` (domain,
week) and `shadow_sets` (domain, week). `ensure_schema` creates what is missing and migrates a
store from before: the new `interactions` columns are added in place (old rows become retail and
replayable: they were native records), the keyed tables are rebuilt under their new key with their
rows as retail's. A migrated store answers every retail question as before. `labels` gained its
provenance columns (`os_user`, `sample_id`) later; they are added in place the same way.
"""

from __future__ import annotations

import duckdb

# `interactions` keeps its column order from before domains with the new columns last, which is
# where ALTER TABLE ADD COLUMN puts them in a migrated store: both layouts are the same.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS interactions (
        interaction_id VARCHAR PRIMARY KEY,
        started_at TIMESTAMPTZ NOT NULL,
        ended_at TIMESTAMPTZ NOT NULL,
        policy_version VARCHAR NOT NULL,
        customer_id VARCHAR NOT NULL,
        intent VARCHAR NOT NULL,
        outcome VARCHAR NOT NULL,
        escalation_was_necessary BOOLEAN,
        actions_taken BIGINT NOT NULL,
        customer_sentiment_delta DOUBLE NOT NULL,
        has_gold BOOLEAN NOT NULL,
        human_task_success BOOLEAN,
        schema_version INTEGER NOT NULL,
        record VARCHAR NOT NULL,
        content_hash VARCHAR NOT NULL,
        source_file VARCHAR NOT NULL,
        ingested_at TIMESTAMPTZ NOT NULL,
        domain VARCHAR NOT NULL DEFAULT 'retail',
        replayable BOOLEAN NOT NULL DEFAULT true)""",
    """CREATE TABLE IF NOT EXISTS quarantine (
        source_file VARCHAR NOT NULL,
        line_no BIGINT,
        rule VARCHAR NOT NULL,
        detail VARCHAR NOT NULL,
        raw VARCHAR,
        interaction_id VARCHAR,
        file_level BOOLEAN NOT NULL,
        quarantined_at TIMESTAMPTZ NOT NULL,
        file_sha256 VARCHAR,
        superseded_by VARCHAR)""",
    """CREATE TABLE IF NOT EXISTS ingested_files (
        path VARCHAR NOT NULL,
        size BIGINT NOT NULL,
        sha256 VARCHAR NOT NULL,
        status VARCHAR NOT NULL,
        read BIGINT NOT NULL,
        accepted BIGINT NOT NULL,
        duplicates BIGINT NOT NULL,
        quarantined BIGINT NOT NULL,
        ingested_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (path, size, sha256))""",
    """CREATE TABLE IF NOT EXISTS windows (
        domain VARCHAR NOT NULL DEFAULT 'retail',
        week VARCHAR NOT NULL,
        position INTEGER NOT NULL,
        interaction_id VARCHAR NOT NULL,
        content_hash VARCHAR NOT NULL,
        window_hash VARCHAR NOT NULL,
        week_end TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (domain, week, position))""",
    """CREATE TABLE IF NOT EXISTS calibration_sets (
        domain VARCHAR NOT NULL DEFAULT 'retail',
        version VARCHAR NOT NULL,
        position INTEGER NOT NULL,
        interaction_id VARCHAR NOT NULL,
        set_hash VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (domain, version, position))""",
    # The calibration version each week was judged on (evaluation/calibration_versions.py): pinned
    # by the week's first run, so a re-run (backfill) of the week uses it again, never a newer one.
    """CREATE TABLE IF NOT EXISTS calibration_week (
        domain VARCHAR NOT NULL DEFAULT 'retail',
        week VARCHAR NOT NULL,
        version VARCHAR NOT NULL,
        pinned_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (domain, week))""",
    """CREATE TABLE IF NOT EXISTS shadow_sets (
        domain VARCHAR NOT NULL DEFAULT 'retail',
        week VARCHAR NOT NULL,
        position INTEGER NOT NULL,
        interaction_id VARCHAR NOT NULL,
        set_hash VARCHAR NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        PRIMARY KEY (domain, week, position))""",
    # Human review labels (dataplane/labels.py): one per (interaction, rater); the record itself
    # is never changed, a label only annotates it.
    """CREATE TABLE IF NOT EXISTS labels (
        interaction_id VARCHAR NOT NULL,
        rater VARCHAR NOT NULL,
        task_success BOOLEAN NOT NULL,
        labeled_at TIMESTAMPTZ NOT NULL,
        note VARCHAR,
        source_file VARCHAR NOT NULL,
        imported_at TIMESTAMPTZ NOT NULL,
        os_user VARCHAR,
        sample_id VARCHAR,
        PRIMARY KEY (interaction_id, rater))""",
    # The review samples `retrain review export` drew (dataplane/review_sample.py): an import
    # accepts labels only of the interactions its file's sample holds.
    """CREATE TABLE IF NOT EXISTS review_samples (
        sample_id VARCHAR PRIMARY KEY,
        week VARCHAR NOT NULL,
        interaction_ids VARCHAR[] NOT NULL,
        created_at TIMESTAMPTZ NOT NULL,
        exported_by VARCHAR NOT NULL)""",
)

_CREATE = {statement.split()[5]: statement for statement in SCHEMA}  # table name -> its CREATE
KEYED_BY_DOMAIN = ("windows", "calibration_sets", "calibration_week", "shadow_sets")
# Label provenance, added after `labels` first shipped: the OS account that ran the import (two
# names typed by one account are one rater) and the review sample the label answers. Added in
# place, last, as the CREATE above lists them; rows imported before stay NULL (not recorded then).
_LABEL_COLUMNS = (
    ("os_user", "ALTER TABLE labels ADD COLUMN os_user VARCHAR"),
    ("sample_id", "ALTER TABLE labels ADD COLUMN sample_id VARCHAR"),
)
# Quarantine provenance, added later the same way: the version (sha256) of the file a row came
# from, and the later version that read the file whole again and so superseded the row (a line
# quarantined while the file was still being written); NULL while the row stands.
_QUARANTINE_COLUMNS = (
    ("file_sha256", "ALTER TABLE quarantine ADD COLUMN file_sha256 VARCHAR"),
    ("superseded_by", "ALTER TABLE quarantine ADD COLUMN superseded_by VARCHAR"),
)
# The migration, statement by statement (constants: no SQL text is built from values). The new
# `interactions` columns are added in place, the old rows filled by the default: every record
# stored before domains is a native retail record, replayable by construction.
_ADD_COLUMNS = (
    "ALTER TABLE interactions ADD COLUMN domain VARCHAR DEFAULT 'retail'",
    "ALTER TABLE interactions ALTER COLUMN domain SET NOT NULL",
    "ALTER TABLE interactions ADD COLUMN replayable BOOLEAN DEFAULT true",
    "ALTER TABLE interactions ALTER COLUMN replayable SET NOT NULL",
)
# A primary key cannot be altered in DuckDB, so a keyed table is renamed, created anew under its
# new key, refilled (its rows becoming retail's) and the old copy dropped. These tables hold ids
# and positions only (10,000 rows a week), so the copy is quick.
_REKEY = {
    "windows": (
        "ALTER TABLE windows RENAME TO windows_before_domains",
        _CREATE["windows"],
        "INSERT INTO windows (week, position, interaction_id, content_hash, window_hash, week_end) "
        "SELECT week, position, interaction_id, content_hash, window_hash, week_end FROM windows_before_domains",
        "DROP TABLE windows_before_domains",
    ),
    "calibration_sets": (
        "ALTER TABLE calibration_sets RENAME TO calibration_sets_before_domains",
        _CREATE["calibration_sets"],
        "INSERT INTO calibration_sets (version, position, interaction_id, set_hash, created_at) "
        "SELECT version, position, interaction_id, set_hash, created_at FROM calibration_sets_before_domains",
        "DROP TABLE calibration_sets_before_domains",
    ),
    "calibration_week": (
        "ALTER TABLE calibration_week RENAME TO calibration_week_before_domains",
        _CREATE["calibration_week"],
        "INSERT INTO calibration_week (week, version, pinned_at) "
        "SELECT week, version, pinned_at FROM calibration_week_before_domains",
        "DROP TABLE calibration_week_before_domains",
    ),
    "shadow_sets": (
        "ALTER TABLE shadow_sets RENAME TO shadow_sets_before_domains",
        _CREATE["shadow_sets"],
        "INSERT INTO shadow_sets (week, position, interaction_id, set_hash, created_at) "
        "SELECT week, position, interaction_id, set_hash, created_at FROM shadow_sets_before_domains",
        "DROP TABLE shadow_sets_before_domains",
    ),
}


def table_columns(con: duckdb.DuckDBPyConnection) -> dict[str, set[str]]:
    """Column names of every table of the connection's own database, by table."""
    rows = con.execute(
        "SELECT table_name, column_name FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = 'main'"
    ).fetchall()
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


def _labels_behind(columns: dict[str, set[str]]) -> list[str]:
    """The provenance statements an existing `labels` table still needs."""
    have = columns.get("labels")
    return [] if have is None else [statement for name, statement in _LABEL_COLUMNS if name not in have]


def _quarantine_behind(columns: dict[str, set[str]]) -> list[str]:
    """The provenance statements an existing `quarantine` table still needs."""
    have = columns.get("quarantine")
    return [] if have is None else [statement for name, statement in _QUARANTINE_COLUMNS if name not in have]


def needs_migration(columns: dict[str, set[str]], tables: tuple[str, ...] | None = None) -> bool:
    """Whether any existing table of `tables` (all: None) predates domains, or `labels` predates
    label provenance, or `quarantine` its file versions."""
    names = ("interactions", *KEYED_BY_DOMAIN, "labels", "quarantine") if tables is None else tables
    if "labels" in names and _labels_behind(columns):
        return True
    if "quarantine" in names and _quarantine_behind(columns):
        return True
    return any(
        name in columns and "domain" not in columns[name] for name in names if name not in ("labels", "quarantine")
    )


def ensure_schema(con: duckdb.DuckDBPyConnection, tables: tuple[str, ...] | None = None) -> None:
    """Create the tables (`tables`, default all) that are missing and migrate those from before
    domains, in one transaction (a crash leaves the old layout whole, and the next open retries)."""
    selected = tuple(_CREATE) if tables is None else tables
    columns = table_columns(con)
    if needs_migration(columns, selected):
        _migrate(con, columns, selected)
    for name in selected:
        if name not in columns:
            con.execute(_CREATE[name])


def _migrate(con: duckdb.DuckDBPyConnection, columns: dict[str, set[str]], tables: tuple[str, ...]) -> None:
    con.execute("BEGIN TRANSACTION")
    try:
        if "interactions" in tables and "domain" not in columns.get("interactions", {"domain"}):
            for statement in _ADD_COLUMNS:
                con.execute(statement)
        for name in KEYED_BY_DOMAIN:
            if name in tables and "domain" not in columns.get(name, {"domain"}):
                for statement in _REKEY[name]:
                    con.execute(statement)
        if "labels" in tables:
            for statement in _labels_behind(columns):
                con.execute(statement)
        if "quarantine" in tables:
            for statement in _quarantine_behind(columns):
                con.execute(statement)
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
