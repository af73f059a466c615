"""Every `RETRAIN_*` environment variable, declared and read in this one module.

`VARIABLES` is the table: each variable, the setting it sets, its default and what it is for. The
functions below read them (`value` refuses a name the table does not declare) and hand the values
to the rooms below as arguments and settings dataclasses: the home (`home`), the Dagster
resources (`default_resources`), the champion-health thresholds (`health_settings`), the canary's
(`canary_settings`), the on/off
switches (`switched_on`). No room below reads a `RETRAIN_*` variable itself, except the few whose
row names another module in `read_in`, each for the reason its help gives (a separate process the
variable is the one way into, or a definition Dagster takes at import, below this room);
`tests/test_settings_declared_once.py` holds the code to that. `retrain config show` prints the
effective value of every setting with its source (`orchestration.config_show`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import dagster as dg

from assets.partitions import DEFAULT_START
from assets.resources import DAGSTER_UI_URL, MLFLOW_UI_URL, Curriculum, DuckDBStore, HomeResource, MLflowTracking
from dataplane.home import PII_KEY_ENV, Home
from evaluation.gate_floors import FLOORS_ENV
from monitoring.canary import CanarySettings
from monitoring.health import HealthSettings
from tracking.registry import DEFAULT_MODEL_NAME
from training.customers.config import API_KEY_SETTING, CUSTOMER_SETTING
from training.reporting import REPORTER_ENV

HERE = "orchestration.environment"


@dataclass(frozen=True)
class Variable:
    """One environment variable: `sets` names the setting it sets, `default` what holds when it is
    unset; `read_in` names the modules that read it (this one, and others only where the help says why)."""

    name: str
    sets: str
    default: str
    help: str
    read_in: tuple[str, ...] = (HERE,)
    secret: bool = False


HOME_ENV = "RETRAIN_HOME"
DUCKDB_ENV = "RETRAIN_DUCKDB_PATH"
MODEL_NAME_ENV = "RETRAIN_MODEL_NAME"
MLFLOW_UI_ENV = "RETRAIN_MLFLOW_UI_URL"
DAGSTER_UI_ENV = "RETRAIN_DAGSTER_UI_URL"
WEBHOOK_ENV = "RETRAIN_WEBHOOK_URL"
START_DATE_ENV = "RETRAIN_START_DATE"
DOMAINS_ENV = "RETRAIN_DOMAINS"
RUN_CONFIG_ENV = "RETRAIN_RUN_CONFIG"
SCHEDULE_SWITCH = "RETRAIN_SCHEDULE"
CHAMPION_HEALTH_SWITCH = "RETRAIN_CHAMPION_HEALTH"
LIVE_WATCH_SWITCH = "RETRAIN_LIVE_WATCH"
HEALTH_WINDOW_ENV = "RETRAIN_HEALTH_WINDOW"
HEALTH_MARGIN_ENV = "RETRAIN_HEALTH_MARGIN"
CANARY_SHARE_ENV = "RETRAIN_CANARY_SHARE"
CANARY_MIN_ENV = "RETRAIN_CANARY_MIN_CONVERSATIONS"
TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"  # MLflow's own variable, read where the others are

# What the Kubernetes code location (deploy/k8s_location.py) reads through `value`.
_POD = "the training pod (deploy/k8s_location.py)"

VARIABLES: tuple[Variable, ...] = (
    Variable(
        HOME_ENV,
        "Home.root",
        ".retrain/ in the repository root",
        "the folder every embedded store lives under; dataplane.scrub reads it too, beside RETRAIN_PII_KEY",
        read_in=(HERE, "dataplane.scrub"),
    ),
    Variable(DUCKDB_ENV, "DuckDBStore.path", "<home>/interactions.duckdb", "the interaction store's DuckDB file"),
    Variable(TRACKING_URI_ENV, "MLflowTracking.tracking_uri", "sqlite:///<home>/mlflow.db", "the MLflow store"),
    Variable(MODEL_NAME_ENV, "MLflowTracking.model_name", DEFAULT_MODEL_NAME, "the default domain's registered model"),
    Variable(MLFLOW_UI_ENV, "MLflowTracking.ui_url", MLFLOW_UI_URL, "where people open MLflow, for links"),
    Variable(DAGSTER_UI_ENV, "HomeResource.dagster_ui_url", DAGSTER_UI_URL, "where people open Dagster, for links"),
    Variable(WEBHOOK_ENV, "Home.webhook_url", "none", "where every incident is also POSTed", secret=True),
    Variable(
        START_DATE_ENV,
        "the first weekly and daily partition",
        DEFAULT_START,
        "a Monday; read in assets.partitions because Dagster takes an asset's partitions when its module "
        "is imported, below this room",
        read_in=("assets.partitions",),
    ),
    Variable(DOMAINS_ENV, "the domains the schedules run", "retail", "comma-separated installed domain names"),
    Variable(RUN_CONFIG_ENV, "weekly_retrain's default run config", "none", "a preset file (configs/*.yaml)"),
    Variable(FLOORS_ENV, "the gate floors file", "<DAGSTER_HOME>/gate_floors.yaml", "floors no run config loosens"),
    Variable(SCHEDULE_SWITCH, "the Monday schedule", "on", "off: the schedule starts stopped"),
    Variable(CHAMPION_HEALTH_SWITCH, "the champion_health sensor", "on", "off: the circuit breaker starts stopped"),
    Variable(LIVE_WATCH_SWITCH, "the landing sensor, the daily watch", "on", "off: both start stopped"),
    Variable(HEALTH_WINDOW_ENV, "HealthSettings.window", str(HealthSettings.window), "interactions each check judges"),
    Variable(HEALTH_MARGIN_ENV, "HealthSettings.margin", str(HealthSettings.margin), "the breaker's success margin"),
    Variable(CANARY_SHARE_ENV, "CanarySettings.share", str(CanarySettings.share), "traffic the canary serves"),
    Variable(
        CANARY_MIN_ENV,
        "CanarySettings.min_conversations",
        str(CanarySettings.min_conversations),
        "canary conversations with gold before it is promoted or dropped",
    ),
    Variable(
        PII_KEY_ENV,
        "the key of e-mail pseudonyms",
        "<home>/pii.key",
        "read in dataplane.scrub (process_pii_setting, with RETRAIN_HOME): the scrubber is process-wide, "
        "deep in the store, and every process that stores a record must use the deployment's one key",
        read_in=("dataplane.scrub",),
        secret=True,
    ),
    Variable(
        CUSTOMER_SETTING,
        "the simulated customer",
        "rules",
        "rules, openai:<model>@<url> or transformers:<path>; read in training.customers.config "
        "(configured_backend) because the out-of-process trainer inherits it",
        read_in=("training.customers.config",),
    ),
    Variable(
        API_KEY_SETTING,
        "the LLM customer's bearer key",
        "none",
        "read beside RETRAIN_CUSTOMER in training.customers.config: a secret stays out of the trainer's config file, which is logged",
        read_in=("training.customers.config",),
        secret=True,
    ),
    Variable(
        REPORTER_ENV,
        "the trainer's reporter class",
        "JSON lines on stdout",
        "module:Class; set by the training asset for its subprocess, the one way a launcher's bridge "
        "reaches `python -m training.grpo`; read in training.reporting (make_reporter)",
        read_in=("training.reporting",),
    ),
    Variable("RETRAIN_TRAINING_IMAGE", "the training pod's image", "required", _POD),
    Variable("RETRAIN_TRAINING_NAMESPACE", "the training pod's namespace", "the run's", _POD),
    Variable("RETRAIN_TRAINING_POD_SPEC_JSON", "the training pod's PodSpec fields", "{}", _POD),
    Variable("RETRAIN_TRAINING_LAUNCHER", "the command in place of `python`", "python", _POD),
)
BY_NAME: dict[str, Variable] = {v.name: v for v in VARIABLES}
_ON, _OFF = ("on", "1", "true", "yes"), ("off", "0", "false", "no")


def value(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The variable `name` as `environ` (default: this process's) sets it; None when unset or empty.
    A name the table does not declare is a KeyError: every variable read is listed."""
    if name not in BY_NAME:
        raise KeyError(f"{name} is not declared in orchestration.environment.VARIABLES")
    raw = (os.environ if environ is None else environ).get(name)
    return raw if raw and raw.strip() else None


def home(environ: Mapping[str, str] | None = None) -> Home:
    """The home the environment names, with the incident webhook it sets."""
    return Home.at(value(HOME_ENV, environ), webhook_url=value(WEBHOOK_ENV, environ))


def _hidden(name: str, environ: Mapping[str, str] | None) -> dg.EnvVar | None:
    # EnvVar keeps the value out of the UI and run storage (Dagster reads it inside the run); unset,
    # the resource's own default holds, so a fresh clone works.
    return dg.EnvVar(name) if value(name, environ) else None


def mlflow_tracking(environ: Mapping[str, str] | None = None) -> MLflowTracking:
    """The MLflow settings as the environment sets them (Dagster and the CLI alike)."""
    return MLflowTracking(
        tracking_uri=_hidden(TRACKING_URI_ENV, environ),
        model_name=value(MODEL_NAME_ENV, environ) or DEFAULT_MODEL_NAME,
        ui_url=_hidden(MLFLOW_UI_ENV, environ),
    )


def default_resources(environ: Mapping[str, str] | None = None) -> dict:
    """The Dagster resources of the code location, configured by the environment."""
    return {
        "home": HomeResource(
            root=_hidden(HOME_ENV, environ),
            webhook_url=_hidden(WEBHOOK_ENV, environ),
            gate_floors=value(FLOORS_ENV, environ),
            dagster_ui_url=value(DAGSTER_UI_ENV, environ) or DAGSTER_UI_URL,
        ),
        "store": DuckDBStore(path=_hidden(DUCKDB_ENV, environ)),
        "mlflow": mlflow_tracking(environ),
        "curriculum": Curriculum(),
        "pipes_subprocess_client": dg.PipesSubprocessClient(),
    }


def _overrides(table: tuple[tuple[str, str, type], ...], environ: Mapping[str, str] | None) -> dict:
    """{field: value} for each (variable, field, type) of `table` the environment sets."""
    overrides: dict = {}
    for name, field_name, kind in table:
        raw = value(name, environ)
        if raw is not None:
            try:
                overrides[field_name] = kind(raw)
            except ValueError as err:
                raise ValueError(f"{name}={raw!r} is not {'an integer' if kind is int else 'a number'}") from err
    return overrides


def health_settings(environ: Mapping[str, str] | None = None) -> HealthSettings:
    """The champion-health thresholds: the product's, with the window and margin the environment sets."""
    table = ((HEALTH_WINDOW_ENV, "window", int), (HEALTH_MARGIN_ENV, "margin", float))
    return HealthSettings(**_overrides(table, environ))


def canary_settings(environ: Mapping[str, str] | None = None) -> CanarySettings:
    """The canary's share and minimum evidence: the product's, with what the environment sets."""
    table = ((CANARY_SHARE_ENV, "share", float), (CANARY_MIN_ENV, "min_conversations", int))
    return CanarySettings(**_overrides(table, environ))


def switched_on(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Whether the switch `name` is on (unset means on); any other value than on/off is an error.

    All default to on: a deployment retrains every week, watches and guards its champion unless an
    operator says otherwise (any of them can still be started by hand in the UI)."""
    raw = value(name, environ) or "on"
    if raw.strip().lower() in _ON:
        return True
    if raw.strip().lower() in _OFF:
        return False
    raise ValueError(f"{name}={raw!r}: use one of {_ON + _OFF}")
