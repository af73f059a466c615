"""Streaming readers for landing files: JSON Lines (plain or gzip) and Parquet.

Each reader yields one `RawRecord` per record (1-based line or row number, the raw text kept for
quarantine, and either the decoded object or the per-record ContractError). A bad record spoils
only itself: a line that is not UTF-8 (`invalid_utf8`), a line or Parquet row over the one byte cap
(`line_too_long`, `IngestSettings.max_record_bytes`) is yielded with its error, and reading goes on
with the next. Damage that makes the rest of the file untrustworthy (broken gzip or Parquet, an
empty file) raises `FileCorruptError`; the caller then quarantines the whole file.

Memory stays bounded: JSONL is read a line at a time, and the rest of an oversized line is skipped
without being kept; a Parquet row is measured before it becomes Python objects
(`dataplane.parquet_rows`).

`open_regular_file` opens a landing file only if it is a regular file, never following a final
symbolic link and never blocking on a FIFO: the one way ingestion opens a file.
"""

from __future__ import annotations

import errno
import gzip
import os
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from dataplane.errors import ContractError
from dataplane.ingest_settings import IngestSettings
from dataplane.jsontext import decode_json
from dataplane.parquet_rows import read_parquet
from dataplane.rawrecord import RAW_KEEP, FileCorruptError, RawRecord

__all__ = ["RAW_KEEP", "FileCorruptError", "NotRegularFileError", "RawRecord", "open_regular_file", "read_file"]

SUFFIXES = (".jsonl", ".jsonl.gz", ".parquet")
# How a landing file says it holds conversations in the OpenAI chat shape (dataplane.openai_chat)
# rather than native records: its name ends so. The name travels with the file through any copy or
# sync, so a landing folder (or any folder given to `retrain ingest`) can mix both.
OPENAI_SUFFIXES = (".openai.jsonl", ".openai.jsonl.gz")
FORMATS = ("auto", "native", "openai")
_SKIP_BLOCK = 1024 * 1024  # the rest of an oversized line is read (and dropped) this much at a time


class NotRegularFileError(FileCorruptError):
    """The path is not a regular file inside the folder it was found in: nothing was read from it."""

    def __init__(self, path: Path, what: str):
        super().__init__(
            "not_a_regular_file", f"{path} is {what}: only regular files inside the landing folder are read"
        )
        self.path = path


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
            where = "" if real.is_relative_to(root) else f", outside {root}"
            raise NotRegularFileError(path, f"reached through a link: it resolves to {real}{where}")
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
        return read_parquet(path, cap, handle)
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
        return RawRecord(line_no, text, decode_json(text), json_native=True)
    except ContractError as err:
        return RawRecord(line_no, text, error=err.at(f"line {line_no}"))
