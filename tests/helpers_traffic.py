"""Helpers for the simulated-traffic and task-import tests (tests only)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from dataplane.contract import validate_record

# Simulated days start 2026-11-02 by default; validating "now" a year later keeps every
# timestamp in the past whatever day the tests run.
NOW = datetime(2027, 12, 1, tzinfo=UTC)
KNOWN_INFO_KEYS = {
    "email",
    "first_name",
    "last_name",
    "zip",
    "order_ids",
    "intent",
    "reason",
    "item_names",
    "payment_method_id",
    "address",
}


@lru_cache(maxsize=4)
def generated_world(n_users: int = 150, seed: int = 0) -> dict[str, Any]:
    """A generated world, cached: callers must not mutate it (everything here deep-copies)."""
    from domains.retail.traffic.worldgen import generate_world

    return generate_world(n_users=n_users, seed=seed)


ROOT = Path(__file__).resolve().parents[1]


def retrain(*args: str, home: Path) -> subprocess.CompletedProcess:
    """`retrain ARGS` in a fresh process whose home is `home` (and only `home`: the Dagster and MLflow
    locations of the calling environment are dropped, so the command uses the home's own)."""
    env = {**os.environ, "RETRAIN_HOME": str(home)}
    env.pop("DAGSTER_HOME", None)
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def read_records(paths: Iterable[str | Path]) -> list[dict[str, Any]]:
    """Every JSON line of the given files, in order."""
    records = []
    for path in paths:
        records += [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line]
    return records


def validate_all(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Normalised records; raises the data plane's ContractError on the first invalid one."""
    return [validate_record(record, now=NOW) for record in records]


def ingest(tmp_path: Path, paths: list[Path | str]) -> dict[str, Any]:
    """Ingest landing files into a fresh DuckDB store; returns the summary as a dict."""
    from dataplane.ingest import ingest_paths

    return ingest_paths(tmp_path / "ingest.duckdb", paths, now=NOW).to_dict()


def simulated_store(root: Path, start: str, days: int, per_day: int, seed: int, label_share: float) -> Path:
    """`days` of simulated traffic from `start` ingested into `root/store.duckdb`, for module fixtures
    whose tests each work on a copy."""
    from datetime import date

    from dataplane.ingest import ingest_paths
    from domains.retail.traffic.simulate import simulate

    simulate(
        days=days,
        per_day=per_day,
        seed=seed,
        out_dir=root / "landing",
        start=date.fromisoformat(start),
        label_share=label_share,
    )
    ingest_paths(root / "store.duckdb", [root / "landing"], now=NOW)
    return root / "store.duckdb"


def day_files(out: Path) -> list[Path]:
    return sorted(out.glob("*/interactions.jsonl"))


def expected_changes_hold(initial: dict[str, Any], final: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """Differences between a replay and a task's expected_changes (empty when they agree).

    Every record named in expected_changes must equal it; every other record must be unchanged.
    """
    problems = []
    for kind in ("users", "orders", "products"):
        named = expected.get(kind, {})
        for record_id, record in named.items():
            if final[kind].get(record_id) != record:
                problems.append(f"{kind}[{record_id}] differs from expected")
        for record_id, record in initial[kind].items():
            if record_id not in named and final[kind].get(record_id) != record:
                problems.append(f"{kind}[{record_id}] changed but is not in expected_changes")
    return problems
