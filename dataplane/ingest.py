"""Ingestion: landing files -> validated, scrubbed rows in `interactions`, the rest in `quarantine`.

One DuckDB transaction per file, so a crash never leaves half a file stored, and a file already
ingested (same path, size and sha256) is skipped. Every record read ends up in exactly one of
accepted, duplicates or quarantined; a file that cannot be read as a whole counts as one record
read and one quarantined (rule corrupt_file, empty_file or not_a_regular_file). A bad line or row
(invalid UTF-8, over the byte cap) is quarantined alone, and the rest of its file is read.

Only regular files are read: a symbolic link (to a file or a folder), a FIFO, a device or socket
found where a landing file would be, or a path whose real location is outside the folder it was
found in, is refused (`not_a_regular_file`: a quarantine row naming the path) without being opened
(`readers.open_regular_file`). Folders named as inputs are followed even when they are links (the
landing folder itself may be a mount); nothing inside them is.

A record that started more than `IngestSettings.max_age_days` before the newest ended_at in the
store (this file's kept rows included) is quarantined as `too_old`: a producer's clock reset (1970,
year 1) must never reach a window. When a file's own rows raise the newest far enough to make rows
it kept earlier too old, the file is read again with the final newest, so the result does not
depend on the order of its lines.

A file that grew since it was last ingested (a log read while being written) is read whole again;
when the earlier version is a prefix of it (same bytes, checked by hash), the quarantine rows of
that earlier read (a truncated last line, say) are marked `superseded_by` the new version's hash:
the complete read judged those lines again.

A file holds native records or conversations in the OpenAI chat shape (`format`: "auto" decides
by the name, `*.openai.jsonl[.gz]` being OpenAI, see `readers.file_format`); an OpenAI line is
mapped onto a native record (`dataplane.openai_chat`) and from there on takes the same path.
"""

from __future__ import annotations

import gc
import hashlib
import os
import re
import stat
from collections import Counter
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO

import duckdb

from dataplane.contract import ContractError, validate_record
from dataplane.domain_rules import DomainLookup
from dataplane.ingest_settings import IngestSettings
from dataplane.openai_chat import openai_record
from dataplane.readers import (
    FileCorruptError,
    NotRegularFileError,
    RawRecord,
    file_format,
    is_landing_file,
    open_regular_file,
    read_file,
)
from dataplane.store import (
    PreparedRow,
    QuarantineRows,
    RowBatch,
    newest_ended_at,
    open_store,
    prepare_row,
    supersede_quarantine,
)

CHUNK_ROWS = 5000
# The sha256 recorded in `ingested_files` for a path refused unread (not a regular file): no file's
# hash is empty, so the refusal is remembered (and skipped next time) without passing for content.
NOT_READ = ""
_HASH_BLOCK = 1 << 20
_EARLIEST = datetime.min.replace(tzinfo=UTC)
_LATEST = datetime.max.replace(tzinfo=UTC)
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
    # Quarantine rows of an earlier, partly written read of this file that this complete read
    # judged again (outside read = accepted + duplicates + quarantined: they were counted then).
    superseded: int = 0


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
    superseded: int = 0
    per_file: list[FileSummary] = field(default_factory=list)

    def add(self, item: FileSummary) -> None:
        self.per_file.append(item)
        self.files += 1
        self.files_skipped += item.status == "skipped"
        self.files_quarantined += item.status == "quarantined"
        for name in ("read", "accepted", "duplicates", "quarantined", "superseded"):
            setattr(self, name, getattr(self, name) + getattr(item, name))
        self.quarantined_by_rule = dict(Counter(self.quarantined_by_rule) + Counter(item.quarantined_by_rule))

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class LandingEntry:
    """A path to ingest and the folder it was found in (resolved): `path`'s folders are resolved,
    its own name is as found (a link there is refused, not followed), and its real path must be
    `path` itself, under `root`."""

    path: Path
    root: Path


def collect_files(paths: list[str | os.PathLike], fmt: str = "auto") -> list[Path]:
    """The paths of `landing_entries(paths, fmt)`."""
    return [entry.path for entry in landing_entries(paths, fmt)]


def landing_entries(paths: list[str | os.PathLike], fmt: str = "auto") -> list[LandingEntry]:
    """Expand folders (recursively, sorted, never through a link) into landing files; refuse missing
    inputs, and Parquet files when `fmt` is "openai" (the OpenAI shape is JSON Lines only).

    What is listed but will be refused unread by `ingest_file`: an entry with a landing file's
    name that is not a regular file (a link, a FIFO, a device, a socket), and a link to a folder
    whatever its name (it could lead anywhere; a folder inside is entered only if it is one).
    """
    found: list[LandingEntry] = []
    for raw in paths:
        given = Path(raw).expanduser()
        try:
            mode = os.lstat(given).st_mode
        except FileNotFoundError:
            raise InputPathError(given.absolute(), "no such file or directory") from None
        if stat.S_ISDIR(mode) or (stat.S_ISLNK(mode) and given.is_dir()):
            root = given.resolve()  # a folder named as an input is followed, even through a link
            found += _walk(root)
            continue
        folder = given.absolute().parent.resolve()
        path = folder / given.name
        if not is_landing_file(path):
            raise InputPathError(path, "not a landing file (*.jsonl, *.jsonl.gz, *.parquet)")
        found.append(LandingEntry(path, folder))
    for entry in found:
        if not stat.S_ISREG(os.lstat(entry.path).st_mode):
            continue  # refused unread by ingest_file
        if not os.access(entry.path, os.R_OK):
            raise InputPathError(entry.path, "not readable")
        if file_format(entry.path, fmt) == "openai" and entry.path.name.endswith(".parquet"):
            raise InputPathError(entry.path, "conversations in the OpenAI shape are JSON Lines (*.jsonl, *.jsonl.gz)")
    return list({entry.path: entry for entry in found}.values())


def _walk(root: Path) -> list[LandingEntry]:
    """Landing entries under `root`, in path order, entering real folders only."""
    found: list[LandingEntry] = []
    folders = [root]
    while folders:
        folder = folders.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except PermissionError as err:
            raise InputPathError(folder, "not readable") from err
        for entry in entries:
            path = folder / entry.name
            if entry.is_dir(follow_symlinks=False):
                folders.append(path)
            elif is_landing_file(path) or (entry.is_symlink() and entry.is_dir()):
                found.append(LandingEntry(path, root))
    return sorted(found, key=lambda entry: entry.path)


def ingest_paths(
    db_path: str | os.PathLike,
    paths: list[str | os.PathLike],
    now: datetime | None = None,
    fmt: str = "auto",
    settings: IngestSettings | None = None,
) -> IngestSummary:
    """Ingest every landing file under `paths` into the store at `db_path`, in format `fmt`
    ("auto": by each file's name, see `readers.file_format`)."""
    entries = landing_entries(paths, fmt)
    summary = IngestSummary()
    con = open_store(db_path)
    try:
        for entry in entries:
            summary.add(ingest_file(con, entry.path, now, fmt, settings, entry.root))
    finally:
        con.close()
    return summary


def file_digests(handle: IO[bytes], marks: list[int] = ()) -> tuple[str, dict[int, str]]:
    """The sha256 of the whole open file, and of its first `mark` bytes for each of `marks` that
    it is at least as long as (one read: a prefix's digest is a copy of the running one)."""
    handle.seek(0)
    digest = hashlib.sha256()
    at = 0
    prefixes: dict[int, str] = {}
    for mark in [*sorted(set(marks)), None]:
        while mark is None or at < mark:
            block = handle.read(_HASH_BLOCK if mark is None else min(_HASH_BLOCK, mark - at))
            if not block:
                break
            digest.update(block)
            at += len(block)
        if mark is not None and at == mark:
            prefixes[mark] = digest.copy().hexdigest()
    return digest.hexdigest(), prefixes


def ingest_file(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    now: datetime | None = None,
    fmt: str = "auto",
    settings: IngestSettings | None = None,
    root: Path | None = None,
) -> FileSummary:
    """Ingest one file in one transaction (or skip it when this exact file is already in).

    `root`: the folder `path` was found in; its real path must then be `path`, inside `root`.
    """
    settings = settings or IngestSettings()
    openai = file_format(path, fmt) == "openai"
    stamp = now or datetime.now(UTC)
    try:
        handle = open_regular_file(path, root)
    except NotRegularFileError as err:
        return _refuse(con, path, err, stamp)
    with handle:
        size = os.fstat(handle.fileno()).st_size
        earlier = con.execute(
            "SELECT size, sha256 FROM ingested_files WHERE path = ? AND size < ? AND sha256 <> ?",
            [str(path), size, NOT_READ],
        ).fetchall()
        sha, prefixes = file_digests(handle, [old_size for old_size, _ in earlier])
        known = con.execute(
            "SELECT 1 FROM ingested_files WHERE path = ? AND size = ? AND sha256 = ?", [str(path), size, sha]
        ).fetchone()
        if known:
            return FileSummary(str(path), "skipped")
        grown_from = [old_sha for old_size, old_sha in earlier if prefixes.get(old_size) == old_sha]
        con.execute("BEGIN TRANSACTION")
        try:
            with _cyclic_gc_paused():
                result = _ingest_pass(con, path, handle, now, stamp, openai, settings, sha)
            result.superseded = supersede_quarantine(con, str(path), grown_from, sha)
        except FileCorruptError as err:
            con.execute("ROLLBACK")
            con.execute("BEGIN TRANSACTION")
            quarantine = QuarantineRows(str(path), stamp, file_sha256=sha)
            quarantine.add(err.line_no, err.rule, err.detail, err.raw, None, file_level=True)
            quarantine.flush(con)
            result = FileSummary(str(path), "quarantined", read=1, quarantined=1, quarantined_by_rule={err.rule: 1})
        except BaseException:
            con.execute("ROLLBACK")
            raise
        _record_file(con, path, size, sha, result, stamp)
        con.execute("COMMIT")
    return result


def _refuse(con: duckdb.DuckDBPyConnection, path: Path, err: NotRegularFileError, stamp: datetime) -> FileSummary:
    """Quarantine `path`, not read, under the refusal's rule; remembered by its link's own size, so
    the landing sensor does not report it again every tick (a regular file put there later is new)."""
    size = os.lstat(path).st_size
    known = con.execute(
        "SELECT 1 FROM ingested_files WHERE path = ? AND size = ? AND sha256 = ?", [str(path), size, NOT_READ]
    ).fetchone()
    if known:
        return FileSummary(str(path), "skipped")
    result = FileSummary(str(path), "quarantined", read=1, quarantined=1, quarantined_by_rule={err.rule: 1})
    con.execute("BEGIN TRANSACTION")
    try:
        quarantine = QuarantineRows(str(path), stamp)
        quarantine.add(None, err.rule, err.detail, None, None, file_level=True)
        quarantine.flush(con)
        _record_file(con, path, size, NOT_READ, result, stamp)
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")
    return result


def _record_file(
    con: duckdb.DuckDBPyConnection, path: Path, size: int, sha: str, result: FileSummary, stamp: datetime
) -> None:
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


def _ingest_pass(
    con: duckdb.DuckDBPyConnection,
    path: Path,
    handle: IO[bytes],
    now: datetime | None,
    stamp: datetime,
    openai: bool,
    settings: IngestSettings,
    sha: str,
) -> FileSummary:
    """The file's pass in the open transaction: an optimistic one first, then if needed an exact one.

    Finding which ids are stored already reads, for ids that do not grow with time, every stored
    id once per chunk. A new file usually has no stored id at all, so the first pass skips that
    lookup and lets the primary key check each insert. If the key refuses one, the transaction
    (this file's only) is rolled back and the file is read again with the lookup, which counts
    duplicates and quarantines conflicts. A file with stored ids thus costs two passes.

    Likewise for the age horizon: a pass judges each record against the newest ended_at known so
    far; if the file's later rows made a row it kept too old, it is read again knowing the newest
    from the start (which then stays: a row too old then is too old against any later newest).
    """
    look_up_stored = False
    newest = newest_ended_at(con)
    newest_known = False  # whether `newest` is already the file's final one
    while True:
        run = _FileIngest(con, path, handle, now, stamp, look_up_stored, openai, settings, newest, sha)
        try:
            summary = run.run()
        except duckdb.ConstraintException:
            if look_up_stored:
                raise
            look_up_stored = True
        else:
            if not run.kept_too_old():
                return summary
            if newest_known:  # cannot happen: a pass that starts from the final newest keeps no older row
                raise RuntimeError(f"{path}: the age horizon moved on a pass that started from the file's newest row")
            newest, newest_known = run.newest, True
        con.execute("ROLLBACK")
        con.execute("BEGIN TRANSACTION")


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
        handle: IO[bytes],
        now: datetime | None,
        stamp: datetime,
        look_up_stored: bool = True,
        openai: bool = False,
        settings: IngestSettings | None = None,
        newest: datetime | None = None,
        sha: str | None = None,
    ):
        self.con, self.path, self.handle, self.now, self.openai = con, path, handle, now, openai
        self.settings = settings or IngestSettings()
        self.domains = DomainLookup()  # one per pass: each domain named in the file is looked up once
        self.id_key = "id" if openai else "interaction_id"
        self.summary = FileSummary(str(path), "ingested")
        self.rules: Counter[str] = Counter()
        self.quarantine = QuarantineRows(str(path), stamp, file_sha256=sha)
        self.batch = RowBatch(str(path), stamp, look_up_stored=look_up_stored)
        self.seen: dict[str, str] = {}  # id -> content hash of the copy kept (first in this file, or stored)
        self.pending: dict[str, list[tuple[RawRecord, str]]] = {}  # later copies of ids in the batch
        # The age horizon: the newest ended_at of the store and of the rows kept so far, the
        # earliest started_at a record may have against it, and the earliest one kept.
        self.horizon = timedelta(days=self.settings.max_age_days)
        self.newest = newest
        self.cutoff = None if newest is None else self._cutoff(newest)
        self.oldest = _LATEST

    def run(self) -> FileSummary:
        for item in read_file(self.path, self.settings.max_record_bytes, self.handle):
            self.summary.read += 1
            self._one(item)
            if len(self.batch) >= CHUNK_ROWS:
                self._flush()
        self._flush()
        self.summary.quarantined_by_rule = dict(self.rules)
        return self.summary

    def kept_too_old(self) -> bool:
        """Whether a row kept in this pass started before the horizon as it stands at the end."""
        return self.cutoff is not None and self.oldest < self.cutoff

    def _cutoff(self, newest: datetime) -> datetime:
        try:
            return newest - self.horizon
        except OverflowError:  # a newest near year 1: nothing can be older than the horizon
            return _EARLIEST

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
                record = validate_record(item.obj, self.now, self.domains)
                row = prepare_row(record, pii_free=item.pii_free, json_native=item.json_native)
        except ContractError as err:  # the contract's rules, then a record that cannot be stored
            self._reject(item, err.rule, err.detail, _recover_id(item, self.id_key))
            return
        if self._too_old(item, row):
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

    def _too_old(self, item: RawRecord, row: PreparedRow) -> bool:
        """Quarantine `row` (too_old) if it started before the horizon, counting its own ended_at
        among the newest; else keep its times for the horizon. A rejected row's ended_at does not
        move the horizon: it is not stored. (Called once per record: the common case, a row no
        newer than the newest, costs two comparisons.)"""
        started, ended = row.started_at, row.ended_at
        newest, cutoff = self.newest, self.cutoff
        if newest is None or ended > newest:
            newest, cutoff = ended, self._cutoff(ended)
        if started < cutoff:
            self._reject(
                item,
                "too_old",
                f"started_at={started.isoformat()} is more than {self.settings.max_age_days:g} days before the "
                f"newest ended_at {newest.isoformat()}",
                row.interaction_id,
            )
            return True
        self.newest, self.cutoff = newest, cutoff
        if started < self.oldest:
            self.oldest = started
        return False

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
