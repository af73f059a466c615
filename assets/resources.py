"""External systems as Dagster resources, configured from environment variables.

Every setting defaults to the embedded store under the home folder (`dataplane.home`); production
swaps a URI or a path by environment, never by code. Resources are read-only at run time.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg

from dataplane.home import Home
from dataplane.store import open_store
from evaluation.registry import mlflow_client


def _env_or_default(name: str, default: str | None) -> dg.EnvVar | str | None:
    # EnvVar keeps the value out of the UI and run storage; the default keeps a fresh clone working.
    return dg.EnvVar(name) if os.environ.get(name) else default


class HomeResource(dg.ConfigurableResource):
    """The home folder that holds landing files, DuckDB, MLflow, checkpoints and Dagster state."""

    root: str | None = None

    @property
    def home(self) -> Home:
        return Home.from_env(self.root).ensure()


class DuckDBStore(dg.ConfigurableResource):
    """The interaction store: one DuckDB file (one writer process at a time)."""

    path: str | None = None  # default: <home>/interactions.duckdb

    def resolved_path(self, home: Home) -> str:
        return self.path or str(home.duckdb_path)

    @contextmanager
    def connect(self, home: Home, read_only: bool = False) -> Iterator:
        con = open_store(self.resolved_path(home), read_only=read_only)
        try:
            yield con
        finally:
            con.close()


class MLflowTracking(dg.ConfigurableResource):
    """The MLflow tracking server / store and the registered model name."""

    tracking_uri: str | None = None  # default: sqlite:///<home>/mlflow.db
    model_name: str = "retail-agent"
    ui_url: str | None = None  # where people open the MLflow UI, for links in metadata

    def uri(self, home: Home) -> str:
        return self.tracking_uri or home.mlflow_uri

    def run_url(self, home: Home, run_id: str) -> str:
        """Where a person opens this MLflow run (`mlflow ui` on the embedded store by default)."""
        experiment = mlflow_client(self.uri(home)).get_run(run_id).info.experiment_id
        base = (self.ui_url or "http://127.0.0.1:5000").rstrip("/")
        return f"{base}/#/experiments/{experiment}/runs/{run_id}"


def default_resources() -> dict:
    return {
        "home": HomeResource(root=_env_or_default("RETRAIN_HOME", None)),
        "store": DuckDBStore(path=_env_or_default("RETRAIN_DUCKDB_PATH", None)),
        "mlflow": MLflowTracking(
            tracking_uri=_env_or_default("MLFLOW_TRACKING_URI", None),
            model_name=os.environ.get("RETRAIN_MODEL_NAME", "retail-agent"),
            ui_url=_env_or_default("RETRAIN_MLFLOW_UI_URL", None),
        ),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }
