"""The airline domain through the command line: simulated traffic, imported tasks, ingestion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from domains.registry import load_domain

ROOT = Path(__file__).resolve().parents[1]
TASKS = ROOT / "tests" / "data" / "airline-tasks" / "tasks_dev.jsonl"


def _retrain(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RETRAIN_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def _records(folder: Path) -> list[dict]:
    return [json.loads(line) for path in sorted(folder.rglob("*.jsonl")) for line in path.read_text().splitlines()]


def test_simulated_airline_traffic_ingests_as_airline_records(tmp_path):
    out = tmp_path / "landing"
    done = _retrain(
        "simulate", "--domain", "airline", "--days", "2", "--per-day", "6", "--out", str(out), home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    records = _records(out)
    assert len(records) == 12 and {r["domain"] for r in records} == {"airline"}
    # The rules agent's label, not the registered model's (`airline-agent`): see default_version.
    assert {r["policy_version"] for r in records} == {"airline-rules/1"}
    domain = load_domain("airline")
    for record in records:
        assert record["intent"] in domain.intents
        if record["gold"]:
            _, errors = domain.replay(record["initial_state"], record["gold"]["actions"])
            assert errors == []
    ingested = _retrain("ingest", str(out), "--json", home=tmp_path)
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["accepted"] == 12


def test_retail_only_options_are_refused_by_name_for_airline(tmp_path):
    done = _retrain(
        "simulate",
        "--domain",
        "airline",
        "--days",
        "1",
        "--per-day",
        "2",
        "--drift-day",
        "0",
        "--out",
        str(tmp_path),
        home=tmp_path,
    )
    assert done.returncode != 0 and "drift" in done.stderr


def test_an_unknown_domain_is_a_clear_error(tmp_path):
    done = _retrain(
        "simulate", "--domain", "telecom", "--days", "1", "--per-day", "2", "--out", str(tmp_path), home=tmp_path
    )
    assert done.returncode != 0 and "telecom" in done.stderr and "airline" in done.stderr


def test_the_given_airline_tasks_import_replay_and_ingest(tmp_path):
    out = tmp_path / "tasks"
    world = ROOT / "domains" / "airline" / "data"
    done = _retrain(
        "import-tasks", str(TASKS), "--world", str(world), "--out", str(out), "--domain", "airline", home=tmp_path
    )
    assert done.returncode == 0, done.stderr
    records = _records(out)
    assert len(records) == 20 and {r["domain"] for r in records} == {"airline"}
    domain = load_domain("airline")
    for record in records:
        _, errors = domain.replay(record["initial_state"], record["gold"]["actions"])
        assert errors == [], record["interaction_id"]
    ingested = _retrain("ingest", str(out), "--json", home=tmp_path)
    assert ingested.returncode == 0, ingested.stderr
    assert json.loads(ingested.stdout)["accepted"] == 20, ingested.stdout
