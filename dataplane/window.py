"""The weekly training window of one domain: its last N interactions that ended before the week's end.

Order is (ended_at, interaction_id), so ties are deterministic and cutting the same week twice
yields the same rows and the same content hash (sha256 over the ordered (id, content_hash) pairs).
A week is named by the ISO week that contains the last instant before `week_end`
(`week_end` = Monday 00:00 UTC -> the ISO week that just ended, e.g. "2024-W23"). Each domain has
its own windows, stored under (domain, week); a window only ever holds its domain's rows, so a
store with one domain cuts the same windows, with the same hashes, as before domains.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.pii_records import suspect_texts
from dataplane.settings import setting
from dataplane.store import stored_record


@dataclass(frozen=True)
class WindowSettings:
    """The weekly window and the checks that stop a week on it (`interaction_window`'s run config)."""

    size: int = setting(10_000, "interactions in the window: the domain's last ones that ended before the week's end")
    min_rows: int = setting(20, "fewest interactions a window may hold; fewer fails the week before training")
    min_gold_share: float = setting(
        0.2, "smallest share of the window's interactions with gold actions (the Great Expectations suite)"
    )
    max_quarantine_rate: float = setting(
        0.05, "largest share of the past week's ingested rows that went to quarantine; above it the week stops"
    )


DEFAULT_SIZE = WindowSettings.size  # the class attribute a dataclass keeps for a field's default


@dataclass(frozen=True)
class WindowInfo:
    week: str
    week_end: str
    rows: int
    ended_at_min: str | None
    ended_at_max: str | None
    content_hash: str
    outcome_mix: dict[str, int]
    intent_mix: dict[str, int]

    def to_dict(self) -> dict:
        return asdict(self)


def week_id(week_end: datetime) -> str:
    """ISO week id ("YYYY-Www") of the week that ends (exclusively) at `week_end`."""
    _require_aware(week_end)
    year, week, _ = (week_end - timedelta(microseconds=1)).isocalendar()
    return f"{year}-W{week:02d}"


def _require_aware(moment: datetime) -> None:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"week_end must be timezone-aware, got naive {moment.isoformat()}")


def _week(week: str | datetime) -> str:
    return week if isinstance(week, str) else week_id(week)


def window_hash(pairs: list[tuple[str, str]]) -> str:
    """sha256 over the ordered (interaction_id, content_hash) pairs of a window."""
    digest = hashlib.sha256()
    for rid, content in pairs:
        digest.update(f"{rid}\t{content}\n".encode())
    return digest.hexdigest()


def arrow_window_hash(ids: pa.Array | pa.ChunkedArray, contents: pa.Array | pa.ChunkedArray) -> str:
    """`window_hash` of the pairs (ids[i], contents[i]), computed from Arrow columns.

    The "id\tcontent\n" lines are built by Arrow into one contiguous values buffer and hashed in
    one call, instead of one Python string and one `update` per row (the same bytes, so the same
    digest). A null would silently drop its line from that buffer, so nulls are refused.
    """
    if ids.null_count or contents.null_count:
        raise ValueError("a window's interaction ids and content hashes must not be null")
    # One string type (64-bit offsets) whatever the inputs are: the kernel wants matching types.
    ids, contents = ids.cast(pa.large_string()), contents.cast(pa.large_string())
    tab, newline = pa.scalar("\t", pa.large_string()), pa.scalar("\n", pa.large_string())
    lines = pc.binary_join_element_wise(ids, contents, tab)
    lines = pc.binary_join_element_wise(lines, pa.scalar("", pa.large_string()), newline)  # appends "\n"
    if isinstance(lines, pa.ChunkedArray):
        lines = lines.combine_chunks()
    if len(lines) == 0:
        return hashlib.sha256().hexdigest()
    offsets = np.frombuffer(lines.buffers()[1], dtype=np.int64)
    start, end = offsets[lines.offset], offsets[lines.offset + len(lines)]  # a slice has an offset
    return hashlib.sha256(memoryview(lines.buffers()[2])[start:end]).hexdigest()


# DESC + LIMIT is DuckDB's top-N: rows are stored in time order, so it reads little of the table.
_NEWEST = (
    "SELECT interaction_id, content_hash, ended_at, outcome, intent FROM interactions "
    "WHERE ended_at < ? AND domain = ? ORDER BY ended_at DESC, interaction_id DESC LIMIT ?"
)


def cut_window(
    con: duckdb.DuckDBPyConnection, week_end: datetime, size: int = DEFAULT_SIZE, domain: str = DEFAULT_DOMAIN
) -> WindowInfo:
    """Select and store (replacing any earlier, different cut of the same week) `domain`'s window
    for `week_end`.

    A week whose stored window already has this content hash and `week_end` is not rewritten:
    the rows would be the same, and the write is most of a cut's cost.
    """
    _require_aware(week_end)
    if size < 1:
        raise ValueError(f"window size must be >= 1, got {size}")
    week = week_id(week_end)
    # The rows stay in Arrow (no Python object per cell) from the query to the write.
    newest = con.sql(_NEWEST, params=[week_end, domain, size]).to_arrow_table()
    n = newest.num_rows
    top = newest.take(pa.array(np.arange(n - 1, -1, -1, dtype=np.int64)))  # oldest first
    digest = arrow_window_hash(top.column("interaction_id"), top.column("content_hash"))
    _store_window(con, domain, week, week_end, digest, top)
    ended = top.column("ended_at")
    return WindowInfo(
        week=week,
        week_end=week_end.isoformat(),
        rows=n,
        ended_at_min=ended[0].as_py().isoformat() if n else None,
        ended_at_max=ended[n - 1].as_py().isoformat() if n else None,
        content_hash=digest,
        outcome_mix=_mix(top.column("outcome")),
        intent_mix=_mix(top.column("intent")),
    )


def _store_window(
    con: duckdb.DuckDBPyConnection, domain: str, week: str, week_end: datetime, digest: str, top: pa.Table
) -> bool:
    """Replace the stored rows of (`domain`, `week`) by `top` unless they are already these; True if written.

    The check runs inside the write's transaction, so no other writer can change the week between
    the check and the write.
    """
    con.execute("BEGIN TRANSACTION")
    try:
        stored = con.execute(
            "SELECT count(*), min(window_hash), max(window_hash), min(week_end), max(week_end) "
            "FROM windows WHERE domain = ? AND week = ?",
            [domain, week],
        ).fetchall()[0]
        if _same_window(stored, top.num_rows, digest, week_end):
            con.execute("COMMIT")  # nothing was written: a read-only commit
            return False
        if stored[0]:
            con.execute("DELETE FROM windows WHERE domain = ? AND week = ?", [domain, week])
        if top.num_rows:
            rows = pa.table(
                {
                    "position": pa.array(np.arange(top.num_rows, dtype=np.int32)),
                    "interaction_id": top.column("interaction_id"),
                    "content_hash": top.column("content_hash"),
                }
            )
            con.register("_window_rows", rows)
            try:
                # The per-week constants come in as parameters rather than as 10,000-row columns.
                con.execute(
                    "INSERT INTO windows (domain, week, position, interaction_id, content_hash, window_hash, "
                    "week_end) SELECT ?, ?, position, interaction_id, content_hash, ?, ? FROM _window_rows",
                    [domain, week, digest, week_end],
                )
            finally:
                con.unregister("_window_rows")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return True


def _same_window(stored: tuple, rows: int, digest: str, week_end: datetime) -> bool:
    """Whether the stored (count, min/max window_hash, min/max week_end) of a week is this cut.

    Every row of a stored window carries its window hash and week_end, so min = max = the new
    value with the same row count means the stored pairs hash to `digest`: the same rows.
    """
    count, hash_lo, hash_hi, end_lo, end_hi = stored
    if count == 0:
        return rows == 0
    return count == rows and hash_lo == hash_hi == digest and end_lo == end_hi and end_lo == week_end


def _mix(column: pa.ChunkedArray) -> dict[str, int]:
    counts = pc.value_counts(column)
    return dict(sorted((str(v["values"]), int(v["counts"])) for v in counts.to_pylist()))


def window_ids(con: duckdb.DuckDBPyConnection, week: str | datetime, domain: str = DEFAULT_DOMAIN) -> list[str]:
    """Interaction ids of a stored window of `domain`, in window order."""
    return [
        r[0]
        for r in con.execute(
            "SELECT interaction_id FROM windows WHERE domain = ? AND week = ? ORDER BY position", [domain, _week(week)]
        ).fetchall()
    ]


def window_records(con: duckdb.DuckDBPyConnection, week: str | datetime, domain: str = DEFAULT_DOMAIN) -> list[dict]:
    """Full scrubbed records of a stored window of `domain`, in window order (empty if never cut)."""
    rows = con.execute(
        "SELECT i.record FROM windows w JOIN interactions i ON i.interaction_id = w.interaction_id "
        "WHERE w.domain = ? AND w.week = ? ORDER BY w.position",
        [domain, _week(week)],
    ).fetchall()
    return [stored_record(r[0]) for r in rows]


FRAME_COLUMNS = (
    "interaction_id",
    "customer_id",
    "started_at",
    "ended_at",
    "started_at_text",
    "ended_at_text",
    "intent",
    "outcome",
    "escalation_flag",
    "actions_taken",
    "customer_sentiment_delta",
    "has_gold",
    "text",
)


def records_frame(records: list[dict]) -> pd.DataFrame:
    """One row per record with the columns the validation suite checks.

    Timestamps are parsed here with `errors="coerce"` so an unparseable one shows up as NaT for
    the suite to count, rather than as an exception. `text` is what the PII scan reads: every
    place of the whole record that may hold PII (`pii_records.suspect_texts`: every string and key at
    any depth, not only the fields ingestion scrubs), one per line, so a record stored by any
    other path is judged by what it holds; `escalation_flag` is "true"/"false"/"null".
    """

    def flag(value) -> str:
        return "null" if value is None else str(bool(value)).lower()

    frame = pd.DataFrame(
        {
            "interaction_id": [r.get("interaction_id") for r in records],
            "customer_id": [r.get("customer_id") for r in records],
            "started_at_text": [r.get("started_at") for r in records],
            "ended_at_text": [r.get("ended_at") for r in records],
            "intent": [r.get("intent") for r in records],
            "outcome": [r.get("outcome") for r in records],
            "escalation_flag": [flag(r.get("escalation_was_necessary")) for r in records],
            "actions_taken": [r.get("actions_taken") for r in records],
            "customer_sentiment_delta": [r.get("customer_sentiment_delta") for r in records],
            "has_gold": [int(r.get("gold") is not None) for r in records],
            # No PII pattern reaches across a line break, so one scan of the joined text finds what
            # a scan of each place would.
            "text": ["\n".join(text for _path, text in suspect_texts(r)) for r in records],
        },
        columns=[c for c in FRAME_COLUMNS if c not in ("started_at", "ended_at")],
    )
    for name in ("started_at", "ended_at"):
        frame[name] = pd.to_datetime(frame[f"{name}_text"], utc=True, errors="coerce", format="ISO8601")
    return frame[list(FRAME_COLUMNS)]


def window_frame(con: duckdb.DuckDBPyConnection, week: str | datetime, domain: str = DEFAULT_DOMAIN) -> pd.DataFrame:
    """The stored window of `domain` as a DataFrame for `validation.validate_window`."""
    return records_frame(window_records(con, week, domain))
