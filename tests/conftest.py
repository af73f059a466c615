"""Fixtures shared by every test layer. Area-specific helpers live in tests/helpers_*.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
WORLD_DIR = REPO_ROOT / "tests" / "data" / "retail-world"  # vendored reference world (MIT, see its README)

# No test may reach a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
# Tests expect the rule-based customer unless they choose another; a developer's own
# RETRAIN_CUSTOMER must not send the whole suite to an LLM endpoint.
os.environ.pop("RETRAIN_CUSTOMER", None)
# One pseudonymisation key for the whole suite (dataplane.scrub): stored texts and their content
# hashes are then the same on every machine, and no test writes a key file into the repository's
# default home. Tests of the per-home key file unset it.
os.environ["RETRAIN_PII_KEY"] = "agent-retrain test suite key"


@pytest.fixture(scope="session")
def world_dir() -> Path:
    if not (WORLD_DIR / "users.json").exists():
        pytest.fail(f"reference world not found at {WORLD_DIR}")
    return WORLD_DIR


@pytest.fixture(scope="session")
def world(world_dir) -> dict:
    """The full reference world; tests must deep-copy before mutating."""
    return {name: json.loads((world_dir / f"{name}.json").read_text()) for name in ("users", "orders", "products")}


@pytest.fixture(scope="session")
def reference_tasks(world_dir) -> list[dict]:
    return [json.loads(line) for line in (world_dir / "tasks_train.jsonl").read_text().splitlines() if line.strip()]


@pytest.fixture()
def home(tmp_path, monkeypatch):
    """A fresh home folder for one test, exported as RETRAIN_HOME."""
    from orchestration import environment

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    return environment.home().ensure()


@pytest.fixture()
def instance(home, monkeypatch):
    """The home's Dagster instance (its dagster.yaml, DAGSTER_HOME exported), as `retrain` uses it."""
    import dagster as dg

    from orchestration.instance import prepare_dagster_home

    monkeypatch.setenv("DAGSTER_HOME", str(home.dagster_home))
    prepare_dagster_home(home)
    with dg.DagsterInstance.get() as inst:
        yield inst
