"""`retrain config show`: the effective value of every setting, by concern, and where it came from.

A value's source is `default` (the declaration on the concern's settings dataclass), `env RETRAIN_X` (a variable of `orchestration.environment.VARIABLES` set in this
environment) or `file PATH` (the deployment's gate floors file). Run config given to a single run
(the launchpad, `retrain run --config`) is not shown: it belongs to that run, not the deployment.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from dataplane.ingest_settings import IngestSettings
from dataplane.splits import SplitSettings
from dataplane.window import WindowSettings
from evaluation.calibration_versions import RefreshSettings
from evaluation.gate_floors import PRODUCT_DEFAULTS, resolve_floors
from evaluation.gates import GateConfig
from evaluation.reports import EvalSettings
from monitoring.watch import WatchSettings
from orchestration import environment
from tracking.traces import TraceSettings
from training.curriculum import MixSettings
from training.episode_update import EpisodeUpdateSettings
from training.grpo_config import GRPORunConfig
from training.policy_start import PolicyStartSettings
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
    health_sources, canary_sources = (
        {
            v.sets.split(".", 1)[1]: f"env {v.name}"
            for v in environment.VARIABLES
            if v.sets.startswith(f"{kind}.") and environment.value(v.name, environ) is not None
        }
        for kind in ("HealthSettings", "CanarySettings")
    )
    rows = [
        *_dataclass_rows("ingest", IngestSettings()),
        *_dataclass_rows("window", WindowSettings()),
        *_dataclass_rows("split", SplitSettings()),
        *_dataclass_rows("policy", PolicyStartSettings()),
        *_dataclass_rows("evaluation", EvalSettings()),
        *_dataclass_rows("calibration", RefreshSettings()),
        *_dataclass_rows("grpo", GRPORunConfig(model_path="", output_dir="")),
        *_dataclass_rows("sft", SFTSettings()),
        *_dataclass_rows("episodes", EpisodeUpdateSettings()),
        *_dataclass_rows("curriculum", MixSettings()),
        *_dataclass_rows("gates", floors.config, gate_sources),
        *_dataclass_rows("health", environment.health_settings(environ), health_sources),
        *_dataclass_rows("canary", environment.canary_settings(environ), canary_sources),
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
