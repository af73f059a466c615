"""Deploy-time gate floors: where they come from, and that a run config may tighten a gate, never loosen it.

The asset path (the promotion gate refusing a loosening run config, and honouring a deployment's
floors file) is in tests/test_promotion_path.py.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import pytest

from evaluation.gate_floors import (
    FLOORS_ENV,
    INSTANCE_FLOORS_FILE,
    PRODUCT_DEFAULTS,
    GateFloors,
    GateFloorsFileError,
    LoosenedGateError,
    apply_floors,
    check_run_config,
    load_floors,
    resolve_floors,
    tightens,
)
from evaluation.gates import GateConfig
from orchestration.run_config import RUN_CONFIG_ENV, RunConfigFileError, scheduled_run_config

DEFAULTS = GateFloors(GateConfig(), PRODUCT_DEFAULTS)


@pytest.fixture(autouse=True)
def _no_floors_variable(monkeypatch):
    monkeypatch.delenv(FLOORS_ENV, raising=False)


def test_every_gate_setting_says_how_it_gets_stricter():
    directions = {f.name: tightens(f.name) for f in dataclasses.fields(GateConfig)}
    assert directions["shadow_margin"] == directions["calibration_min_margin"] == "up"
    assert directions["max_tool_drift"] == directions["violation_tolerance"] == "down"
    assert directions["bootstrap_seed"] == "never"
    for name, direction in directions.items():
        assert direction in ("up", "down", "never") or isinstance(direction, tuple), name
    with pytest.raises(KeyError, match="not a gate setting"):
        tightens("shadow_margni")


@pytest.mark.parametrize(
    "requested",
    [
        {"shadow_margin": 0.0},  # a margin goes up
        {"calibration_min_margin": 0.05, "min_human_labels": 250, "min_reward_alignment": 0.7},
        {"max_tool_drift": 0.01, "violation_tolerance": 0.0, "hacking_excess_max": 0.0},  # maxima go down
        {"calibration_max_p": 0.05},  # a bound where the floor has none
        {"on_insufficient_labels": "fail"},  # from hold to the stricter fail
        {"bootstrap_seed": 0, "shadow_margin": -0.02},  # the floor itself
    ],
)
def test_a_run_config_may_tighten_any_gate(requested):
    config = apply_floors(requested, DEFAULTS)
    assert config == dataclasses.replace(GateConfig(), **requested)


@pytest.mark.parametrize(
    ("requested", "named"),
    [
        ({"shadow_margin": -1.0}, "shadow_margin=-1.0 is looser than its floor -0.02 (a run may raise shadow_margin"),
        ({"calibration_min_margin": -0.5}, "calibration_min_margin=-0.5 is looser than its floor 0.0"),
        ({"max_tool_drift": 1.0}, "max_tool_drift=1.0 is looser than its floor 0.05 (a run may lower max_tool_drift"),
        ({"min_human_labels": 2}, "min_human_labels=2 is looser than its floor 20"),
        ({"bootstrap_seed": 7}, "bootstrap_seed=7 is looser than its floor 0 (a run may not change bootstrap_seed)"),
    ],
)
def test_a_run_config_that_loosens_a_gate_is_refused_naming_setting_value_and_floor(requested, named):
    with pytest.raises(LoosenedGateError) as refused:
        apply_floors(requested, DEFAULTS)
    assert named in str(refused.value)
    assert PRODUCT_DEFAULTS in str(refused.value) and FLOORS_ENV in str(refused.value)


def test_every_loosened_setting_is_named_at_once_and_a_none_bound_is_looser_than_any():
    floors = GateFloors(GateConfig(calibration_max_p=0.05, on_insufficient_labels="fail"), "floors.yaml")
    with pytest.raises(LoosenedGateError) as refused:
        apply_floors(
            {"calibration_max_p": None, "on_insufficient_labels": "hold", "max_tool_drift": 0.2, "shadow_margin": 0.1},
            floors,
        )
    message = str(refused.value)
    assert "calibration_max_p=None is looser than its floor 0.05" in message
    assert "on_insufficient_labels='hold' is looser than its floor 'fail'" in message
    assert "max_tool_drift=0.2" in message and "shadow_margin" not in message  # that one tightens
    assert "(from floors.yaml)" in message
    assert apply_floors({"calibration_max_p": 0.01}, floors).calibration_max_p == 0.01


def test_unset_settings_take_the_floor_not_the_product_default(tmp_path):
    floors = load_floors(_write(tmp_path / "f.yaml", "max_tool_drift: 0.01\nshadow_margin: 0.0\n"))
    config = apply_floors({}, floors)
    assert (config.max_tool_drift, config.shadow_margin, config.min_human_labels) == (0.01, 0.0, 200)
    # The product's default is now looser than this deployment's floor: asking for it is refused.
    with pytest.raises(LoosenedGateError, match=r"max_tool_drift=0\.05 is looser than its floor 0\.01"):
        apply_floors({"max_tool_drift": 0.05}, floors)


def _write(path, text):
    path.write_text(text)
    return path


def test_floors_come_from_the_variable_else_the_instance_else_the_product(tmp_path, monkeypatch):
    instance_dir = tmp_path / "dagster"
    instance_dir.mkdir()
    assert resolve_floors(instance_dir) == DEFAULTS
    beside = _write(instance_dir / INSTANCE_FLOORS_FILE, "calibration_min_margin: -0.5\n")
    assert resolve_floors(instance_dir) == GateFloors(GateConfig(calibration_min_margin=-0.5), str(beside))
    named = _write(tmp_path / "floors.json", json.dumps({"max_tool_drift": 0.2}))  # JSON reads too
    assert resolve_floors(instance_dir, str(named)) == GateFloors(GateConfig(max_tool_drift=0.2), str(named))
    with pytest.raises(GateFloorsFileError, match=f"{FLOORS_ENV}=.*missing.yaml: no such file"):
        resolve_floors(instance_dir, str(tmp_path / "missing.yaml"))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("shadow_margni: 0.1\n", r"unknown settings \['shadow_margni'\]"),
        ("max_tool_drift: lots\n", "max_tool_drift must be a <class 'float'>, got 'lots'"),
        ("min_human_labels: true\n", "min_human_labels must be"),
        ("on_insufficient_labels: pass\n", "on_insufficient_labels must be 'hold' or 'fail'"),
        ("- max_tool_drift\n", "must hold one mapping"),
        ("max_tool_drift: [\n", "neither YAML nor JSON"),
    ],
)
def test_a_bad_floors_file_is_refused_naming_the_file_and_the_setting(tmp_path, text, message):
    path = _write(tmp_path / "floors.yaml", text)
    with pytest.raises(GateFloorsFileError, match=message) as refused:
        load_floors(path)
    assert str(path) in str(refused.value)


def test_a_loosening_preset_is_refused_when_the_code_location_loads(tmp_path):
    preset = _write(tmp_path / "preset.yaml", "ops:\n  promotion_gate:\n    config: {max_tool_drift: 0.5}\n")
    with pytest.raises(RunConfigFileError, match=rf"{RUN_CONFIG_ENV}=.*max_tool_drift=0\.5 is looser"):
        scheduled_run_config({RUN_CONFIG_ENV: str(preset)})
    floors = _write(tmp_path / "floors.yaml", "max_tool_drift: 0.5\n")
    assert scheduled_run_config({RUN_CONFIG_ENV: str(preset), FLOORS_ENV: str(floors)}) == {
        "ops": {"promotion_gate": {"config": {"max_tool_drift": 0.5}}}
    }
    assert check_run_config({"ops": {"policy_base": {"config": {}}}}, DEFAULTS) == GateConfig()


def test_retrain_run_refuses_a_loosening_config_before_anything_runs(home, tmp_path):
    config = _write(tmp_path / "run.yaml", "ops:\n  promotion_gate:\n    config: {shadow_margin: -1.0}\n")
    env = {k: v for k, v in os.environ.items() if k not in (FLOORS_ENV, "DAGSTER_HOME")}
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "run", "--week", "2026-11-16", "--config", str(config)],
        capture_output=True,
        text=True,
        env={**env, "RETRAIN_HOME": str(home.root)},
        timeout=300,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "shadow_margin=-1.0 is looser than its floor -0.02" in done.stderr
    assert not (home.root / "retrain.lock").exists()  # refused before taking the run lock: nothing ran
