"""Streaming readers for landing files: JSON Lines (plain or gzip) and Parquet.

Each reader yields one `RawRecord` per record (1-based line or row number, the raw text kept for
quarantine, and either the decoded object or the per-record ContractError). A bad record spoils
only itself: a line that is not UTF-8 (`invalid_utf8`), a line or Parquet row over the one byte cap
(`line_too_long`, `IngestSettings.max_record_bytes`) is yielded with its error, and reading goes on
with the next. Damage that makes the rest of the file untrustworthy (broken gzip or Parquet, an
empty file) raises `FileCorruptError`; the caller then quarantines the whole file.

Memory stays bounded: JSONL is read a line at a time, and the rest of an oversized line is skipped
without being kept. A Parquet row is measured on its Arrow buffers before it becomes Python objects:
a row group of one row whose metadata already says it is far over the cap is refused without being
decoded at all, row groups are read in batches sized from their uncompressed size, and dictionary-
encoded text is read as dictionaries (a short file of indices into one huge value must not be
expanded row by row to be measured).

`open_regular_file` opens a landing file only if it is a regular file, never following a final
symbolic link and never blocking on a FIFO: the one way ingestion opens a file.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import stat
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataplane.errors import ContractError
from dataplane.ingest_settings import IngestSettings
from dataplane.jsontext import check_int_range, decode_json

RAW_KEEP = 4096  # bytes of an oversized record kept for its quarantine row
SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
# How a landing file says it holds conversations in the OpenAI chat shape (dataplane.openai_chat)
# rather than native records: its name ends so. The name travels with the file through any copy or
# sync, so a landing folder (or any folder given to `retrain ingest`) can mix both.
OPENAI_SUFFIXES = (".openai.jsonl", ".openai.jsonl.gz")
FORMATS = ("auto", "native", "openai")
# Parquet producers cannot express the contract's free-form objects as fixed structs (user and
# order ids are keys), so these columns may hold JSON text.
JSON_TEXT_FIELDS = ("initial_state", "user_scenario", "messages", "gold", "human_label")
PARQUET_BATCH_ROWS = 4096
# Decoded bytes one Parquet batch, and one slice of it turned into Python objects, should hold:
# what bounds the reader's memory besides the one largest row group's metadata.
PARQUET_BATCH_BYTES = 64 * 1024 * 1024
_SKIP_BLOCK = 1024 * 1024  # the rest of an oversized line is read (and dropped) this much at a time
_SMALL_VALUE = 256  # an oversized row's values up to this size are kept in its quarantine text


class FileCorruptError(ContractError):
    """The file as a whole cannot be trusted; `.line_no` and `.raw` locate the damage."""

    def __init__(self, rule: str, detail: str, line_no: int | None = None, raw: str | None = None):
        super().__init__(rule, detail)
        self.line_no = line_no
        self.raw = raw


class NotRegularFileError(FileCorruptError):
    """The path is not a regular file inside the folder it was found in: nothing was read from it."""

    def __init__(self, path: Path, what: str):
        super().__init__(
            "not_a_regular_file", f"{path} is {what}: only regular files inside the landing folder are read"
        )
        self.path = path


@dataclass
class RawRecord:
    line_no: int
    raw: str | dict  # the JSONL line, or the Parquet row as read
    obj: Any = None
    error: ContractError | None = None

    def raw_text(self) -> str:
        if isinstance(self.raw, str):
            return self.raw
        return json.dumps(self.raw, default=str, ensure_ascii=False)


def is_landing_file(path: Path) -> bool:
    return path.name.endswith(SUFFIXES)


def file_format(path: Path, requested: str = "auto") -> str:
    """ "native" or "openai" for `path`: `requested` unless it is "auto", then by the file's name."""
    if requested not in FORMATS:
        raise ValueError(f"format must be one of {list(FORMATS)}, got {requested!r}")
    if requested != "auto":
        return requested
    return "openai" if path.name.endswith(OPENAI_SUFFIXES) else "native"


def file_kind(mode: int) -> str:
    """What an lstat mode names, in words, for a refusal's detail."""
    for test, name in (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISLNK, "a symbolic link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ):
        if test(mode):
            return name
    return "not a regular file"


# O_NOFOLLOW: a final symbolic link fails the open (ELOOP) instead of being followed. O_NONBLOCK:
# a FIFO swapped in after the lstat opens at once instead of waiting for a writer (it is then
# refused by the fstat); on a regular file the flag changes nothing.
_OPEN_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)


def open_regular_file(path: Path, root: Path | None = None) -> IO[bytes]:
    """`path` opened for binary reading, if it is a regular file (and, with `root`, one whose real
    path is `path` itself, under `root`: no link anywhere on the way). Raises NotRegularFileError,
    having opened nothing but a regular file (a device or FIFO is never opened: its lstat refuses
    it first), and OSError (FileNotFoundError, PermissionError) as `open` would.
    """
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        target = f" to {os.readlink(path)!r}" if stat.S_ISLNK(before.st_mode) else ""
        raise NotRegularFileError(path, file_kind(before.st_mode) + target)
    if root is not None:
        real = Path(os.path.realpath(path))
        if real != Path(path) or not real.is_relative_to(root):
            raise NotRegularFileError(path, f"reached through a link: it resolves to {real}, outside {root}")
    try:
        fd = os.open(path, _OPEN_FLAGS)
    except OSError as err:
        if err.errno == errno.ELOOP:  # swapped for a link since the lstat
            raise NotRegularFileError(path, "a symbolic link") from err
        raise
    after = os.fstat(fd)
    if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (before.st_dev, before.st_ino):
        os.close(fd)
        raise NotRegularFileError(path, "replaced while being opened")
    return os.fdopen(fd, "rb")


def read_file(path: Path, max_record_bytes: int | None = None, handle: IO[bytes] | None = None) -> Iterator[RawRecord]:
    """Dispatch on the suffix; see the module docstring for what is yielded and raised.

    `handle`: `path` already opened (by `open_regular_file`), read from its start; without one
    `path` is opened here. `max_record_bytes`: the cap, default `IngestSettings`'.
    """
    cap = IngestSettings().max_record_bytes if max_record_bytes is None else max_record_bytes
    if path.name.endswith(".parquet"):
        return _read_parquet(path, cap, handle)
    return _read_jsonl(path, cap, handle)


def _read_jsonl(path: Path, cap: int, handle: IO[bytes] | None) -> Iterator[RawRecord]:
    if handle is None:
        with open(path, "rb") as own:
            yield from _read_jsonl(path, cap, own)
        return
    handle.seek(0)
    stream = gzip.GzipFile(fileobj=handle, mode="rb") if path.name.endswith(".gz") else handle
    line_no = 0
    seen_content = False
    while True:
        try:
            line = stream.readline(cap + 1)
            if len(line) > cap:
                skipped = _skip_rest_of_line(stream, line)
        except (OSError, EOFError, zlib.error) as err:  # gzip damage surfaces while reading
            raise FileCorruptError(
                "corrupt_file", f"{path.name}: unreadable after line {line_no}: {err}", line_no + 1
            ) from err
        if not line:
            break
        line_no += 1
        if len(line) > cap:
            seen_content = True
            yield RawRecord(
                line_no,
                line[:RAW_KEEP].decode("utf-8", "replace"),
                error=ContractError("line_too_long", f"line {line_no} holds {skipped} bytes, over the cap of {cap}"),
            )
            continue
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as err:
            seen_content = True
            yield RawRecord(
                line_no,
                # U+FFFD for the bad bytes (the detail names the first): a backslash escape would
                # read as a JSON escape in the raw text.
                line.decode("utf-8", "replace").rstrip("\r\n"),
                error=ContractError(
                    "invalid_utf8", f"line {line_no}: byte {line[err.start]:#04x} at offset {err.start} is not UTF-8"
                ),
            )
            continue
        text = text.rstrip("\r\n")
        if not text.strip():
            continue  # blank lines carry no record
        seen_content = True
        yield _decode_line(line_no, text)
    if not seen_content:
        raise FileCorruptError("empty_file", f"{path.name} holds no records")


def _skip_rest_of_line(stream: IO[bytes], start: bytes) -> int:
    """Read past the end of the line `start` began (dropping what is read); its length in bytes."""
    length = len(start)
    tail = start
    while not tail.endswith(b"\n"):
        tail = stream.readline(_SKIP_BLOCK)
        if not tail:
            break
        length += len(tail)
    return length


def _decode_line(line_no: int, text: str) -> RawRecord:
    try:
        return RawRecord(line_no, text, decode_json(text))
    except ContractError as err:
        return RawRecord(line_no, text, error=err.at(f"line {line_no}"))


def _read_parquet(path: Path, cap: int, handle: IO[bytes] | None) -> Iterator[RawRecord]:
    if handle is None:
        with open(path, "rb") as own:
            yield from _read_parquet(path, cap, own)
        return
    handle.seek(0)
    try:
        meta = pq.ParquetFile(handle).metadata
        # Text columns with a dictionary page are read as dictionaries: a row is then measured by
        # its values' lengths, and a huge dictionary value is never copied once per row.
        parquet = pq.ParquetFile(handle, metadata=meta, read_dictionary=_dictionary_columns(meta))
    except (pa.ArrowException, OSError) as err:
        raise FileCorruptError("corrupt_file", f"{path.name}: not a readable Parquet file: {err}") from err
    if meta.num_rows == 0:
        raise FileCorruptError("empty_file", f"{path.name} holds no rows")
    row_no = 0
    for group in range(meta.num_row_groups):
        info = meta.row_group(group)
        if info.num_rows == 1 and info.total_byte_size > 2 * cap:
            # One row whose values hold over twice the cap uncompressed: no decoding needed to
            # refuse it (below that, page overhead could make a row under the cap look over it).
            row_no += 1
            yield _oversized_from_metadata(parquet, group, row_no, info.total_byte_size, cap)
            continue
        per_row = max(1, info.total_byte_size // max(1, info.num_rows))
        batch_rows = max(1, min(PARQUET_BATCH_ROWS, PARQUET_BATCH_BYTES // per_row))
        batches = parquet.iter_batches(batch_size=batch_rows, row_groups=[group])
        while True:
            try:
                batch = next(batches)
            except StopIteration:
                break
            except (pa.ArrowException, OSError) as err:
                raise FileCorruptError(
                    "corrupt_file", f"{path.name}: unreadable after row {row_no}: {err}", row_no + 1
                ) from err
            yield from _batch_records(batch, row_no, cap)
            row_no += batch.num_rows


def _dictionary_columns(meta: pq.FileMetaData) -> list[str]:
    """Paths of the BYTE_ARRAY columns (at any depth) with a dictionary page in some row group."""
    found: dict[str, None] = {}
    for group in range(meta.num_row_groups):
        info = meta.row_group(group)
        for j in range(info.num_columns):
            column = info.column(j)
            if column.physical_type == "BYTE_ARRAY" and column.has_dictionary_page:
                found[column.path_in_schema] = None
    return list(found)


def _batch_records(batch: pa.RecordBatch, before: int, cap: int) -> Iterator[RawRecord]:
    """The rows of `batch` (numbered from `before` + 1): each one over `cap` as its error, measured
    on the Arrow buffers; the rest turned into Python objects a slice of at most
    PARQUET_BATCH_BYTES at a time."""
    sizes = _row_sizes(batch)
    start = 0
    for over in [*np.flatnonzero(sizes > cap).tolist(), batch.num_rows]:
        stop = start
        while stop < over:  # rows start..over-1 are under the cap: slices of the byte budget
            totals = np.cumsum(sizes[start:over])
            stop = start + max(1, int(np.searchsorted(totals, PARQUET_BATCH_BYTES, side="right")))
            yield from _plain_rows(batch.slice(start, stop - start), before + start)
            start = stop
        if over < batch.num_rows:
            yield _oversized_row(batch, over, before + over + 1, int(sizes[over]), cap)
            start = over + 1


def _plain_rows(part: pa.RecordBatch, before: int) -> Iterator[RawRecord]:
    part = _without_dictionaries(part)
    decode = _RowDecoder(part.schema)
    for offset, row in enumerate(part.to_pylist(), start=before + 1):
        yield decode(offset, row)


def _row_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """Bytes of each row's values (text and binary by length, fixed-width values by width)."""
    total = np.zeros(batch.num_rows, dtype=np.int64)
    for column in batch.columns:
        total += _value_sizes(column)
    return total


def _value_sizes(array: pa.Array) -> np.ndarray:
    """Bytes of each value of `array`, nested values summed into their parent's; 0 for a null."""
    kind = array.type
    n = len(array)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if pa.types.is_dictionary(kind):
        values = _value_sizes(array.dictionary)
        indices = array.indices.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        sizes = values[indices] if len(values) else np.zeros(n, dtype=np.int64)
    elif (
        pa.types.is_string(kind)
        or pa.types.is_binary(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_large_binary(kind)
    ):
        sizes = np.asarray(pc.binary_length(array).fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_map(kind):
        # Offsets index the whole child array (a slice keeps its parent's child), so a running
        # total over the child gives each list's bytes as a difference of two prefix sums.
        child = np.concatenate(([0], np.cumsum(_value_sizes(array.values))))
        offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        sizes = child[offsets[1:]] - child[offsets[:-1]]
    elif pa.types.is_fixed_size_list(kind):
        child = _value_sizes(array.flatten())
        sizes = child.reshape(n, kind.list_size).sum(axis=1) if kind.list_size else np.zeros(n, dtype=np.int64)
    elif pa.types.is_struct(kind):
        sizes = np.zeros(n, dtype=np.int64)
        for i in range(kind.num_fields):
            sizes += _value_sizes(array.field(i))
    elif pa.types.is_null(kind):
        return np.zeros(n, dtype=np.int64)
    else:
        try:
            width = max(1, kind.bit_width // 8)
        except ValueError:  # a type without a fixed width this reader does not know: its share of the buffers
            width = max(1, array.get_total_buffer_size() // n)
        sizes = np.full(n, width, dtype=np.int64)
    if array.null_count:
        sizes = np.where(array.is_null().to_numpy(zero_copy_only=False), 0, sizes)
    return sizes


def _without_dictionaries(part: pa.RecordBatch) -> pa.RecordBatch:
    """`part` with its dictionary columns (at any depth) as plain ones: converting a dictionary
    array to Python objects goes value by value, tens of times slower."""
    if not any(_has_dictionary(f.type) for f in part.schema):
        return part
    columns = [column.cast(_plain_type(column.type)) for column in part.columns]
    return pa.RecordBatch.from_arrays(columns, names=part.schema.names)


def _has_dictionary(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        return True
    return any(_has_dictionary(kind.field(i).type) for i in range(kind.num_fields))


def _plain_type(kind: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(kind):
        return _plain_type(kind.value_type)
    if pa.types.is_struct(kind):
        return pa.struct([f.with_type(_plain_type(f.type)) for f in kind])
    if pa.types.is_map(kind):
        return pa.map_(_plain_type(kind.key_type), _plain_type(kind.item_type))
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_plain_type(kind.value_type)))
    if pa.types.is_fixed_size_list(kind):
        return pa.list_(kind.value_field.with_type(_plain_type(kind.value_type)), kind.list_size)
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_plain_type(kind.value_type)))
    return kind


def _oversized_row(batch: pa.RecordBatch, index: int, row_no: int, size: int, cap: int) -> RawRecord:
    """Row `index` of `batch`, over the cap: its small values kept (an id, timestamps), the others
    named by their size, so nothing large becomes a Python object."""
    kept: dict[str, Any] = {}
    for name, column in zip(batch.schema.names, batch.columns):
        value = column.slice(index, 1)
        nbytes = int(_value_sizes(value)[0])
        kept[name] = value.to_pylist()[0] if nbytes <= _SMALL_VALUE else f"<{nbytes} bytes>"
    return _too_long(row_no, kept, f"row {row_no} holds {size} bytes, over the cap of {cap}")


def _oversized_from_metadata(parquet: pq.ParquetFile, group: int, row_no: int, size: int, cap: int) -> RawRecord:
    """The one row of row group `group`, refused on its metadata: only its small columns are read."""
    info = parquet.metadata.row_group(group)
    by_column: dict[str, int] = {}
    for j in range(info.num_columns):
        column = info.column(j)
        top = column.path_in_schema.split(".")[0]
        by_column[top] = by_column.get(top, 0) + column.total_uncompressed_size
    small = [name for name, nbytes in by_column.items() if nbytes <= RAW_KEEP]
    kept: dict[str, Any] = {name: f"<{nbytes} bytes>" for name, nbytes in by_column.items() if name not in small}
    if small:
        try:
            kept.update(parquet.read_row_group(group, columns=small).to_pylist()[0])
        except (pa.ArrowException, OSError):
            pass  # the refusal stands on the metadata; the small values only help find the row
    return _too_long(
        row_no,
        kept,
        f"row {row_no} holds {size} bytes uncompressed (Parquet metadata), over the cap of {cap}; not decoded",
    )


def _too_long(row_no: int, kept: dict[str, Any], detail: str) -> RawRecord:
    return RawRecord(
        row_no, json.dumps(kept, default=str, ensure_ascii=False), error=ContractError("line_too_long", detail)
    )


class _RowDecoder:
    """Turns the rows of one Arrow schema into contract objects.

    Only the columns that can need it are touched per row: timestamp columns (to text) and the
    free-form columns stored as JSON text (decoded), as the batch's schema says.
    """

    def __init__(self, schema: pa.Schema):
        self.timestamps = [f.name for f in schema if _holds_timestamps(f.type)]
        self.json_text = [name for name in JSON_TEXT_FIELDS if name in schema.names]
        # JSON text is range-checked as it is decoded; of Arrow's integer types only uint64 can
        # hold a value outside int64, so only a schema with one has its rows walked.
        self.unsigned = any(_holds_uint64(f.type) for f in schema)

    def __call__(self, row_no: int, row: dict) -> RawRecord:
        if self.unsigned:
            try:
                check_int_range(row)
            except ContractError as err:
                return RawRecord(row_no, row, error=err.at(f"row {row_no}"))
        if not self.timestamps and not self.json_text:
            return RawRecord(row_no, row, row)
        obj = dict(row)  # `row` stays as read, serialised only if it ends up in quarantine
        for key in self.timestamps:
            value = obj[key]
            if isinstance(value, datetime):
                # A naive Parquet timestamp has no offset: keep it offset-less so the contract says so.
                obj[key] = value.isoformat()
        for key in self.json_text:
            value = obj[key]
            if isinstance(value, str):
                try:
                    obj[key] = decode_json(value)
                except ContractError as err:
                    return RawRecord(row_no, row, error=err.at(f"row {row_no} {key}"))
        return RawRecord(row_no, row, obj)


def _holds_uint64(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_uint64(kind):
        return True
    return any(_holds_uint64(kind.field(i).type) for i in range(kind.num_fields))


def _holds_timestamps(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_timestamp(kind)
