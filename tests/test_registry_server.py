"""Registration against a real `mlflow server` process on 127.0.0.1, as a team would run it.

The server takes ~25 s to answer here, so readiness is polled with a bound, never slept for.
The outage is real: the server is stopped mid-sequence and started again on the same store.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import requests
from safetensors.numpy import save_file

from dataplane.hashing import model_digest
from evaluation.decision import ChampionLineage
from evaluation.gates import evaluate_gates
from tests.helpers_gates import gate_inputs
from tracking.registry import RegistryError, champion_info, find_week_version, register_candidate, rollback

pytestmark = [pytest.mark.server, pytest.mark.slow]
READY_TIMEOUT_S = 90


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class MlflowServer:
    def __init__(self, root: Path, port: int):
        self.root, self.port = root, port
        self.uri = f"http://127.0.0.1:{port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        log = open(self.root / f"server-{time.monotonic_ns()}.log", "wb")  # noqa: SIM115 - the server writes to it until stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mlflow",
                "server",
                "--backend-store-uri",
                f"sqlite:///{self.root / 'mlflow.db'}",
                "--artifacts-destination",
                str(self.root / "artifacts"),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--workers",
                "1",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            # No background job runner (huey consumers): the registry does not need it, and it
            # multiplies processes and start-up time.
            env={**os.environ, "MLFLOW_ENABLE_TELEMETRY": "false", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"},
        )
        try:
            self._wait_ready(log.name)
        except BaseException:
            self.stop()  # never leave a server behind, whatever went wrong while waiting
            raise

    def _wait_ready(self, log_name: str) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"mlflow server exited with {self.proc.returncode}; see {log_name}")
            try:
                if requests.get(f"{self.uri}/api/2.0/mlflow/experiments/search?max_results=1", timeout=10).ok:
                    return
            except (requests.ConnectionError, requests.Timeout):  # not listening yet, or still migrating
                pass
            time.sleep(0.5)
        pytest.fail(f"mlflow server not ready after {READY_TIMEOUT_S} s; see {log_name}")

    def stop(self) -> None:
        if self.proc is None:
            return
        # The server's own process group (it and its workers), which this test started.
        self._signal_group(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            pass
        self._signal_group(signal.SIGKILL)  # workers that outlived the parent
        self.proc.wait(timeout=10)

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:  # the whole group is already gone
            pass


@pytest.fixture()
def server(tmp_path):
    srv = MlflowServer(tmp_path, free_port())
    srv.start()
    yield srv
    srv.stop()


def test_registration_alias_rollback_and_outage_against_a_server(server, tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "10")
    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": np.ones((2, 2), dtype=np.float32)}, str(model / "model.safetensors"))
    (model / "tokenizer.json").write_text("{}")
    report = evaluate_gates(gate_inputs("better"))
    uri = server.uri

    def register(week: str) -> int:
        lineage = ChampionLineage(window_hash=f"h-{week}", model_digest=model_digest(model))
        return register_candidate(uri, model, week, lineage, report, moved_by="test")

    assert register("2025-W01") == 1
    assert register("2025-W02") == 2
    assert register("2025-W02") == 2  # idempotent over REST too
    info = champion_info(uri)
    assert (info.version, info.previous_version, info.week) == (2, 1, "2025-W02")
    assert info.source.startswith("mlflow-artifacts:")  # proxied artifacts, uploaded through the server
    assert rollback(uri, moved_by="test").to_version == 1 and champion_info(uri).version == 1

    server.stop()  # MLflow goes down during the next registration
    with pytest.raises(RegistryError) as err:
        register("2025-W03")
    assert uri in str(err.value)

    server.start()  # same store, same port
    assert champion_info(uri).version == 1  # champion unchanged by the failed attempt
    assert register("2025-W03") == 3
    assert register("2025-W03") == 3
    assert find_week_version(uri, "2025-W03") == 3
    info = champion_info(uri)
    assert (info.version, info.previous_version) == (3, 1)
