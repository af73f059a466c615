"""The home folder: every embedded store lives under one root, so one setting moves them all.

Default `.retrain/` in the repository root; the deployment moves it (`RETRAIN_HOME`, read by
`orchestration.environment`, which hands the root in). Paths handed in by configuration are
resolved inside the home and may not escape it.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
# The key e-mail pseudonyms are made with (`dataplane.scrub`): this variable, else a file in the
# home created on first use. One key per deployment keeps a customer's pseudonym stable across
# weeks; whoever holds it can test a guessed address, so it is kept like a password.
PII_KEY_ENV = "RETRAIN_PII_KEY"
PII_KEY_FILE = "pii.key"
_MIN_KEY_CHARS = 16


class HomePathError(ValueError):
    """A configured path points outside the home folder."""


class PiiKeyError(ValueError):
    """The pseudonymisation key is too short, or its file is readable by others."""


DEFAULT_ROOT = REPO_ROOT / ".retrain"


@dataclass(frozen=True)
class Home:
    """The root folder, and where incidents filed under it are also posted (`webhook_url`)."""

    root: Path
    webhook_url: str | None = None

    @classmethod
    def at(cls, root: str | os.PathLike | None = None, webhook_url: str | None = None) -> Home:
        """The home at `root` (None or empty: `.retrain/` in the repository root)."""
        return cls(Path(root or DEFAULT_ROOT).expanduser().resolve(), webhook_url or None)

    def inside(self, relative: str | os.PathLike) -> Path:
        """Resolve `relative` under the home; refuse anything that would leave it."""
        candidate = (self.root / relative).resolve()
        if candidate != self.root and self.root not in candidate.parents:
            raise HomePathError(f"path {str(relative)!r} escapes the home folder {self.root}")
        return candidate

    def week_dir(self, week: str) -> Path:
        """`<home>/runs/<week>`: everything one week's run writes (checkpoints, reports, the
        promotion request); the one place that knows the layout. A week that would leave the home
        (`..`, an absolute path) is refused like any configured path."""
        return self.inside(f"runs/{week}")

    @property
    def landing(self) -> Path:
        return self.root / "landing"

    @property
    def duckdb_path(self) -> Path:
        return self.root / "interactions.duckdb"

    @property
    def mlflow_uri(self) -> str:
        return f"sqlite:///{self.root / 'mlflow.db'}"

    @property
    def mlflow_artifacts(self) -> Path:
        return self.root / "mlartifacts"

    @property
    def models(self) -> Path:
        return self.root / "models"

    @property
    def gx_root(self) -> Path:
        return self.root / "gx"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster"

    @property
    def incidents(self) -> Path:
        return self.root / "incidents"

    @property
    def pii_key_path(self) -> Path:
        return self.root / PII_KEY_FILE

    def pii_key(self, configured: str | None = None) -> bytes:
        """The key of e-mail pseudonyms: the deployment's `configured` one (`RETRAIN_PII_KEY`), else `<home>/pii.key`.

        The file is created on first use with 256 random bits (`write_pii_key`). A key file that
        group or others may read is refused.
        """
        if configured is not None:
            if len(configured) < _MIN_KEY_CHARS:
                raise PiiKeyError(f"{PII_KEY_ENV} must hold at least {_MIN_KEY_CHARS} characters")
            return configured.encode("utf-8")
        path = self.pii_key_path
        if not path.exists():
            self.write_pii_key(secrets.token_hex(32))
        mode = path.stat().st_mode
        if stat.S_IMODE(mode) & 0o077:
            raise PiiKeyError(f"{path} is readable by group or others (mode {stat.S_IMODE(mode):o}); chmod 600 it")
        key = path.read_text(encoding="utf-8").strip()
        if len(key) < _MIN_KEY_CHARS:
            raise PiiKeyError(f"{path} must hold at least {_MIN_KEY_CHARS} characters")
        return key.encode("utf-8")

    def write_pii_key(self, key: str) -> bool:
        """Create `<home>/pii.key` holding `key` (mode 0600) unless a key file exists; whether this
        call wrote it. Written through a link from a private temporary file, so two processes
        starting at once agree on one key and neither reads a half-written file."""
        if len(key) < _MIN_KEY_CHARS:
            raise PiiKeyError(f"a key of {self.pii_key_path} must hold at least {_MIN_KEY_CHARS} characters")
        path = self.pii_key_path
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{PII_KEY_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(key + "\n")
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False  # another process created it first: its key is the one
        finally:
            tmp.unlink()
        return True

    def ensure(self) -> Home:
        for path in (
            self.root,
            self.landing,
            self.models,
            self.gx_root,
            self.dagster_home,
            self.incidents,
            self.mlflow_artifacts,
        ):
            path.mkdir(parents=True, exist_ok=True)
        return self
