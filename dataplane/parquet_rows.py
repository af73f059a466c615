"""Parquet landing files read a row at a time, each row measured before it becomes Python objects.

One byte cap for every format (`IngestSettings.max_record_bytes`): a row over it is yielded with its
`line_too_long` error and reading goes on, without the row ever being turned into Python objects.
How a row is measured depends on what the file's metadata says about its row group:

- one row alone in a row group whose values hold over twice the cap uncompressed: refused on the
  metadata, never decoded;
- a row group of up to PARQUET_BATCH_BYTES uncompressed: read with pyarrow in batches, each row
  measured on its Arrow buffers (text by length, fixed-width values by width, nested values summed),
  the rows under the cap turned into Python objects a slice of at most PARQUET_BATCH_BYTES at a
  time. Dictionary-encoded text is read as dictionaries, so a short run of indices into one huge
  value is measured by the value's length, never expanded row by row;
- a larger row group: read through DuckDB, whose Parquet reader measures a value and skips it
  without copying it (pyarrow's decoding of one value costs about three times its size, which
  for a value of hundreds of MB is no bound at all); only the rows under the cap are fetched.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from dataplane.errors import ContractError
from dataplane.jsontext import check_int_range, decode_json
from dataplane.pii_records import json_text_pii_free
from dataplane.rawrecord import RAW_KEEP, FileCorruptError, RawRecord

# Parquet producers cannot express the contract's free-form objects as fixed structs (user and
# order ids are keys), so these columns may hold JSON text.
JSON_TEXT_FIELDS = ("initial_state", "user_scenario", "messages", "gold", "human_label")
PARQUET_BATCH_ROWS = 4096
# Decoded bytes one Parquet batch, and one slice of it turned into Python objects, should hold; a
# row group larger than this uncompressed is read through DuckDB.
PARQUET_BATCH_BYTES = 64 * 1024 * 1024
_SMALL_VALUE = 256  # an oversized row's values up to this size are kept in its quarantine text


def read_parquet(path: Path, cap: int, handle: IO[bytes] | None = None) -> Iterator[RawRecord]:
    """The rows of the Parquet file `path` (read from `handle` when given), each under `cap` bytes
    or yielded with its `line_too_long` error; see the module docstring."""
    if handle is None:
        with open(path, "rb") as own:
            yield from read_parquet(path, cap, own)
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
    first = 0  # rows before this row group
    for group in range(meta.num_row_groups):
        info = meta.row_group(group)
        if info.num_rows == 1 and info.total_byte_size > 2 * cap:
            # One row whose values hold over twice the cap uncompressed: no decoding needed to
            # refuse it (below that, page overhead could make a row under the cap look over it).
            yield _oversized_from_metadata(parquet, group, first + 1, info.total_byte_size, cap)
        elif info.total_byte_size > PARQUET_BATCH_BYTES:
            yield from _large_group(path, handle, first, info.num_rows, cap)
        else:
            yield from _small_group(path, parquet, group, first, info, cap)
        first += info.num_rows


def _small_group(
    path: Path, parquet: pq.ParquetFile, group: int, first: int, info: pq.RowGroupMetaData, cap: int
) -> Iterator[RawRecord]:
    """Row group `group` (`first` rows before it) through pyarrow, in batches of about
    PARQUET_BATCH_BYTES by its uncompressed size per row."""
    per_row = max(1, info.total_byte_size // max(1, info.num_rows))
    batch_rows = max(1, min(PARQUET_BATCH_ROWS, PARQUET_BATCH_BYTES // per_row))
    batches = parquet.iter_batches(batch_size=batch_rows, row_groups=[group])
    done = first
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except (pa.ArrowException, OSError) as err:
            raise FileCorruptError(
                "corrupt_file", f"{path.name}: unreadable after row {done}: {err}", done + 1
            ) from err
        yield from _batch_records(batch, done, cap)
        done += batch.num_rows


# The large row group's reads, through DuckDB. Each value's size is the length of its text (a
# string's bytes; a number, timestamp or nested value as DuckDB writes it), so no value is copied
# to be measured; `COLUMNS(...)` spares building SQL from the file's column names. The sizes are
# summed per row in DuckDB, so only the rows over the cap come back.
_SIZES = (
    "WITH sizes AS (SELECT file_row_number, "
    "coalesce(strlen(CAST(COLUMNS(* EXCLUDE (file_row_number)) AS VARCHAR)), 0) "
    "FROM read_parquet(?, file_row_number = true) WHERE file_row_number >= ? AND file_row_number < ?) "
)
_OVER = (
    _SIZES + "SELECT file_row_number FROM sizes "
    "WHERE list_sum(list_value(*COLUMNS(* EXCLUDE (file_row_number)))) > ? ORDER BY file_row_number"
)
_OVER_SIZES = _SIZES + "SELECT * FROM sizes WHERE list_contains(?, file_row_number) ORDER BY file_row_number"
_SMALL_VALUES = (
    "SELECT CASE WHEN coalesce(strlen(CAST(COLUMNS(* EXCLUDE (file_row_number)) AS VARCHAR)), 0) <= ? "
    "THEN CAST(COLUMNS(* EXCLUDE (file_row_number)) AS VARCHAR) END "
    "FROM read_parquet(?, file_row_number = true) WHERE list_contains(?, file_row_number) ORDER BY file_row_number"
)
_ROWS = (
    "SELECT * FROM read_parquet(?, file_row_number = true) "
    "WHERE file_row_number >= ? AND file_row_number < ? AND NOT list_contains(?, file_row_number)"
)


def _large_group(path: Path, handle: IO[bytes], first: int, count: int, cap: int) -> Iterator[RawRecord]:
    """Rows first+1..first+count, a row group over PARQUET_BATCH_BYTES uncompressed, through
    DuckDB: every row measured, then the rows under the cap fetched as Arrow batches (one thread,
    so in file order), the others refused with their small values."""
    source = _same_file(path, handle)
    last = first + count
    con = duckdb.connect(config={"threads": 1})
    try:
        over = [row for (row,) in con.execute(_OVER, [source, first, last, cap]).fetchall()]
        refused = _refused_rows(con, source, first, last, over, cap)
        # Rows under the cap, a batch of at most PARQUET_BATCH_BYTES of them at a time.
        batch_rows = max(1, min(PARQUET_BATCH_ROWS, PARQUET_BATCH_BYTES // cap))
        for batch in con.sql(_ROWS, params=[source, first, last, over]).to_arrow_reader(batch_rows):
            rows = batch.column(batch.schema.get_field_index("file_row_number")).to_numpy() + 1
            batch = batch.drop_columns(["file_row_number"])
            while refused and refused[0].line_no < rows[0]:
                yield refused.pop(0)
            yield from _numbered_rows(batch, rows)
        yield from refused
    except duckdb.Error as err:
        raise FileCorruptError(
            "corrupt_file", f"{path.name}: rows {first + 1}-{last} unreadable: {err}", first + 1
        ) from err
    finally:
        con.close()


def _refused_rows(
    con: duckdb.DuckDBPyConnection, source: str, first: int, last: int, over: list[int], cap: int
) -> list[RawRecord]:
    """The rows `over` the cap (file row numbers, ascending), each with its values of up to
    _SMALL_VALUE bytes as text and the others named by their size."""
    if not over:
        return []
    sizes = con.sql(_OVER_SIZES, params=[source, first, last, over]).to_arrow_table()
    small = con.sql(_SMALL_VALUES, params=[_SMALL_VALUE, source, over]).to_arrow_table()
    names = sizes.schema.names[1:]
    out = []
    for by_column, values in zip(sizes.to_pylist(), small.to_pylist()):
        number = by_column.pop("file_row_number") + 1
        kept = {
            name: value if size <= _SMALL_VALUE else f"<{size} bytes>"
            for name, value, size in zip(names, values.values(), by_column.values())
        }
        detail = f"row {number} holds {sum(by_column.values())} bytes, over the cap of {cap}"
        out.append(_too_long(number, kept, detail))
    return out


def _same_file(path: Path, handle: IO[bytes]) -> str:
    """A name by which DuckDB opens the very file `handle` holds, not whatever `path` names now:
    the process's own link to the descriptor where there is one, else `path` once checked."""
    own = f"/proc/self/fd/{handle.fileno()}"
    if os.path.exists(own):
        return own
    opened, named = os.fstat(handle.fileno()), os.stat(path)
    if (opened.st_dev, opened.st_ino) != (named.st_dev, named.st_ino):
        raise FileCorruptError("corrupt_file", f"{path.name} was replaced while being read")
    return str(path)


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
    """The rows of `batch` (numbered from `before` + 1): each one over `cap`, measured on the Arrow
    buffers, as its error; the others turned into Python objects."""
    sizes = _row_sizes(batch)
    start = 0
    for over in [*np.flatnonzero(sizes > cap).tolist(), batch.num_rows]:
        if start < over:
            part = batch.slice(start, over - start)
            yield from _numbered_rows(part, np.arange(before + start + 1, before + over + 1), sizes[start:over])
        if over < batch.num_rows:
            yield _oversized_row(batch, over, before + over + 1, int(sizes[over]), cap)
        start = over + 1


def _numbered_rows(part: pa.RecordBatch, numbers: np.ndarray, sizes: np.ndarray | None = None) -> Iterator[RawRecord]:
    """The rows of `part` (all under the cap), row i numbered `numbers[i]`, turned into Python
    objects a slice of at most PARQUET_BATCH_BYTES at a time."""
    totals = np.cumsum(_row_sizes(part) if sizes is None else sizes)
    start = 0
    while start < part.num_rows:
        budget = PARQUET_BATCH_BYTES + (int(totals[start - 1]) if start else 0)
        stop = max(start + 1, int(np.searchsorted(totals, budget, side="right")))
        piece = part.slice(start, stop - start)
        yield from _RowDecoder(piece.schema).records(piece, numbers[start:stop].tolist())
        start = stop


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


def _python_values(column: pa.Array) -> tuple[list, bool]:
    """The values of `column` as Python objects, and whether some text value repeats.

    A dictionary-encoded text column with fewer values in its dictionary than rows becomes its
    dictionary's values, each one Python string shared by every row that holds it (index by
    index, as `to_pylist` of the column cast to plain text would give them, but without copying
    the text once per row); a repeated value can then be decoded once. (A batch's dictionary may
    be its whole row group's: a larger one is not converted whole for a few of its values.) Any
    other column (dictionaries cast to plain ones: their conversion goes value by value, tens of
    times slower) converts as a whole.
    """
    kind = column.type
    if (
        pa.types.is_dictionary(kind)
        and (pa.types.is_string(kind.value_type) or pa.types.is_large_string(kind.value_type))
        and len(column.dictionary) < len(column)
    ):
        values = column.dictionary.to_pylist()
        return [None if i is None else values[i] for i in column.indices.to_pylist()], True
    if _has_dictionary(kind):
        column = column.cast(_plain_type(kind))
    return column.to_pylist(), False


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
    free-form columns stored as JSON text (decoded), as the batch's schema says. A JSON text that
    repeats in its column is decoded once, and tested then for whether it can hold anything the
    scrubber would mask (`pii_records.json_text_pii_free`); the record carries the names of the
    fields that cannot, and storing it skips their walk. (A text met once is not tested: on a
    small object the test costs about what the walk it could spare does.)
    """

    def __init__(self, schema: pa.Schema):
        self.timestamps = [f.name for f in schema if _holds_timestamps(f.type)]
        self.json_text = [name for name in JSON_TEXT_FIELDS if name in schema.names]
        # JSON text is range-checked as it is decoded; of Arrow's integer types only uint64 can
        # hold a value outside int64, so only a schema with one has its rows walked.
        self.unsigned = any(_holds_uint64(f.type) for f in schema)
        # Whether every column becomes JSON-native values (`RawRecord.json_native`): timestamps
        # become text, JSON text decodes to them, and any other column must be of types Arrow
        # turns into them (a free-form field as a struct holding a UUID, a date or a decimal
        # keeps its records on the slow path).
        self.native = all(f.name in self.timestamps or _native_type(f.type) for f in schema)
        # Per JSON-text column whose values repeat: what each text (by the identity of the one
        # string object `_python_values` shares between its rows) decoded to.
        self.repeats: dict[str, dict[int, tuple[Any, ContractError | None, bool]]] = {}

    def records(self, piece: pa.RecordBatch, numbers: list[int]) -> Iterator[RawRecord]:
        """The rows of `piece`, row i numbered `numbers[i]`: converted a column at a time, each
        repeated JSON text of a column decoded once."""
        names = piece.schema.names
        columns = []
        self.repeats = {}
        for name, column in zip(names, piece.columns):
            values, repeated = _python_values(column)
            columns.append(values)
            if repeated and name in _SHARED_DECODE:
                self.repeats[name] = {}
        for row_no, values in zip(numbers, zip(*columns)):
            yield self(row_no, dict(zip(names, values)))

    def __call__(self, row_no: int, row: dict) -> RawRecord:
        if self.unsigned:
            try:
                check_int_range(row)
            except ContractError as err:
                return RawRecord(row_no, row, error=err.at(f"row {row_no}"))
        if not self.timestamps and not self.json_text:
            return RawRecord(row_no, row, row, json_native=self.native)
        obj = dict(row)  # `row` stays as read, serialised only if it ends up in quarantine
        for key in self.timestamps:
            value = obj[key]
            if isinstance(value, datetime):
                # A naive Parquet timestamp has no offset: keep it offset-less so the contract says so.
                obj[key] = value.isoformat()
        pii_free = None
        for key in self.json_text:
            value = obj[key]
            if isinstance(value, str):
                seen = self.repeats.get(key)
                if seen is None:
                    try:
                        obj[key] = decode_json(value)
                    except ContractError as err:
                        return RawRecord(row_no, row, error=err.at(f"row {row_no} {key}"))
                    continue
                known = seen.get(id(value))
                if known is None:
                    known = seen[id(value)] = _decoded(value)
                decoded, error, clean = known
                if error is not None:
                    return RawRecord(row_no, row, error=error.at(f"row {row_no} {key}"))
                obj[key] = decoded
                if clean:
                    pii_free = [key] if pii_free is None else [*pii_free, key]
        return RawRecord(
            row_no,
            row,
            obj,
            pii_free=_NONE_CLEAN if pii_free is None else frozenset(pii_free),
            json_native=self.native,
        )


# The JSON-text columns whose decoded value may be shared by the rows that hold the same text:
# nothing that reads a record changes it (validation builds new containers, the scrub walk copies
# what it masks). Not initial_state: it is handed as it is to the domain's own state model.
_SHARED_DECODE = frozenset(JSON_TEXT_FIELDS) - {"initial_state"}
_NONE_CLEAN: frozenset[str] = frozenset()


def _decoded(text: str) -> tuple[Any, ContractError | None, bool]:
    """(the value of JSON `text`, None, whether it cannot hold PII), or (None, its error, False)."""
    try:
        value = decode_json(text)
    except ContractError as err:
        return None, err, False
    return value, None, json_text_pii_free(text)


def _holds_uint64(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    if pa.types.is_uint64(kind):
        return True
    return any(_holds_uint64(kind.field(i).type) for i in range(kind.num_fields))


def _native_type(kind: pa.DataType) -> bool:
    """Whether `to_pylist` turns every value of an Arrow column of type `kind` into a dict, list,
    str, int, float, bool or None."""
    if pa.types.is_dictionary(kind):
        return _native_type(kind.value_type)
    if isinstance(kind, pa.BaseExtensionType):
        return False  # e.g. a UUID, which becomes a uuid.UUID
    if (
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or pa.types.is_integer(kind)
        or pa.types.is_float32(kind)
        or pa.types.is_float64(kind)
        or pa.types.is_boolean(kind)
        or pa.types.is_null(kind)
    ):
        return True
    if pa.types.is_struct(kind) or pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return all(_native_type(kind.field(i).type) for i in range(kind.num_fields))
    return False  # maps (tuples), binary, dates, times, decimals, durations, half floats, ...


def _holds_timestamps(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_timestamp(kind)
