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


# The key a decision records the candidate folder's digest under (`evaluation.decision`): promotion
# records it, registration (`tracking.registry`) and `retrain approve` refuse a folder whose copy
# digests otherwise, so the version MLflow serves is, byte for byte, the folder the gates judged.
MODEL_DIGEST_KEY = "model_digest"


def model_digest(folder: str | os.PathLike) -> str:
    """sha256 over `folder`'s files: each file's relative path and its sha256, in path order."""
    root = Path(folder)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no model folder to digest")
    files = sorted(p for p in root.rglob("*") if p.is_file())
    if not files:
        raise FileNotFoundError(f"{root}: the model folder holds no files")
    digest = hashlib.sha256()
    for path in files:
        # The path is hashed too: moving bytes between files changes the model as much as changing them.
        digest.update(f"{path.relative_to(root).as_posix()}\0{sha256_file(path)}\n".encode())
    return digest.hexdigest()
