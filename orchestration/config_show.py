"""`retrain config show`: the effective value of every setting, by concern, and where it came from.

A value's source is `default` (the declaration on the concern's settings dataclass or Dagster
config), `env RETRAIN_X` (a variable of `orchestration.environment.VARIABLES` set in this
environment) or `file PATH` (the deployment's gate floors file). Run config given to a single run
(the launchpad, `retrain run --config`) is not shown: it belongs to that run, not the deployment.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from assets.data import SplitConfig, WindowConfig
from assets.evaluation import CalibrationConfig
from dataplane.ingest_settings import IngestSettings
from evaluation.gate_floors import PRODUCT_DEFAULTS, resolve_floors
from evaluation.gates import GateConfig
from monitoring.watch import WatchSettings
from orchestration import environment
from tracking.traces import TraceSettings
from training.grpo_config import GRPORunConfig
from training.sft import SFTSettings

DEFAULT = "default"


def _row(concern: str, name: str, value: Any, source: str, help_text: str) -> dict[str, Any]:
    return {"concern": concern, "setting": name, "value": value, "source": source, "help": help_text}


def _dataclass_rows(concern: str, settings: Any, sources: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """One row per field of the settings dataclass instance `settings`; `sources` names the fields
    set by something other than the declaration."""
    sources = sources or {}
    rows = []
    for f in dataclasses.fields(settings):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        source = "per run" if required else sources.get(f.name, DEFAULT)
        rows.append(_row(concern, f.name, None if required else getattr(settings, f.name), source, f.metadata["help"]))
    return rows


def _config_rows(concern: str, config_class: type) -> list[dict[str, Any]]:
    """One row per field of a Dagster config class, at its declared default."""
    rows = []
    for name, spec in config_class.model_fields.items():
        value = spec.get_default(call_default_factory=True)
        rows.append(_row(concern, name, value, DEFAULT, spec.description or ""))
    return rows


def effective_settings(environ: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Every setting of every concern, as this deployment's environment makes it."""
    home = environment.home(environ)
    floors = resolve_floors(home.dagster_home, environment.value(environment.FLOORS_ENV, environ))
    defaults = GateConfig()
    from_file = f"file {floors.source}"
    gate_sources = {
        f.name: from_file
        for f in dataclasses.fields(GateConfig)
        if floors.source != PRODUCT_DEFAULTS and getattr(floors.config, f.name) != getattr(defaults, f.name)
    }
    health_sources = {
        v.sets.split(".", 1)[1]: f"env {v.name}"
        for v in environment.VARIABLES
        if v.sets.startswith("HealthSettings.") and environment.value(v.name, environ) is not None
    }
    rows = [
        *_dataclass_rows("ingest", IngestSettings()),
        *_config_rows("window", WindowConfig),
        *_config_rows("split", SplitConfig),
        *_config_rows("evaluation", CalibrationConfig),
        *_dataclass_rows("grpo", GRPORunConfig(model_path="", output_dir="")),
        *_dataclass_rows("sft", SFTSettings()),
        *_dataclass_rows("gates", floors.config, gate_sources),
        *_dataclass_rows("health", environment.health_settings(environ), health_sources),
        *_dataclass_rows("watch", WatchSettings()),
        *_dataclass_rows("traces", TraceSettings()),
    ]
    for variable in environment.VARIABLES:
        raw = environment.value(variable.name, environ)
        shown = ("(set)" if variable.secret else raw) if raw is not None else variable.default
        rows.append(
            _row(
                "environment",
                variable.name,
                shown,
                f"env {variable.name}" if raw is not None else DEFAULT,
                f"{variable.sets}: {variable.help}",
            )
        )
    return rows


def _cmd_config_show(args: argparse.Namespace) -> int:
    rows = effective_settings()
    if args.json:
        print(json.dumps(rows, indent=2, default=str))
        return 0
    concern = None
    for row in rows:
        if row["concern"] != concern:
            concern = row["concern"]
            print(f"[{concern}]")
        print(f"  {row['setting']} = {row['value']!r}  ({row['source']})")
    return 0


def add_config_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("config", help="the deployment's settings")
    config_sub = p.add_subparsers(dest="config_command", required=True)
    show = config_sub.add_parser(
        "show", help="every setting's effective value, by concern, with its source (default, env RETRAIN_X, file)"
    )
    show.add_argument("--json", action="store_true", help="one JSON object per setting, with its help text")
    show.set_defaults(func=_cmd_config_show)
