"""deploy/mlflow-server.sh: MLflow's basic-auth app, on 127.0.0.1 unless a host is given, refusing to
start without its credentials; and, against the real server, that only a signed-in account with
permission on the model can move `champion`."""

from __future__ import annotations

import os
import stat
import subprocess

import numpy as np
import pytest
import requests
from safetensors.numpy import save_file

from dataplane.hashing import model_digest
from evaluation.decision import ChampionLineage
from evaluation.gates import evaluate_gates
from tests.helpers_gates import gate_inputs
from tests.helpers_postgres import MLFLOW_SERVER_SH, MLFLOW_TEST_PASSWORD, MLFLOW_TEST_USER, script_mlflow_server
from tracking.registry import champion_info, register_candidate

REQUIRED = {
    "MLFLOW_BACKEND_STORE_URI": "postgresql://mlflow:pw@db:5432/mlflow",
    "MLFLOW_ARTIFACTS_DESTINATION": "s3://bucket/mlflow",
    "MLFLOW_AUTH_DATABASE_URI": "postgresql://mlflow:pw@db:5432/mlflow_auth",
    "MLFLOW_TRACKING_USERNAME": "retrain",
    "MLFLOW_TRACKING_PASSWORD": "a-long-enough-password",
    "MLFLOW_FLASK_SERVER_SECRET_KEY": "csrf-key",
}


def _script(tmp_path, **env: str) -> subprocess.CompletedProcess:
    """Run the script with `MLFLOW_BIN` a program that prints what it was started with: its
    arguments, the admin variables the auth app reads, and the auth config the script wrote."""
    shown = tmp_path / "show-mlflow"
    shown.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@"\necho "ADMIN=$MLFLOW_AUTH_ADMIN_USERNAME:$MLFLOW_AUTH_ADMIN_PASSWORD"\n'
        'echo "MODE=$(stat -c %a "$MLFLOW_AUTH_CONFIG_PATH")"\ncat "$MLFLOW_AUTH_CONFIG_PATH"\n'
    )
    shown.chmod(shown.stat().st_mode | stat.S_IXUSR)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")}
    return subprocess.run(
        ["sh", str(MLFLOW_SERVER_SH)],
        env={**base, "MLFLOW_BIN": str(shown), "TMPDIR": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_server_runs_the_basic_auth_app_on_localhost_unless_a_host_is_given(tmp_path):
    done = _script(tmp_path, **REQUIRED)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == ["server", "--app-name", "basic-auth"]
    assert lines[lines.index("--host") + 1] == "127.0.0.1"
    assert "ADMIN=retrain:a-long-enough-password" in lines  # MLflow's own admin variables, from the secret's
    assert "MODE=600" in lines
    ini = done.stdout[done.stdout.index("[mlflow]") :]
    assert f"database_uri = {REQUIRED['MLFLOW_AUTH_DATABASE_URI']}" in ini and "admin_username = retrain" in ini
    assert "default_permission = READ" in ini and REQUIRED["MLFLOW_TRACKING_PASSWORD"] not in ini
    pod = _script(tmp_path, **REQUIRED, MLFLOW_HOST="0.0.0.0").stdout.splitlines()
    assert pod[pod.index("--host") + 1] == "0.0.0.0"


@pytest.mark.parametrize("missing", sorted(REQUIRED))
def test_the_server_refuses_to_start_without_its_settings(tmp_path, missing):
    done = _script(tmp_path, **{k: v for k, v in REQUIRED.items() if k != missing})
    assert done.returncode != 0 and missing in done.stderr
    assert done.stdout == ""  # mlflow was never started


@pytest.mark.server
@pytest.mark.slow
def test_only_a_signed_in_account_with_permission_moves_champion(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": np.ones(4, dtype=np.float32)}, str(model / "model.safetensors"))
    (model / "tokenizer.json").write_text("{}")
    report = evaluate_gates(gate_inputs("better"))
    with script_mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "artifacts", tmp_path / "logs") as uri:
        search = f"{uri}/api/2.0/mlflow/experiments/search?max_results=1"
        assert requests.get(search, timeout=30).status_code == 401  # nobody signed in: nothing
        assert requests.get(search, auth=(MLFLOW_TEST_USER, "wrong-password-here"), timeout=30).status_code == 401
        # The pipeline's account (MLFLOW_TRACKING_USERNAME/PASSWORD in its environment) registers.
        version = register_candidate(
            uri, model, "2026-11-16", ChampionLineage(model_digest=model_digest(model)), report, moved_by="test"
        )
        assert champion_info(uri).version == version == 1

        alias = f"{uri}/api/2.0/mlflow/registered-models/alias"
        move = {"name": "retail-agent", "alias": "champion", "version": "1"}
        assert requests.post(alias, json=move, timeout=30).status_code == 401
        # Another signed-in user, with the default READ permission, cannot move champion either.
        created = requests.post(
            f"{uri}/api/2.0/mlflow/users/create",
            json={"username": "reader", "password": "reader-password-123"},
            auth=(MLFLOW_TEST_USER, MLFLOW_TEST_PASSWORD),
            timeout=30,
        )
        assert created.ok, created.text
        assert requests.get(search, auth=("reader", "reader-password-123"), timeout=30).ok  # may read
        refused = requests.post(alias, json=move, auth=("reader", "reader-password-123"), timeout=30)
        assert refused.status_code == 403
        assert requests.post(alias, json=move, auth=(MLFLOW_TEST_USER, MLFLOW_TEST_PASSWORD), timeout=30).ok
