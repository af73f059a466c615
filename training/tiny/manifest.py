"""The shipped agent's manifest: what the folder holds, how it was built, what it measured.

`manifest.json` sits beside the weights. It records the sha256 and size of every other file, the
command that rebuilds the folder, the recipe (`domains.retail.tiny_agent.AgentRecipe` for the retail agent), the tokenizer
format, the build machine and seeds, and the measured greedy figures. Loading goes through
`verify_shipped`, which refuses a folder that differs from its manifest in any byte or file, so a
run never starts from weights other than the ones measured.

The manifest is covered by its own digest: `manifest_sha256` is the sha256 of the manifest's
canonical JSON (sorted keys, no whitespace) without that field. A manifest edited after it was
written (a figure, the recipe, a file's recorded sha256 changed to match swapped weights) no longer
matches it and is refused, naming the rule `manifest_digest`. `seal_manifest` writes that digest
for a manifest whose files it has just checked (how an older, unsealed manifest is brought up to date).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dataplane.hashing import sha256_file
from training.checkpoints import load_policy
from training.tiny.bootstrap import TOKENIZER_FORMAT

# The files a shipped folder holds: safetensors weights, the model and generation configs, the
# tokenizer with its chat template. Anything else a trainer leaves (a pickled training_args.bin)
# is not copied.
WEIGHTS_FILE = "model.safetensors"
SHIPPED_FILES = (
    WEIGHTS_FILE,
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "chat_template.jinja",
)

MANIFEST_NAME = "manifest.json"
MANIFEST_VERSION = 2  # 2: the manifest carries its own digest (MANIFEST_DIGEST_KEY)
MANIFEST_DIGEST_KEY = "manifest_sha256"
MAX_SHIPPED_BYTES = 5 * 1024 * 1024
SHIPPED_AGENT_DIR = Path(__file__).resolve().parents[2] / "models" / "retail-agent-tiny"
REBUILD_COMMAND = "python bench/shipped_agent.py build --out models/retail-agent-tiny"
_REQUIRED_KEYS = ("manifest_version", "files", "rebuild_command", "recipe", "tokenizer_format", "build", "figures")


class ManifestError(ValueError):
    """A shipped folder that does not match its manifest; names the file and the rule it broke."""

    def __init__(self, folder: Path, rule: str, detail: str) -> None:
        super().__init__(f"{folder}: {rule}: {detail}")
        self.folder = folder
        self.rule = rule
        self.detail = detail


def file_entries(folder: Path) -> dict[str, dict[str, Any]]:
    """{file name: {sha256, bytes}} for every file of `folder` except the manifest itself."""
    return {
        path.name: {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        for path in sorted(folder.iterdir())
        if path.name != MANIFEST_NAME
    }


def build_machine(threads: int | None) -> dict[str, Any]:
    """The machine and library versions a build or measurement ran on: greedy decoding is
    reproducible on machines of this kind, and these say which kind."""
    import torch  # heavy: versions of the numeric stack
    import transformers

    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count(),
        "torch_threads": threads,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
    }


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def manifest_digest(manifest: Mapping[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON, its own digest field left out."""
    body = {key: value for key, value in manifest.items() if key != MANIFEST_DIGEST_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _write_sealed(folder: Path, manifest: Mapping[str, Any]) -> dict[str, Any]:
    sealed = {**manifest, MANIFEST_DIGEST_KEY: manifest_digest(manifest)}
    (folder / MANIFEST_NAME).write_text(json.dumps(sealed, indent=2, sort_keys=True) + "\n")
    return sealed


def write_manifest(
    folder: Path,
    *,
    recipe: Mapping[str, Any],
    build: Mapping[str, Any],
    figures: Mapping[str, Any],
    rebuild_command: str = REBUILD_COMMAND,
) -> dict[str, Any]:
    """Write `folder/manifest.json` for the files `folder` holds now; the manifest written."""
    check_contents(folder)
    manifest = {
        "manifest_version": MANIFEST_VERSION,
        "rebuild_command": rebuild_command,
        "recipe": dict(recipe),
        "tokenizer_format": TOKENIZER_FORMAT,
        "build": dict(build),
        "figures": dict(figures),
        "files": file_entries(folder),
    }
    return _write_sealed(folder, manifest)


def seal_manifest(folder: str | os.PathLike) -> dict[str, Any]:
    """Write the manifest's own digest (and the current manifest version) after checking that every
    file still matches the sha256 the manifest records; refuses (ManifestError) a folder that does not.
    How a manifest written before manifests were sealed is brought up to date, without a rebuild."""
    folder = Path(folder)
    manifest = read_manifest(folder)
    _check_files(folder, manifest)
    return _write_sealed(folder, {**manifest, "manifest_version": MANIFEST_VERSION})


def check_contents(folder: Path) -> None:
    """The folder holds exactly the shipped files, weights in safetensors, under the size limit."""
    present = {path.name for path in folder.iterdir() if path.name != MANIFEST_NAME}
    missing = sorted(set(SHIPPED_FILES) - present)
    extra = sorted(present - set(SHIPPED_FILES))
    if missing:
        raise ManifestError(folder, "missing_file", f"{missing[0]} is one of the shipped files and is absent")
    if extra:
        raise ManifestError(folder, "extra_file", f"{extra[0]} is not one of the shipped files {list(SHIPPED_FILES)}")
    total = sum((folder / name).stat().st_size for name in present)
    if total > MAX_SHIPPED_BYTES:
        raise ManifestError(folder, "too_large", f"{total} bytes in all, over the {MAX_SHIPPED_BYTES}-byte limit")


def read_manifest(folder: Path) -> dict[str, Any]:
    path = folder / MANIFEST_NAME
    if not path.is_file():
        raise ManifestError(folder, "no_manifest", f"{MANIFEST_NAME} is missing")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise ManifestError(folder, "bad_manifest", f"{MANIFEST_NAME} is not JSON ({error})") from error
    missing = [key for key in _REQUIRED_KEYS if key not in manifest]
    if missing:
        raise ManifestError(folder, "bad_manifest", f"{MANIFEST_NAME} lacks {missing}")
    return manifest


def verify_shipped(folder: str | os.PathLike) -> dict[str, Any]:
    """The manifest of `folder` once every file matches it; a `ManifestError` naming the first
    file that does not (changed bytes, missing, extra) or the rule the folder breaks."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ManifestError(folder, "no_folder", "the shipped agent's folder does not exist")
    manifest = read_manifest(folder)
    if manifest["manifest_version"] != MANIFEST_VERSION:
        raise ManifestError(
            folder, "manifest_version", f"{manifest['manifest_version']!r}, this code reads {MANIFEST_VERSION}"
        )
    recorded = manifest.get(MANIFEST_DIGEST_KEY)
    if recorded is None:
        raise ManifestError(folder, "manifest_digest", f"{MANIFEST_NAME} carries no {MANIFEST_DIGEST_KEY}")
    actual = manifest_digest(manifest)
    if actual != recorded:
        raise ManifestError(
            folder,
            "manifest_digest",
            f"{MANIFEST_NAME}'s content has sha256 {actual}, its {MANIFEST_DIGEST_KEY} says {recorded}: "
            "the manifest was changed after it was written",
        )
    if manifest["tokenizer_format"] != TOKENIZER_FORMAT:
        raise ManifestError(
            folder,
            "tokenizer_format",
            f"built with tokenizer format {manifest['tokenizer_format']!r}; this code spells format {TOKENIZER_FORMAT}",
        )
    _check_files(folder, manifest)
    return manifest


def _check_files(folder: Path, manifest: Mapping[str, Any]) -> None:
    """Every file of `folder` is listed with its sha256 in `manifest`, and nothing else is there."""
    listed = manifest["files"]
    present = {path.name for path in folder.iterdir() if path.name != MANIFEST_NAME}
    for name in sorted(set(listed) - present):
        raise ManifestError(folder, "missing_file", f"{name} is listed in {MANIFEST_NAME} and absent")
    for name in sorted(present - set(listed)):
        raise ManifestError(folder, "extra_file", f"{name} is not listed in {MANIFEST_NAME}")
    for name in sorted(listed):
        actual = sha256_file(folder / name)
        if actual != listed[name]["sha256"]:
            raise ManifestError(
                folder, "sha256_mismatch", f"{name} has sha256 {actual}, the manifest says {listed[name]['sha256']}"
            )
    check_contents(folder)
    if WEIGHTS_FILE not in listed:
        raise ManifestError(folder, "missing_file", f"{WEIGHTS_FILE} (safetensors weights) is not listed")


def shipped_agent_path(folder: str | os.PathLike | None = None) -> Path:
    """The shipped agent's folder (default `models/retail-agent-tiny`), verified against its manifest."""
    path = Path(folder) if folder is not None else SHIPPED_AGENT_DIR
    verify_shipped(path)
    return path


def load_shipped_agent(folder: str | os.PathLike | None = None) -> tuple[Any, Any]:
    """`(model, tokenizer)` of the shipped agent, loaded only after its folder matches its manifest."""
    return load_policy(shipped_agent_path(folder))
