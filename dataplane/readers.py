"""Streaming readers for landing files: JSON Lines (plain or gzip) and Parquet.

Each reader yields one `RawRecord` per record (1-based line or row number, the raw text kept for
quarantine, and either the decoded object or the per-record ContractError). Damage that makes the
rest of the file untrustworthy (broken gzip or Parquet, invalid UTF-8, a line over 1 MiB, an
empty file) raises `FileCorruptError`; the caller then quarantines the whole file. Memory stays
bounded: JSONL is read a line at a time, Parquet a batch at a time.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from dataplane.errors import ContractError
from dataplane.jsontext import decode_json

MAX_LINE_BYTES = 1024 * 1024
RAW_KEEP = 4096  # bytes of a corrupt file's offending line kept for the quarantine row
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


class FileCorruptError(ContractError):
    """The file as a whole cannot be trusted; `.line_no` and `.raw` locate the damage."""

    def __init__(self, rule: str, detail: str, line_no: int | None = None, raw: str | None = None):
        super().__init__(rule, detail)
        self.line_no = line_no
        self.raw = raw


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


def read_file(path: Path) -> Iterator[RawRecord]:
    """Dispatch on the suffix; see the module docstring for what is yielded and raised."""
    if path.name.endswith(".parquet"):
        return _read_parquet(path)
    return _read_jsonl(path)


def _open_jsonl(path: Path):
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")


def _read_jsonl(path: Path) -> Iterator[RawRecord]:
    line_no = 0
    seen_content = False
    with _open_jsonl(path) as handle:
        while True:
            try:
                line = handle.readline(MAX_LINE_BYTES + 1)
            except (OSError, EOFError, zlib.error) as err:  # gzip damage surfaces while reading
                raise FileCorruptError(
                    "corrupt_file", f"{path.name}: unreadable after line {line_no}: {err}", line_no + 1
                ) from err
            if not line:
                break
            line_no += 1
            if len(line) > MAX_LINE_BYTES:
                raise FileCorruptError(
                    "line_too_long",
                    f"line {line_no} is over {MAX_LINE_BYTES} bytes",
                    line_no,
                    line[:RAW_KEEP].decode("utf-8", "replace"),
                )
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise FileCorruptError(
                    "invalid_utf8", f"line {line_no}: {err}", line_no, line[:RAW_KEEP].decode("utf-8", "replace")
                ) from err
            text = text.rstrip("\r\n")
            if not text.strip():
                continue  # blank lines carry no record
            seen_content = True
            yield _decode_line(line_no, text)
    if not seen_content:
        raise FileCorruptError("empty_file", f"{path.name} holds no records")


def _decode_line(line_no: int, text: str) -> RawRecord:
    try:
        return RawRecord(line_no, text, decode_json(text))
    except ContractError as err:
        return RawRecord(line_no, text, error=err.at(f"line {line_no}"))


def _read_parquet(path: Path) -> Iterator[RawRecord]:
    try:
        parquet = pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as err:
        raise FileCorruptError("corrupt_file", f"{path.name}: not a readable Parquet file: {err}") from err
    if parquet.metadata.num_rows == 0:
        raise FileCorruptError("empty_file", f"{path.name} holds no rows")
    row_no = 0
    batches = parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            break
        except (pa.ArrowException, OSError) as err:
            raise FileCorruptError(
                "corrupt_file", f"{path.name}: unreadable after row {row_no}: {err}", row_no + 1
            ) from err
        decode = _RowDecoder(batch.schema)
        for row in batch.to_pylist():
            row_no += 1
            yield decode(row_no, row)


class _RowDecoder:
    """Turns the rows of one Arrow schema into contract objects.

    Only the columns that can need it are touched per row: timestamp columns (to text) and the
    free-form columns stored as JSON text (decoded), as the batch's schema says.
    """

    def __init__(self, schema: pa.Schema):
        self.timestamps = [f.name for f in schema if _holds_timestamps(f.type)]
        self.json_text = [name for name in JSON_TEXT_FIELDS if name in schema.names]

    def __call__(self, row_no: int, row: dict) -> RawRecord:
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


def _holds_timestamps(kind: pa.DataType) -> bool:
    if pa.types.is_dictionary(kind):
        kind = kind.value_type
    return pa.types.is_timestamp(kind)
