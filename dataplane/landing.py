"""Ingest what has landed since the last look: the landing sensor's one call into the data plane.

The store is the cursor: a landing file whose (path, size) is not in `ingested_files` is new, so
nothing but a directory listing is read on a quiet tick (a full `ingest_paths` would hash every
file ever landed). A file rewritten in place to the same size is not seen here; the weekly
`raw_interactions` ingest hashes every file and picks it up. Each new file goes through the same
`ingest_file` as every other ingest (one transaction per file, PII scrubbed, rejects quarantined),
and the UTC days its accepted interactions ended on come back, so the caller knows which days of
traffic changed.

The landing folder holds both formats side by side, and a file's name says which it is:
`*.jsonl`, `*.jsonl.gz` and `*.parquet` are native interaction records, `*.openai.jsonl` and
`*.openai.jsonl.gz` conversations in the OpenAI chat shape (`dataplane.openai_chat`), at any depth
under the landing root. An agent that already keeps its chat `messages` lands them by writing each
finished conversation as one line of such a file, e.g. `landing/openai/<host>-<hour>.openai.jsonl`
written to a temporary name and renamed when complete: a file is read once its (path, size) is new,
so a file still being appended to would be read while half written. (If one is, its later,
complete version is read again, and the quarantine rows of the half-written read are marked
superseded: see `dataplane.ingest`.)

Only regular files inside the landing folder are read: a link, FIFO or device there is reported
once (`not_a_regular_file`) and never opened.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import duckdb

from dataplane.ingest import IngestSummary, LandingEntry, ingest_file, landing_entries
from dataplane.ingest_settings import IngestSettings
from dataplane.readers import file_format
from dataplane.store import open_store


@dataclass
class LandedBatch:
    """What one look at the landing folder ingested: the new files, their summary, and the
    accepted interactions per UTC day (YYYY-MM-DD) among them."""

    files: list[str] = field(default_factory=list)
    summary: IngestSummary = field(default_factory=IngestSummary)
    days: dict[str, int] = field(default_factory=dict)


def new_landing_files(con: duckdb.DuckDBPyConnection, landing: Path) -> list[LandingEntry]:
    """Landing entries whose (path, size) the store has not ingested yet, in `landing_entries`
    order. The size is the entry's own (lstat): a link is not followed, even to be measured."""
    if not landing.is_dir():
        return []
    known = {(path, size) for path, size in con.execute("SELECT path, size FROM ingested_files").fetchall()}
    return [e for e in landing_entries([landing]) if (str(e.path), os.lstat(e.path).st_size) not in known]


def ingest_landed(
    db_path: str | os.PathLike,
    landing: str | os.PathLike,
    max_files: int | None = None,
    now: datetime | None = None,
    settings: IngestSettings | None = None,
) -> LandedBatch:
    """Ingest the landing files that are new since the last ingest (the first `max_files` of them,
    None: all), and say which days they hold. The rest stay new for the next call.

    Raises `StoreLockedError` when another process holds the store (nothing is ingested then).
    """
    con = open_store(db_path)
    try:
        entries = new_landing_files(con, Path(landing).expanduser().resolve())[:max_files]
        batch = LandedBatch(files=[str(e.path) for e in entries])
        for entry in entries:
            batch.summary.add(ingest_file(con, entry.path, now, file_format(entry.path), settings, entry.root))
        if entries:
            rows = con.execute(
                # The UTC day, as dataplane.served groups it.
                "SELECT CAST(timezone('UTC', ended_at) AS DATE) AS day, count(*) FROM interactions "
                "WHERE list_contains(?, source_file) GROUP BY day ORDER BY day",
                [batch.files],
            ).fetchall()
            batch.days = {day.isoformat(): n for day, n in rows}
    finally:
        con.close()
    return batch


def ingested_since(con: duckdb.DuckDBPyConnection, since: datetime) -> dict[str, int]:
    """Files, rows read, accepted, duplicates and quarantined over every ingest since `since`,
    by whoever ran it (the landing sensor or a weekly run).

    `quarantined` counts the rows that stand: those a later, complete read of their file
    superseded (`superseded`, counted apart) were no loss, and do not count against a quarantine
    rate."""
    row = con.execute(
        "SELECT count(*), coalesce(sum(read), 0), coalesce(sum(accepted), 0), coalesce(sum(duplicates), 0), "
        "coalesce(sum(quarantined), 0) FROM ingested_files WHERE ingested_at >= ?",
        [since],
    ).fetchone()
    counts = dict(zip(("files", "read", "accepted", "duplicates", "quarantined"), (int(v) for v in row)))
    (superseded,) = con.execute(
        "SELECT count(*) FROM quarantine WHERE superseded_by IS NOT NULL AND quarantined_at >= ?", [since]
    ).fetchone()
    counts["quarantined"] -= int(superseded)
    counts["superseded"] = int(superseded)
    return counts
