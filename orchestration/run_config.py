"""Run config files: `retrain run --config FILE`, and the config the weekly schedule's runs take.

A deployment names a preset (configs/*.yaml) in RETRAIN_RUN_CONFIG; `weekly_retrain` takes it as
its default run config, so the schedule's runs (and the launchpad) use it, while a run that
supplies its own config (`retrain run --config`, tests) still decides for itself.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from evaluation.gate_floors import FLOORS_ENV, check_run_config, resolve_floors
from orchestration.environment import RUN_CONFIG_ENV, value


class RunConfigFileError(ValueError):
    """A run config file that is missing, unreadable or not one mapping (the message names it)."""


def load_run_config(path: str | None) -> dict[str, Any]:
    """The run config in a YAML (.yaml/.yml) or JSON file; {} for no path."""
    if not path:
        return {}
    text = Path(path).read_text()
    config = yaml.safe_load(text) if path.endswith((".yaml", ".yml")) else json.loads(text)
    if config is None:
        return {}
    if not isinstance(config, dict):
        raise RunConfigFileError(f"run config {path} must hold one mapping (ops: ...), not {type(config).__name__}")
    return config


def scheduled_run_config(environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """The run config named by RETRAIN_RUN_CONFIG, or None (the job's own defaults).

    A preset is run config like any other: one that loosens a gate below the deployment's floors
    (evaluation.gate_floors) is refused here, so the code location fails to load naming the
    setting instead of every scheduled week failing at its gate."""
    path = value(RUN_CONFIG_ENV, environ)
    if not path:
        return None
    try:
        config = load_run_config(path) or None
        check_run_config(
            config,
            resolve_floors(
                (os.environ if environ is None else environ).get("DAGSTER_HOME"), value(FLOORS_ENV, environ)
            ),
        )
        return config
    except (OSError, ValueError, yaml.YAMLError) as err:  # LoosenedGateError and GateFloorsFileError too
        raise RunConfigFileError(f"{RUN_CONFIG_ENV}={path}: {err}") from err
