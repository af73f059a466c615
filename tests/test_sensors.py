"""Sensors on real components: the champion-health circuit breaker and failure incidents.

Two champions are registered in a sqlite MLflow store; traffic served by the newest one is
simulated with `domains.retail.traffic.simulate.simulate` (normal, then degraded) and ingested into DuckDB. The
breaker must leave a healthy champion alone and roll a degraded one back, with an incident.
"""

from __future__ import annotations

import json
import threading
from datetime import date
from http.server import BaseHTTPRequestHandler, HTTPServer

import dagster as dg
import numpy as np
import pytest
from safetensors.numpy import save_file

from assets.resources import DuckDBStore, HomeResource, MLflowTracking
from dataplane.hashing import model_digest
from dataplane.incidents import list_incidents, record_incident
from dataplane.ingest import ingest_paths
from domains.retail.traffic.simulate import DEGRADED_MISTAKE_RATES, simulate
from evaluation.decision import ChampionLineage
from evaluation.gates import evaluate_gates
from monitoring.health import check_champion
from orchestration.sensors import champion_health
from tests.helpers_gates import gate_inputs
from tracking.registry import champion_info, register_candidate

pytestmark = pytest.mark.slow


def _model(path):
    path.mkdir(parents=True)
    save_file({"w": np.arange(6, dtype=np.float32)}, str(path / "model.safetensors"))
    (path / "tokenizer.json").write_text('{"version": "1.0"}')
    return path


@pytest.fixture()
def two_champions(home, tmp_path):
    report = evaluate_gates(gate_inputs("better"))

    for week in ("2026-11-09", "2026-11-16"):
        model = _model(tmp_path / week)
        register_candidate(
            home.mlflow_uri,
            model,
            week,
            ChampionLineage(shadow_success=0.9, violation_rate=0.02, model_digest=model_digest(model)),
            report,
            artifact_location=home.mlflow_artifacts.as_uri(),
            moved_by="test",
        )
    assert champion_info(home.mlflow_uri).version == 2
    return home


def _serve(home, tmp_path, degraded: bool, version: str = "retail-agent/2"):
    out = tmp_path / ("degraded" if degraded else "normal")
    simulate(
        days=2,
        per_day=60,
        seed=21 if degraded else 20,
        out_dir=str(out),
        start=date(2026, 11, 23),
        policy_version=version,
        n_users=80,
        mistake_rates=DEGRADED_MISTAKE_RATES if degraded else None,
    )
    ingest_paths(str(home.duckdb_path), [out])


def test_healthy_champion_is_left_alone(two_champions, tmp_path):
    home = two_champions
    _serve(home, tmp_path, degraded=False)
    outcome = check_champion(home, str(home.duckdb_path), home.mlflow_uri, "retail-agent")
    assert outcome["action"] == "none", outcome
    assert champion_info(home.mlflow_uri).version == 2
    assert list_incidents(home) == []


def test_degraded_champion_is_rolled_back_with_an_incident(two_champions, tmp_path):
    home = two_champions
    _serve(home, tmp_path, degraded=True)
    context = dg.build_sensor_context(
        resources={"home": HomeResource(root=str(home.root)), "store": DuckDBStore(), "mlflow": MLflowTracking()}
    )
    result = champion_health(context)
    assert isinstance(result, dg.SkipReason)
    outcome = json.loads(result.skip_message)
    assert outcome["action"] == "rollback" and outcome["from_version"] == 2 and outcome["to_version"] == 1
    assert champion_info(home.mlflow_uri).version == 1
    [incident] = list_incidents(home)
    assert incident["kind"] == "champion_rollback"
    verdict = incident["evidence"]["verdict"]
    assert verdict["healthy"] is False and verdict["champion"] == "retail-agent/2"
    assert any(verdict["evidence"].values())  # interaction ids behind the finding


def test_no_champion_means_nothing_to_judge(home):
    outcome = check_champion(home, str(home.duckdb_path), home.mlflow_uri, "retail-agent")
    assert outcome == {"action": "none", "reason": "no champion yet"}


def test_incident_is_posted_to_the_webhook_and_kept_when_it_is_down(home):
    received = []

    class Hook(BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/hook"
        path = record_incident(home, "run_failure", "week failed", {"run_id": "r1"}, webhook_url=url)
    finally:
        server.shutdown()
        server.server_close()
    assert received and received[0]["evidence"] == {"run_id": "r1"}
    assert json.loads(path.read_text())["webhook"]["status"] == 204
    # The receiver is gone now: the incident is still written, with the delivery error in it.
    kept = json.loads(record_incident(home, "run_failure", "again", {}, webhook_url=url, timeout=2).read_text())
    assert "error" in kept["webhook"]


def test_a_degraded_first_champion_files_one_incident_and_moves_nothing(home, tmp_path):
    """The first champion has no previous_champion: the check cannot roll back, so it keeps it,
    files one `champion_degraded` incident for a person, and later ticks do not file another."""
    model = _model(tmp_path / "first")
    register_candidate(
        home.mlflow_uri,
        model,
        "2026-11-16",
        ChampionLineage(shadow_success=0.9, violation_rate=0.02, model_digest=model_digest(model)),
        evaluate_gates(gate_inputs("better")),
        artifact_location=home.mlflow_artifacts.as_uri(),
        moved_by="test",
    )
    _serve(home, tmp_path, degraded=True, version="retail-agent/1")
    first = check_champion(home, str(home.duckdb_path), home.mlflow_uri, "retail-agent")
    assert first["action"] == "incident" and not first["already_filed"], first
    assert "no previous champion" in first["reason"]
    assert champion_info(home.mlflow_uri).version == 1
    again = check_champion(home, str(home.duckdb_path), home.mlflow_uri, "retail-agent")
    assert again["action"] == "incident" and again["already_filed"]
    [incident] = list_incidents(home)
    assert incident["kind"] == "champion_degraded" and incident["evidence"]["champion"] == "retail-agent/1"
