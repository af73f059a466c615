"""sha256 of files' bytes, read in fixed-size chunks so a multi-gigabyte weights file is never held
in memory at once.

It sits in the data plane, the lowest layer, so that every room may import it: the shipped agent's
manifest (training), the promotion digest (evaluation) and the weights-changed check (assets) hash
files the same way here. The chunk size changes no digest, only how much is read at a time.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

CHUNK = 1 << 20


def _chunks(path: str | os.PathLike) -> Iterator[bytes]:
    with Path(path).open("rb") as handle:
        yield from iter(lambda: handle.read(CHUNK), b"")


def sha256_file(path: str | os.PathLike) -> str:
    """The hex sha256 of `path`'s bytes."""
    return sha256_files([path])


def sha256_files(paths: Iterable[str | os.PathLike]) -> str:
    """The hex sha256 of the files' bytes one after another, in the order given, with nothing between
    them: a caller that needs each file's name or boundary in the digest hashes those itself."""
    digest = hashlib.sha256()
    for path in paths:
        for chunk in _chunks(path):
            digest.update(chunk)
    return digest.hexdigest()
