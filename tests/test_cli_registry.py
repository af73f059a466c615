"""`retrain approve` and `retrain rollback` as a person uses them, on a real sqlite MLflow store."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

from evaluation.gates import evaluate_gates
from evaluation.registry import champion_info, find_week_version
from tests.helpers_gates import gate_inputs

WEEK = "2026-11-16"


def _retrain(home, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "RETRAIN_HOME": str(home.root)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, env=env, timeout=300
    )


def _decision(home, tmp_path, week: str, policy: str):
    model = tmp_path / f"model-{week}"
    model.mkdir()
    save_file({"w": np.ones(4, dtype=np.float32)}, str(model / "model.safetensors"))
    (model / "tokenizer.json").write_text('{"version": "1.0"}')
    report = evaluate_gates(gate_inputs(policy))
    folder = home.root / "runs" / week
    folder.mkdir(parents=True)
    (folder / "promotion_request.json").write_text(
        json.dumps(
            {
                "model_path": str(model),
                "report": report.to_dict(),
                "lineage": {"week": week, "window_hash": "ab" * 32, "shadow_success": 0.8},
            }
        )
    )
    return report


@pytest.mark.slow
def test_a_held_week_is_registered_only_after_approval(home, tmp_path):
    report = _decision(home, tmp_path, WEEK, "drifter")
    assert report.decision == "hold"
    assert champion_info(home.mlflow_uri) is None

    done = _retrain(home, "approve", "--week", "2026-11-18", "--by", "alice")  # any day of the week
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"week": WEEK, "version": 1, "approved_by": "alice"}
    champion = champion_info(home.mlflow_uri)
    assert champion.version == 1 and champion.tags["approved_by"] == "alice"

    again = _retrain(home, "approve", "--week", WEEK, "--by", "alice")
    assert again.returncode == 0 and json.loads(again.stdout)["version"] == 1  # never a second version


@pytest.mark.slow
def test_a_rejected_week_cannot_be_approved_and_rollback_needs_a_previous(home, tmp_path):
    _decision(home, tmp_path, WEEK, "escalator")
    refused = _retrain(home, "approve", "--week", WEEK)
    assert refused.returncode == 2
    assert "cannot approve" in refused.stderr and "Traceback" not in refused.stderr
    assert find_week_version(home.mlflow_uri, WEEK) is None

    missing = _retrain(home, "approve", "--week", "2026-11-30")
    assert missing.returncode == 2 and "no promotion decision" in missing.stderr

    nothing = _retrain(home, "rollback")
    assert nothing.returncode == 1 and "previous_champion" in nothing.stderr


@pytest.mark.slow
def test_rollback_restores_the_previous_champion(home, tmp_path):
    for week in ("2026-11-09", WEEK):
        _decision(home, tmp_path, week, "drifter")
        assert _retrain(home, "approve", "--week", week, "--by", "bob").returncode == 0
    assert champion_info(home.mlflow_uri).version == 2
    done = _retrain(home, "rollback")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["to_version"] == 1
    assert champion_info(home.mlflow_uri).version == 1


def test_bad_week_is_a_clear_error(home):
    done = _retrain(home, "run", "--week", "last tuesday")
    assert done.returncode == 2
    assert "YYYY-MM-DD" in done.stderr and "Traceback" not in done.stderr
