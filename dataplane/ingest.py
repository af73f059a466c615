"""Ingestion: landing files -> validated, scrubbed rows in `interactions`, the rest in `quarantine`.

One DuckDB transaction per file, so a crash never leaves half a file stored, and a file already
ingested (same path, size and sha256) is skipped. Every record read ends up in exactly one of
accepted, duplicates or quarantined; a file that cannot be read as a whole counts as one record
read and one quarantined (rule corrupt_file, invalid_utf8, line_too_long or empty_file).

A file holds native records or conversations in the OpenAI chat shape (`format`: "auto" decides
by the name, `*.openai.jsonl[.gz]` being OpenAI, see `readers.file_format`); an OpenAI line is
mapped onto a native record (`dataplane.openai_chat`) and from there on takes the same path.
"""

from __future__ import annotations

import gc
import hashlib
import os
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from dataplane.contract import ContractError, validate_record
from dataplane.domain_rules import DomainLookup
from dataplane.openai_chat import openai_record
from dataplane.readers import FileCorruptError, RawRecord, file_format, is_landing_file, read_file
from dataplane.store import QuarantineRows, RowBatch, open_store, prepare_row

CHUNK_ROWS = 5000
_ID_IN_TEXT = {key: re.compile(rf'"{key}"\s*:\s*"([A-Za-z0-9_.:-]{{1,128}})"') for key in ("interaction_id", "id")}


class InputPathError(FileNotFoundError):
    """An input path is missing, unreadable or not a landing file; the CLI exits 2."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass
class FileSummary:
    path: str
    status: str  # ingested | skipped | quarantined
    read: int = 0
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0
    quarantined_by_rule: dict[str, int] = field(default_factory=dict)


@dataclass
class IngestSummary:
    files: int = 0
    files_skipped: int = 0
    files_quarantined: int = 0
    read: int = 0
    accepted: int = 0
    duplicates: int = 0
    quarantined: int = 0
    quarantined_by_rule: dict[str, int] = field(default_factory=dict)
    per_file: list[FileSummary] = field(default_factory=list)

    def add(self, item: FileSummary) -> None:
        self.per_file.append(item)
        self.files += 1
        self.files_skipped += item.status == "skipped"
        self.files_quarantined += item.status == "quarantined"
        for name in ("read", "accepted", "duplicates", "quarantined"):
            setattr(self, name, getattr(self, name) + getattr(item, name))
        self.quarantined_by_rule = dict(Counter(self.quarantined_by_rule) + Counter(item.quarantined_by_rule))

    def to_dict(self) -> dict:
        return asdict(self)


def collect_files(paths: list[str | os.PathLike], fmt: str = "auto") -> list[Path]:
    """Expand directories (recursively, sorted) into landing files; refuse missing inputs, and
    Parquet files when `fmt` is "openai" (the OpenAI shape is JSON Lines only)."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw).expanduser().resolve()
        if not path.exists():
            raise InputPathError(path, "no such file or directory")
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.is_file() and is_landing_file(p))
        elif is_landing_file(path):
            found.append(path)
        else:
            raise InputPathError(path, "not a landing file (*.jsonl, *.jsonl.gz, *.parquet)")
    for item in found:
        if not os.access(item, os.R_OK):
            raise InputPathError(item, "not readable")
        if file_format(item, fmt) == "openai" and item.name.endswith(".parquet"):
            raise InputPathError(item, "conversations in the OpenAI shape are JSON Lines (*.jsonl, *.jsonl.gz)")
    return list(dict.fromkeys(found))


def ingest_paths(
    db_path: str | os.PathLike, paths: list[str | os.PathLike], now: datetime | None = None, fmt: str = "auto"
) -> IngestSummary:
    """Ingest every landing file under `paths` into the store at `db_path`, in format `fmt`
    ("auto": by each file's name, see `readers.file_format`)."""
    files = collect_files(paths, fmt)
    summary = IngestSummary()
    con = open_store(db_path)
    try:
        for path in files:
            summary.add(ingest_file(con, path, now, fmt))
    finally:
        con.close()
    return summary


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def ingest_file(
    con: duckdb.DuckDBPyConnection, path: Path, now: datetime | None = None, fmt: str = "auto"
) -> FileSummary:
    """Ingest one file in one transaction (or skip it when this exact file is already in)."""
    openai = file_format(path, fmt) == "openai"
    size, sha = path.stat().st_size, file_sha256(path)
    known = con.execute(
        "SELECT 1 FROM ingested_files WHERE path = ? AND size = ? AND sha256 = ?", [str(path), size, sha]
    ).fetchone()
    if known:
        return FileSummary(str(path), "skipped")
    stamp = now or datetime.now(UTC)
    con.execute("BEGIN TRANSACTION")
    try:
        with _cyclic_gc_paused():
            result = _ingest_pass(con, path, now, stamp, openai)
    except FileCorruptError as err:
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")
        quarantine = QuarantineRows(str(path), stamp)
        quarantine.add(err.line_no, err.rule, err.detail, err.raw, None, file_level=True)
        quarantine.flush(con)
        result = FileSummary(str(path), "quarantined", read=1, quarantined=1, quarantined_by_rule={err.rule: 1})
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute(
        "INSERT INTO ingested_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            str(path),
            size,
            sha,
            result.status,
            result.read,
            result.accepted,
            result.duplicates,
            result.quarantined,
            stamp,
        ],
    )
    con.execute("COMMIT")
    return result


def _ingest_pass(
    con: duckdb.DuckDBPyConnection, path: Path, now: datetime | None, stamp: datetime, openai: bool
) -> FileSummary:
    """The file's pass in the open transaction: an optimistic one first, then if needed an exact one.

    Finding which ids are stored already reads, for ids that do not grow with time, every stored
    id once per chunk. A new file usually has no stored id at all, so the first pass skips that
    lookup and lets the primary key check each insert. If the key refuses one, the transaction
    (this file's only) is rolled back and the file is read again with the lookup, which counts
    duplicates and quarantines conflicts. A file with stored ids thus costs two passes.
    """
    try:
        return _FileIngest(con, path, now, stamp, look_up_stored=False, openai=openai).run()
    except duckdb.ConstraintException:
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")
        return _FileIngest(con, path, now, stamp, look_up_stored=True, openai=openai).run()


@contextmanager
def _cyclic_gc_paused():
    """Pause the cyclic garbage collector for one file's pass (reference counting still frees).

    The pass allocates millions of short-lived dicts and lists and keeps a chunk of them alive,
    which makes the collector run full collections over the whole heap again and again: about a
    tenth of the ingest time. The pass creates hardly any reference cycles, and any it does create
    are collected once the collector runs again; whatever state it was in is restored afterwards.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _FileIngest:
    """The per-record pass over one file, flushing accepted rows in chunks of CHUNK_ROWS."""

    def __init__(
        self,
        con: duckdb.DuckDBPyConnection,
        path: Path,
        now: datetime | None,
        stamp: datetime,
        look_up_stored: bool = True,
        openai: bool = False,
    ):
        self.con, self.path, self.now, self.openai = con, path, now, openai
        self.domains = DomainLookup()  # one per pass: each domain named in the file is looked up once
        self.id_key = "id" if openai else "interaction_id"
        self.summary = FileSummary(str(path), "ingested")
        self.rules: Counter[str] = Counter()
        self.quarantine = QuarantineRows(str(path), stamp)
        self.batch = RowBatch(str(path), stamp, look_up_stored=look_up_stored)
        self.seen: dict[str, str] = {}  # id -> content hash of the copy kept (first in this file, or stored)
        self.pending: dict[str, list[tuple[RawRecord, str]]] = {}  # later copies of ids in the batch

    def run(self) -> FileSummary:
        for item in read_file(self.path):
            self.summary.read += 1
            self._one(item)
            if len(self.batch) >= CHUNK_ROWS:
                self._flush()
        self._flush()
        self.summary.quarantined_by_rule = dict(self.rules)
        return self.summary

    def _reject(self, item: RawRecord, rule: str, detail: str, interaction_id: str | None) -> None:
        self.summary.quarantined += 1
        self.rules[rule] += 1
        self.quarantine.add(item.line_no, rule, detail, item.raw_text(), interaction_id)

    def _one(self, item: RawRecord) -> None:
        if item.error is not None:
            self._reject(item, item.error.rule, item.error.detail, _recover_id(item, self.id_key))
            return
        try:
            if self.openai:
                row = prepare_row(*openai_record(item.obj, self.now, self.domains))
            else:
                row = prepare_row(validate_record(item.obj, self.now, self.domains))
        except ContractError as err:  # the contract's rules, then a record that cannot be stored
            self._reject(item, err.rule, err.detail, _recover_id(item, self.id_key))
            return
        rid, digest = row.interaction_id, row.content_hash
        first = self.seen.get(rid)
        if first is None:
            self.seen[rid] = digest
            self.batch.append(row, item)
        elif rid in self.batch.ids_in_batch:
            # Which copy wins (the stored record, or this file's first copy) is known only once the
            # chunk is flushed, so any later copy, equal to the first or not, waits until then.
            self.pending.setdefault(rid, []).append((item, digest))
        else:
            self._judge(item, rid, digest, first, "already kept with different content")

    def _judge(self, item: RawRecord, rid: str, digest: str, winner: str, why: str) -> None:
        """A later copy of `rid`: a duplicate if its content hash is the winning copy's, else a conflict."""
        if digest == winner:
            self.summary.duplicates += 1
        else:
            self._reject(item, "duplicate_conflict", f"interaction_id={rid} {why}", rid)

    def _flush(self) -> None:
        outcome = self.batch.flush(self.con)
        self.summary.accepted += len(outcome.inserted)
        for rid, (item, stored_hash) in outcome.not_inserted.items():
            self._judge(item, rid, self.seen[rid], stored_hash, "already stored with different content")
            self.seen[rid] = stored_hash  # the stored record is the copy every later one must match
        for rid, copies in self.pending.items():
            why = (
                "already stored with different content"
                if rid in outcome.not_inserted
                else "seen before in this file with different content"
            )
            for item, digest in copies:
                self._judge(item, rid, digest, self.seen[rid], why)
        self.pending.clear()
        self.quarantine.flush(self.con)


def _recover_id(item: RawRecord, key: str = "interaction_id") -> str | None:
    """The interaction id of a rejected record when one can be read, for the quarantine row (`key`:
    the field that holds it, an OpenAI-shape line's being `id`)."""
    if isinstance(item.obj, dict) and isinstance(item.obj.get(key), str):
        return item.obj[key][:128]
    if isinstance(item.raw, str):
        match = _ID_IN_TEXT[key].search(item.raw)
        return match.group(1) if match else None
    return None
