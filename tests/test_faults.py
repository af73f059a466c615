"""Fault injection on the real components: SIGKILL mid-ingestion, a store held by another writer
(retried by the Dagster RetryPolicy), and two retrains of one home launched together.

Each fault is caused by a real second process (no mocks of the component under test), so the
tests exercise the same kernel-level behaviour a production crash or race would: DuckDB's WAL
recovery after SIGKILL, DuckDB's file lock, and `flock` on the run lock.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import timedelta
from pathlib import Path

import pytest

from dataplane.ingest import ingest_paths
from dataplane.store import StoreLockedError, open_store
from tests.helpers_data import NOW, build_records, write_jsonl

REPO_ROOT = Path(__file__).resolve().parent.parent
LATE = NOW + timedelta(days=60)  # after every record build_records makes for 3,000 rows


def _child(code: str, *args: str, env: dict | None = None) -> subprocess.Popen:
    """A Python child in the repository root that speaks line by line on stdout."""
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code), *args],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


def _wait_for(proc: subprocess.Popen, marker: str, timeout: float = 120) -> list[str]:
    """Lines read from `proc` up to and including the first equal to `marker`."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"child exited before {marker!r}: {proc.wait()} {proc.stderr.read()[-2000:]}")
        lines.append(line.strip())
        if line.strip() == marker:
            return lines
    raise AssertionError(f"no {marker!r} within {timeout}s")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


# --- SIGKILL in the middle of ingesting a large file ---------------------------------------------

# The child ingests with the real ingest_paths; the only addition is a line on stdout after each
# chunk is inserted (inside the file's open transaction), so the parent knows rows are written.
_INGEST_CHILD = """
    import sys
    from datetime import datetime
    from dataplane import ingest, store
    ingest.CHUNK_ROWS = int(sys.argv[3])
    real_flush = store.RowBatch.flush
    def flush(self, con):
        out = real_flush(self, con)
        print("chunk", flush=True)
        return out
    store.RowBatch.flush = flush
    ingest.ingest_paths(sys.argv[1], [sys.argv[2]], now=datetime.fromisoformat(sys.argv[4]))
    print("done", flush=True)
"""


@pytest.fixture(scope="module")
def big_file(tmp_path_factory, world, reference_tasks) -> tuple[Path, list[dict], int]:
    """~3,000 valid records plus 25 broken lines; the first 40 records are also in an earlier file."""
    records = build_records(world, reference_tasks, 3000)
    broken = ['{"interaction_id": "broken-%d", "outcome": 1}' % i for i in range(20)] + ["{not json"] * 5
    path = write_jsonl(tmp_path_factory.mktemp("landing") / "big.jsonl", records, broken)
    return path, records, len(broken)


def _file_rows(db: Path, source: Path) -> tuple[int, int, int, int]:
    con = open_store(db, read_only=True)
    try:
        return con.execute(
            "SELECT (SELECT count(*) FROM interactions WHERE source_file = ?), "
            "(SELECT count(DISTINCT interaction_id) FROM interactions), "
            "(SELECT count(*) FROM quarantine WHERE source_file = ?), "
            "(SELECT count(*) FROM ingested_files WHERE path = ?)",
            [str(source), str(source), str(source)],
        ).fetchone()
    finally:
        con.close()


def test_sigkill_mid_file_stores_nothing_and_the_rerun_conserves_every_row(tmp_path, big_file):
    path, records, n_broken = big_file
    db = tmp_path / "store.duckdb"
    earlier = write_jsonl(tmp_path / "earlier" / "a.jsonl", records[:40])
    assert ingest_paths(db, [earlier], now=LATE).accepted == 40

    child = _child(_INGEST_CHILD, str(db), str(path), "250", LATE.isoformat())
    try:
        _wait_for(child, "chunk")
        _wait_for(child, "chunk")  # at least 500 rows are in the open transaction now
        child.send_signal(signal.SIGKILL)
        assert child.wait(30) == -signal.SIGKILL
    finally:
        _stop(child)

    # Nothing of the big file is stored: no row, no quarantine row, no ingested_files entry.
    assert _file_rows(db, path) == (0, 40, 0, 0)

    summary = ingest_paths(db, [path], now=LATE)
    (item,) = summary.per_file
    assert item.status == "ingested"
    assert item.read == len(records) + n_broken
    assert item.read == item.accepted + item.duplicates + item.quarantined
    assert (item.accepted, item.duplicates, item.quarantined) == (len(records) - 40, 40, n_broken)
    stored, distinct, quarantined, files = _file_rows(db, path)
    assert (stored, quarantined, files) == (len(records) - 40, n_broken, 1)
    assert distinct == len(records)  # every row of the file is present exactly once
    con = open_store(db, read_only=True)
    try:
        ids = {r[0] for r in con.execute("SELECT interaction_id FROM interactions").fetchall()}
    finally:
        con.close()
    assert ids == {r["interaction_id"] for r in records}
    assert ingest_paths(db, [path], now=LATE).files_skipped == 1  # the finished file is not read twice


# --- the DuckDB file held by another writer ------------------------------------------------------

_HOLDER = """
    import sys, time, duckdb
    con = duckdb.connect(sys.argv[1])
    print("locked", flush=True)
    time.sleep(float(sys.argv[2]))
    con.close()
    print("released", flush=True)
    time.sleep(60)
"""


def test_held_store_is_a_named_error_and_the_asset_retry_gets_through(home, world, reference_tasks):
    import dagster as dg

    from assets import data
    from assets.retries import CONTENTION_RETRY
    from orchestration.environment import default_resources

    write_jsonl(home.landing / "day" / "a.jsonl", build_records(world, reference_tasks, 30))
    open_store(home.duckdb_path).close()
    hold_s = 3.0
    assert CONTENTION_RETRY.max_retries >= 1 and CONTENTION_RETRY.delay > hold_s, (
        "the test assumes the first retry comes after the holder lets go"
    )
    holder = _child(_HOLDER, str(home.duckdb_path), str(hold_s))
    try:
        _wait_for(holder, "locked")
        with pytest.raises(StoreLockedError) as info:
            ingest_paths(home.duckdb_path, [home.landing])
        assert str(home.duckdb_path) in str(info.value) and info.value.path == home.duckdb_path

        started = time.monotonic()
        result = dg.materialize(
            [data.raw_interactions], partition_key="2026-11-16", resources=default_resources(), raise_on_error=False
        )
        elapsed = time.monotonic() - started
    finally:
        _stop(holder)
    assert result.success, [e.message for e in result.all_events if e.is_failure]
    kinds = [e.event_type_value for e in result.all_events]
    assert kinds.count("STEP_UP_FOR_RETRY") >= 1  # the first attempt hit the lock
    retry = next(e for e in result.all_events if e.event_type_value == "STEP_UP_FOR_RETRY")
    assert "StoreLockedError" in str(retry.event_specific_data.error) and str(home.duckdb_path) in str(
        retry.event_specific_data.error
    )
    assert result.output_for_node("raw_interactions").ingest.accepted == 30
    assert elapsed < CONTENTION_RETRY.delay * 3  # one retry, not the whole budget


# --- two retrains of the same home at once -------------------------------------------------------

_LOCKER = """
    import sys, time
    from dataplane.home import Home
    from orchestration.runner import RetrainBusyError, run_lock
    home = Home.at(sys.argv[1])
    started = time.monotonic()
    try:
        with run_lock(home):
            print("holding", flush=True)
            time.sleep(float(sys.argv[2]))
    except RetrainBusyError as err:
        print("busy", round(time.monotonic() - started, 3), str(err), sep="\\t", flush=True)
        sys.exit(3)
    print("released", flush=True)
"""


def test_second_retrain_of_the_same_home_is_refused_at_once(home):
    first = _child(_LOCKER, str(home.root), "30")
    try:
        _wait_for(first, "holding")
        second = subprocess.run(
            [sys.executable, "-c", textwrap.dedent(_LOCKER), str(home.root), "0"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 3, second.stderr
        word, seconds, message = second.stdout.strip().split("\t")
        assert word == "busy"
        assert float(seconds) < 1.0  # refused at once, not queued behind the 30 s holder
        assert str(home.root) in message and f"pid {first.pid}" in message
    finally:
        _stop(first)
    # Once the holder is gone (even killed), the lock is free again.
    third = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_LOCKER), str(home.root), "0"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert third.returncode == 0 and third.stdout.split() == ["holding", "released"], third.stderr
