"""Deploy-time floors under the promotion gates: a run config may tighten a gate, never loosen it.

The gate thresholds are run config of `promotion_gate`, and anyone who can launch a run (the Dagster
UI's launchpad, `retrain run --config`) writes run config. So the thresholds a run may use are
bounded by floors that only the deployment sets:

- the file the deployment names (`RETRAIN_GATE_FLOORS` in the code location's environment, read by
  `orchestration.environment` and handed in), else
- `gate_floors.yaml` in the Dagster instance's folder (`$DAGSTER_HOME`, beside `dagster.yaml`), else
- the product's defaults (`GateConfig()`).

A floors file is YAML or JSON: one mapping of `GateConfig` setting to value (any setting left out
keeps the product's default as its floor). A deployment may put a floor above or below the
product's default; that is the deployment's decision, made where runs cannot reach.

A run's threshold starts at the floor; each setting its run config names must be at least as strict
as the floor, in the direction the setting declares (`tightens` on its `GateConfig` field: a margin
or minimum may only go up, a maximum or tolerance only down, a seed not at all). Anything else is a
`LoosenedGateError` naming the setting, the requested value, the floor and where the floor came
from; the run fails before the gates are evaluated.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from evaluation.gates import GateConfig

FLOORS_ENV = "RETRAIN_GATE_FLOORS"
INSTANCE_FLOORS_FILE = "gate_floors.yaml"
PRODUCT_DEFAULTS = "the product's defaults"


class GateFloorsFileError(ValueError):
    """A floors file that is missing, unreadable, or names an unknown setting or a bad value."""


class LoosenedGateError(ValueError):
    """A run config that loosens a gate below the deployment's floor; names every such setting."""


@dataclass(frozen=True)
class GateFloors:
    """The floor of every gate setting, and where they came from (a file, or the product's defaults)."""

    config: GateConfig
    source: str


def tightens(name: str) -> Any:
    """How setting `name` gets stricter (see `evaluation.gates.Tightens`); an error for a setting that does
    not declare it, so a new threshold cannot slip past the floors unclassified."""
    fields = {f.name: f for f in dataclasses.fields(GateConfig)}
    if name not in fields:
        raise KeyError(f"{name!r} is not a gate setting; the settings are {sorted(fields)}")
    direction = fields[name].metadata.get("tightens")
    if direction is None:
        raise TypeError(f"GateConfig.{name} declares no `tightens` direction: say how it gets stricter")
    return direction


def _typed(name: str, value: Any, where: str, error: type[ValueError] = GateFloorsFileError) -> Any:
    """`value` checked against the setting's declared type (an int is a fine float; a bool is no number)."""
    hint = typing.get_type_hints(GateConfig)[name]
    allowed = typing.get_args(hint) or (hint,)
    if value is None and type(None) in allowed:
        return None
    if isinstance(value, bool):
        raise error(f"{where}: {name} must be a {hint}, got {value!r}")
    if float in allowed and isinstance(value, (int, float)):
        return float(value)
    if int in allowed and isinstance(value, int):
        return value
    if str in allowed and isinstance(value, str):
        return value
    raise error(f"{where}: {name} must be a {hint}, got {value!r}")


def load_floors(path: str | os.PathLike) -> GateFloors:
    """The floors a file sets (YAML or JSON); every setting it does not name keeps the product's default."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text())  # YAML is a superset of JSON: one reader for both
    except OSError as err:
        raise GateFloorsFileError(f"gate floors file {path} cannot be read: {err}") from err
    except yaml.YAMLError as err:
        raise GateFloorsFileError(f"gate floors file {path} is neither YAML nor JSON: {err}") from err
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise GateFloorsFileError(f"gate floors file {path} must hold one mapping of setting: value")
    known = {f.name for f in dataclasses.fields(GateConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GateFloorsFileError(f"gate floors file {path} names unknown settings {unknown}; known: {sorted(known)}")
    values = {name: _typed(name, value, f"gate floors file {path}") for name, value in data.items()}
    try:
        config = GateConfig(**values)
    except ValueError as err:  # GateConfig's own rules (e.g. on_insufficient_labels)
        raise GateFloorsFileError(f"gate floors file {path}: {err}") from err
    return GateFloors(config, str(path))


def resolve_floors(instance_dir: str | os.PathLike | None, named: str | None = None) -> GateFloors:
    """The deployment's floors: the file `named` (RETRAIN_GATE_FLOORS), else the instance's gate_floors.yaml,
    else the product's.

    A name that is not a file is an error, never a silent fall back to the defaults.
    """
    named = (named or "").strip()
    if named:
        if not Path(named).is_file():
            raise GateFloorsFileError(f"{FLOORS_ENV}={named}: no such file")
        return load_floors(named)
    if instance_dir is not None:
        beside = Path(instance_dir) / INSTANCE_FLOORS_FILE
        if beside.is_file():
            return load_floors(beside)
    return GateFloors(GateConfig(), PRODUCT_DEFAULTS)


def _looser(direction: Any, requested: Any, floor: Any) -> bool:
    if direction == "up":
        return requested < floor
    if direction == "down":
        # None is "no bound": looser than any bound, and as strict as a floor that has none.
        return floor is not None and (requested is None or requested > floor)
    if direction == "never":
        return requested != floor
    return direction.index(requested) < direction.index(floor)  # values from loosest to strictest


def _rule(name: str, direction: Any) -> str:
    if direction == "up":
        return f"a run may raise {name}, never lower it"
    if direction == "down":
        return f"a run may lower {name}, never raise it"
    if direction == "never":
        return f"a run may not change {name}"
    return f"a run may only move {name} towards the stricter end of {list(direction)}"


def apply_floors(requested: Mapping[str, Any], floors: GateFloors) -> GateConfig:
    """The gate config of a run: the floors, with the settings the run config names (`requested`)
    where each is at least as strict as its floor. Raises LoosenedGateError naming every setting
    that would loosen a gate (the requested value, the floor, where the floor came from)."""
    where = "run config of promotion_gate"
    unknown = sorted(set(requested) - {f.name for f in dataclasses.fields(GateConfig)})
    if unknown:
        raise LoosenedGateError(f"{where} names unknown gate settings {unknown}")
    values = {name: _typed(name, value, where, LoosenedGateError) for name, value in requested.items()}
    loosened = []
    for name, value in values.items():
        floor = getattr(floors.config, name)
        direction = tightens(name)
        if _looser(direction, value, floor):
            loosened.append(f"{name}={value!r} is looser than its floor {floor!r} ({_rule(name, direction)})")
    if loosened:
        raise LoosenedGateError(
            f"{where} loosens the deployment's gate floors (from {floors.source}): "
            + "; ".join(loosened)
            + f". Floors are set by the deployment ({FLOORS_ENV} or {INSTANCE_FLOORS_FILE} in the Dagster instance "
            "folder), never by a run"
        )
    return dataclasses.replace(floors.config, **values)


def run_config_gates(run_config: Mapping[str, Any] | None) -> dict[str, Any]:
    """The gate settings a Dagster run config gives `promotion_gate` ({} when it gives none)."""
    ops = (run_config or {}).get("ops") or {}
    body = ops.get("promotion_gate") or {}
    return dict(body.get("config") or {})


def check_run_config(run_config: Mapping[str, Any] | None, floors: GateFloors) -> GateConfig:
    """Refuse a run config that loosens a gate before anything runs (LoosenedGateError); the gate config it gives."""
    return apply_floors(run_config_gates(run_config), floors)


def floors_summary(floors: GateFloors) -> dict[str, Any]:
    """The floors as the gate's metadata shows them: where from, and every value."""
    return {"source": floors.source, "floors": dataclasses.asdict(floors.config)}


def write_floors(path: str | os.PathLike, settings: Mapping[str, Any]) -> GateFloors:
    """Write a floors file of `settings` (a deployment's decision, e.g. a demo deployment that must
    show a registration) and read it back through `load_floors`, so a bad setting fails here."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(dict(settings), sort_keys=True))
    return load_floors(path)
