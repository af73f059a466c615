"""The home folder: every embedded store lives under one root, so one variable (RETRAIN_HOME) moves them all.

Default `.retrain/` in the repository root; `RETRAIN_HOME` moves it. Paths handed in by
configuration are resolved inside the home and may not escape it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent


class HomePathError(ValueError):
    """A configured path points outside the home folder."""


@dataclass(frozen=True)
class Home:
    root: Path

    @classmethod
    def from_env(cls, override: str | os.PathLike | None = None) -> Home:
        raw = override or os.environ.get("RETRAIN_HOME") or (REPO_ROOT / ".retrain")
        return cls(Path(raw).expanduser().resolve())

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
    def watch(self) -> Path:
        """The live watch's state: whether promotions are paused, and who lifted past pauses."""
        return self.root / "watch"

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
