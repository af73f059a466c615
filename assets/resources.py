"""External systems as Dagster resources.

Every setting defaults to the embedded store under the home folder (`dataplane.home`); production
swaps a URI or a path by environment, never by code: `orchestration.environment.default_resources`
reads the variables and configures these. Resources are read-only at run time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import dagster as dg
from pydantic import field_validator

from assets.configs import setting_field
from dataplane.home import Home
from dataplane.store import open_store
from domains.registry import DEFAULT_DOMAIN, agent_name
from tracking.registry import DEFAULT_EXPERIMENT, DEFAULT_MODEL_NAME, mlflow_client
from training.curriculum import (
    CurriculumError,
    MixSettings,
    check_tool_list,
    compact_at,
    levels_for_domain,
    parse_mix,
    tools_for_levels,
)
from training.grpo_config import GRPORunConfig

MLFLOW_UI_URL = "http://127.0.0.1:5000"  # `mlflow ui` on the embedded store
DAGSTER_UI_URL = "http://127.0.0.1:3000"  # `dagster dev`


def _resolved(value: dg.EnvVar | str | None) -> str | None:
    # Inside a run Dagster hands the resource the variable's value; code outside a run (the CLI)
    # holds the EnvVar itself, whose string is the variable's name, so read the value here.
    return value.get_value() if isinstance(value, dg.EnvVar) else value


class HomeResource(dg.ConfigurableResource):
    """The home folder that holds landing files, DuckDB, MLflow, checkpoints and Dagster state, and
    the deployment's settings about it: where incidents are posted, the gate floors, the UI's address."""

    root: str | None = None  # default: .retrain/ in the repository root
    webhook_url: str | None = None  # incidents are also POSTed here
    gate_floors: str | None = None  # a floors file in place of the instance's gate_floors.yaml
    dagster_ui_url: str = DAGSTER_UI_URL  # for links to a run in metadata

    @property
    def home(self) -> Home:
        return Home.at(_resolved(self.root), webhook_url=_resolved(self.webhook_url)).ensure()

    def dagster_run_url(self, run_id: str) -> str:
        """Where a Dagster run opens."""
        return f"{self.dagster_ui_url.rstrip('/')}/runs/{run_id}"


class DuckDBStore(dg.ConfigurableResource):
    """The interaction store: one DuckDB file (one writer process at a time)."""

    path: str | None = None  # default: <home>/interactions.duckdb
    # How long a step waits for another process's lock (the landing sensor's ingest, a live-watch
    # run) before it fails: runs of different jobs share the file and each holds it briefly.
    lock_wait_seconds: float = 300.0

    def resolved_path(self, home: Home) -> str:
        return self.path or str(home.duckdb_path)

    @contextmanager
    def connect(self, home: Home, read_only: bool = False) -> Iterator:
        con = open_store(self.resolved_path(home), read_only=read_only, wait_seconds=self.lock_wait_seconds)
        try:
            yield con
        finally:
            con.close()


class MLflowTracking(dg.ConfigurableResource):
    """The MLflow tracking server / store and the registered model name."""

    tracking_uri: str | None = None  # default: sqlite:///<home>/mlflow.db
    model_name: str = DEFAULT_MODEL_NAME
    ui_url: str | None = None  # where people open the MLflow UI, for links in metadata

    def model_for(self, domain: str) -> str:
        """The registered model of `domain`: the configured name for the default domain, else
        `<domain>-agent` (each domain has its own champion)."""
        return self.model_name if domain == DEFAULT_DOMAIN else agent_name(domain)

    def experiment_for(self, domain: str) -> str:
        """The MLflow experiment of `domain`'s weekly runs."""
        return DEFAULT_EXPERIMENT if domain == DEFAULT_DOMAIN else f"{agent_name(domain)}-weekly"

    def uri(self, home: Home) -> str:
        return _resolved(self.tracking_uri) or home.mlflow_uri

    def run_url(self, home: Home, run_id: str) -> str:
        """Where a person opens this MLflow run (`mlflow ui` on the embedded store by default)."""
        experiment = mlflow_client(self.uri(home)).get_run(run_id).info.experiment_id
        return f"{self._ui_base()}/#/experiments/{experiment}/runs/{run_id}"

    def traces_url(self, experiment_id: str) -> str:
        """Where a person opens an experiment's traces (the review queue's conversations)."""
        return f"{self._ui_base()}/#/experiments/{experiment_id}/traces"

    def _ui_base(self) -> str:
        return (_resolved(self.ui_url) or MLFLOW_UI_URL).rstrip("/")


class Curriculum(dg.ConfigurableResource):
    """The run's curriculum, set once per run: GRPO trains on `levels`; the SFT warm start, the
    tool-call probe and both evaluations use the form of the hardest level in it (level 1: the
    rewritten short tasks; any other: the conversations as recorded; short tool results below
    level 4) and the tools `tool_list` offers at it (`training.curriculum.tools_for_levels`)."""

    levels: dict[str, float] = setting_field(GRPORunConfig, "levels")
    tool_list: str = setting_field(GRPORunConfig, "tool_list")
    # The week's shares of these levels, and of the intents, follow the champion's failures
    # (training.curriculum.week_mix); the knobs are declared on MixSettings.
    by_failures: bool = setting_field(MixSettings, "by_failures")
    floor: float = setting_field(MixSettings, "floor")
    incident_boost: float = setting_field(MixSettings, "incident_boost")

    @field_validator("levels")
    @classmethod
    def _known_levels(cls, levels: dict[str, float]) -> dict[str, float]:
        try:
            parse_mix(levels)
        except CurriculumError as err:
            raise ValueError(f"curriculum.levels {levels!r} is refused ({err.rule}): {err.detail}") from err
        return levels

    @field_validator("tool_list")
    @classmethod
    def _known_tool_list(cls, tool_list: str) -> str:
        try:
            return check_tool_list(tool_list)
        except CurriculumError as err:
            raise ValueError(f"curriculum.tool_list is refused ({err.rule}): {err.detail}") from err

    @property
    def level(self) -> int:
        """The hardest level of the mix: the task form a policy trained on it is warm-started and judged on."""
        return max(parse_mix(self.levels))

    def levels_for(self, domain: str = DEFAULT_DOMAIN) -> dict[str, float]:
        """The mix as `domain` can follow it (`training.curriculum.levels_for_domain`)."""
        return levels_for_domain(self.levels, domain)

    @property
    def mix_settings(self) -> MixSettings:
        return MixSettings(by_failures=self.by_failures, floor=self.floor, incident_boost=self.incident_boost)

    def level_for(self, domain: str = DEFAULT_DOMAIN) -> int:
        """The hardest level of the domain's mix: the task form its policy is warm-started and judged on."""
        return max(parse_mix(self.levels_for(domain)))

    def tools_for(self, domain: str = DEFAULT_DOMAIN) -> tuple[str, ...] | None:
        """The tools offered at this curriculum in `domain` (None: all), the same for SFT, GRPO
        and evaluation."""
        return tools_for_levels(self.levels_for(domain), domain, self.tool_list)

    def compact_for(self, domain: str = DEFAULT_DOMAIN) -> bool:
        """Whether tool results are short at this curriculum in `domain`, as its GRPO rows show them."""
        return compact_at(self.level_for(domain))
