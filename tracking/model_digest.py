"""The digest that ties a promotion decision to the weights it evaluated.

`promotion_gate` records `model_digest(candidate folder)` in the decision's lineage; registration
(`registered_model`, and `retrain approve` days later) copies the folder aside, digests the copy
and uploads that copy only when its digest is the recorded one. So the version MLflow serves is,
byte for byte, the folder the gates judged: a weight, config or tokenizer file changed (or added,
or removed) after the decision is refused, and the copy closes the window between checking the
folder and uploading it.

The digest is sha256 over every file of the folder (sorted relative paths, each with its own
chunked sha256, by `dataplane.hashing.sha256_file`): every file registration uploads, the
weights, configs and tokenizer files included.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from dataplane.hashing import sha256_file

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
