"""Ingestion: bad input (each case its own rule, nothing lost), idempotence, transactions, locks."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane import ingest as ingest_module
from dataplane.contract import validate_record
from dataplane.ingest import InputPathError, ingest_paths
from dataplane.scrub import scrub_json_text
from dataplane.store import StoreLockedError, open_store, stored_record
from tests.helpers_data import NOW, build_records, write_jsonl


@pytest.fixture(scope="module")
def records(world, reference_tasks) -> list[dict]:
    return build_records(world, reference_tasks, 12)


def _counts(db: Path) -> dict:
    con = open_store(db, read_only=True)
    try:
        return {
            t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # table names are constants
            for t in ("interactions", "quarantine", "ingested_files")
        }
    finally:
        con.close()


def _quarantine(db: Path) -> list[tuple]:
    con = open_store(db, read_only=True)
    try:
        return con.execute(
            "SELECT rule, line_no, interaction_id, raw, file_level FROM quarantine ORDER BY line_no"
        ).fetchall()
    finally:
        con.close()


def _invariant(summary) -> None:
    assert summary.read == summary.accepted + summary.duplicates + summary.quarantined
    for item in summary.per_file:
        assert item.read == item.accepted + item.duplicates + item.quarantined
    assert sum(summary.quarantined_by_rule.values()) == summary.quarantined
    json.dumps(summary.to_dict())


def _mutate(record: dict, key: str, value) -> dict:
    out = copy.deepcopy(record)
    if value is None and key != "gold":
        del out[key]
    else:
        out[key] = value
    return out


LINE_CASES = [
    ("missing_field", lambda r: _mutate(r, "outcome", None)),
    ("wrong_type", lambda r: _mutate(r, "actions_taken", "two")),
    ("bad_timestamp", lambda r: _mutate(r, "ended_at", "2024-13-01T00:00:00Z")),
    ("ended_before_started", lambda r: _mutate(r, "ended_at", "2024-01-01T00:00:00Z")),
    ("future_timestamp", lambda r: _mutate(r, "ended_at", (NOW + timedelta(days=1)).isoformat())),
    ("unknown_outcome", lambda r: _mutate(r, "outcome", "vanished")),
    ("unknown_intent", lambda r: _mutate(r, "intent", "complain")),
    ("sentiment_out_of_range", lambda r: _mutate(r, "customer_sentiment_delta", -1.01)),
    ("negative_actions", lambda r: _mutate(r, "actions_taken", -2)),
    ("empty_messages", lambda r: _mutate(r, "messages", [])),
    (
        "tool_calls_on_non_assistant",
        lambda r: _mutate(
            r, "messages", [{"role": "user", "content": "hi", "tool_calls": [{"name": "think", "arguments": {}}]}]
        ),
    ),
    ("unknown_schema_version", lambda r: _mutate(r, "schema_version", 2)),
    ("invalid_json", lambda r: json.dumps(r)[:-40]),  # a truncated line
]


@pytest.mark.parametrize("rule,make", LINE_CASES, ids=[c[0] for c in LINE_CASES])
def test_bad_line_is_quarantined_with_its_rule(tmp_path, records, rule, make):
    bad = make(records[5])
    path = write_jsonl(tmp_path / "in" / "day.jsonl", records[:5] + [bad] + records[6:8])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    _invariant(summary)
    assert (summary.read, summary.accepted, summary.quarantined) == (8, 7, 1)
    assert summary.quarantined_by_rule == {rule: 1}
    [(got_rule, line_no, rid, raw, file_level)] = _quarantine(tmp_path / "db.duckdb")
    assert (got_rule, line_no, rid, file_level) == (rule, 6, records[5]["interaction_id"], False)
    # Kept as read, with PII masked (the record's e-mail as its pseudonym), like every stored text.
    assert raw == scrub_json_text(bad if isinstance(bad, str) else json.dumps(bad))


def test_duplicates_and_conflicts(tmp_path, records):
    conflict = _mutate(records[1], "customer_sentiment_delta", -0.5)
    first = write_jsonl(tmp_path / "in" / "a.jsonl", records[:4] + [records[0]])  # duplicate inside a file
    second = write_jsonl(tmp_path / "in" / "b.jsonl", [records[2], conflict, records[4]])
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [tmp_path / "in"], now=NOW)
    _invariant(summary)
    assert (summary.read, summary.accepted, summary.duplicates, summary.quarantined) == (8, 5, 2, 1)
    assert summary.quarantined_by_rule == {"duplicate_conflict": 1}
    assert _quarantine(db)[0][2] == records[1]["interaction_id"]
    assert [f.path for f in summary.per_file] == [str(first), str(second)]


def test_conflict_within_one_file(tmp_path, records):
    path = write_jsonl(tmp_path / "a.jsonl", [records[0], _mutate(records[0], "outcome", "failed")])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"duplicate_conflict": 1})


def test_pii_is_scrubbed_not_rejected(tmp_path, records):
    dirty = copy.deepcopy(records[0])
    dirty["messages"][1]["content"] = "card 4111 1111 1111 1111, phone +1 415-555-0100, ssn 123-45-6789, #W6067464"
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", [dirty])], now=NOW)
    assert (summary.accepted, summary.quarantined) == (1, 0)
    con = open_store(db, read_only=True)
    [stored] = [json.loads(r[0]) for r in con.execute("SELECT record FROM interactions").fetchall()]
    con.close()
    assert stored["messages"][1]["content"] == "card [CARD], phone [PHONE], ssn [NATIONAL_ID], #W6067464"
    # The world is kept as it was but for its e-mails, which become their consistent pseudonyms.
    expected = copy.deepcopy(records[0]["initial_state"])
    for user_id, user in expected["users"].items():
        pseudonym = stored["initial_state"]["users"][user_id]["email"]
        assert pseudonym.endswith("@masked.invalid") and pseudonym != user["email"]
        user["email"] = pseudonym
    assert stored["initial_state"] == expected


def _corrupt_gzip(path: Path, records: list[dict]) -> Path:
    blob = gzip.compress("".join(json.dumps(r) + "\n" for r in records).encode())
    path.write_bytes(blob[: len(blob) // 2])
    return path


def _broken_parquet(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"PAR1" + b"\x00garbage" * 20)
    return path


def _empty(path: Path, records: list[dict]) -> Path:
    path.write_bytes(b"")
    return path


FILE_CASES = [
    ("corrupt_file", "x.jsonl.gz", _corrupt_gzip),
    ("corrupt_file", "x.parquet", _broken_parquet),
    ("empty_file", "x.jsonl", _empty),
]
# A line that is not UTF-8 or is over the byte cap spoils only itself: tests/test_ingest_hardening.py.


@pytest.mark.parametrize("rule,name,make", FILE_CASES, ids=[f"{c[0]}:{c[1]}" for c in FILE_CASES])
def test_corrupt_file_is_quarantined_whole_and_others_still_go_in(tmp_path, records, rule, name, make):
    (tmp_path / "in").mkdir()
    bad = make(tmp_path / "in" / name, records[:6])
    good = write_jsonl(tmp_path / "in" / "z_good.jsonl", records[6:9])
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [tmp_path / "in"], now=NOW)
    _invariant(summary)
    by_path = {f.path: f for f in summary.per_file}
    assert by_path[str(bad)].status == "quarantined"
    assert by_path[str(bad)].quarantined_by_rule == {rule: 1}
    assert by_path[str(good)].accepted == 3
    assert _counts(db)["interactions"] == 3  # nothing of the corrupt file half-stored
    assert [(r[0], r[4]) for r in _quarantine(db)] == [(rule, True)]
    assert ingest_paths(db, [tmp_path / "in"], now=NOW).files_skipped == 2


def test_parquet_and_gzip_round_trip(tmp_path, records):
    columns = {key: [r.get(key) for r in records[:4]] for key in records[0]}
    for key in ("initial_state", "user_scenario", "messages", "gold", "human_label"):
        columns[key] = [None if v is None else json.dumps(v) for v in columns[key]]
    pq.write_table(pa.table(columns), tmp_path / "a.parquet", row_group_size=2)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in records[:6]).encode()))
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet", tmp_path / "b.jsonl.gz"], now=NOW)
    _invariant(summary)
    # The gzip copies of the Parquet rows hash identically: Parquet and JSONL normalise alike.
    assert (summary.accepted, summary.duplicates, summary.quarantined) == (6, 4, 0)


def test_reingest_is_a_noop_and_changed_file_is_read_again(tmp_path, records):
    path = write_jsonl(tmp_path / "a.jsonl", records[:3])
    db = tmp_path / "db.duckdb"
    ingest_paths(db, [path], now=NOW)
    again = ingest_paths(db, [path], now=NOW)
    assert (again.files_skipped, again.read) == (1, 0)
    write_jsonl(path, records[:4])
    grown = ingest_paths(db, [path], now=NOW)
    assert (grown.accepted, grown.duplicates) == (1, 3)
    assert _counts(db) == {"interactions": 4, "quarantine": 0, "ingested_files": 2}


def test_crash_mid_file_leaves_nothing(tmp_path, records, monkeypatch):
    path = write_jsonl(tmp_path / "a.jsonl", records[:10])
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 3)
    calls = {"n": 0}
    real = ingest_module.validate_record

    def crashing(obj, now=None, *rest):
        calls["n"] += 1
        if calls["n"] == 8:  # after two chunks were already inserted in the transaction
            raise KeyboardInterrupt("simulated crash")
        return real(obj, now, *rest)

    monkeypatch.setattr(ingest_module, "validate_record", crashing)
    db = tmp_path / "db.duckdb"
    with pytest.raises(KeyboardInterrupt):
        ingest_paths(db, [path], now=NOW)
    assert _counts(db) == {"interactions": 0, "quarantine": 0, "ingested_files": 0}
    monkeypatch.setattr(ingest_module, "validate_record", real)
    assert ingest_paths(db, [path], now=NOW).accepted == 10


def test_missing_path_raises_before_anything(tmp_path):
    with pytest.raises(InputPathError) as info:
        ingest_paths(tmp_path / "db.duckdb", [tmp_path / "nope"])
    assert "nope" in str(info.value)
    assert not (tmp_path / "db.duckdb").exists()


def _hold_lock(db: Path, seconds: float) -> subprocess.Popen:
    """Another process holding the store's write lock for `seconds`; returns once it holds it."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import duckdb,sys,time; c=duckdb.connect(sys.argv[1]); print('ready', flush=True); "
            "time.sleep(float(sys.argv[2]))",
            str(db),
            str(seconds),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout.readline().strip() == "ready"
    return holder


def test_locked_store_names_the_file(tmp_path):
    db = tmp_path / "db.duckdb"
    open_store(db).close()
    holder = _hold_lock(db, 60)
    try:
        with pytest.raises(StoreLockedError) as info:
            ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", ['{"x": 1}'])])
        assert str(db) in str(info.value)
    finally:
        holder.kill()
        holder.wait()


_mutations = st.tuples(
    st.integers(0, 11),
    st.sampled_from(
        [
            "interaction_id",
            "ended_at",
            "outcome",
            "intent",
            "actions_taken",
            "customer_sentiment_delta",
            "messages",
            "schema_version",
            "gold",
            "customer_id",
            "escalation_was_necessary",
        ]
    ),
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-2, 2),
        st.floats(-2, 2),
        st.text(max_size=6),
        st.lists(st.integers(), max_size=2),
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mutations=st.lists(_mutations, max_size=6), truncate=st.booleans())
def test_fuzz_never_crashes_and_nothing_invalid_is_stored(tmp_path_factory, records, mutations, truncate):
    rows: list = [copy.deepcopy(r) for r in records]
    for index, key, value in mutations:
        rows[index][key] = value
    if truncate:
        rows[-1] = json.dumps(rows[-1])[:50]
    work = tmp_path_factory.mktemp("fuzz")
    db = work / "db.duckdb"
    summary = ingest_paths(db, [write_jsonl(work / "a.jsonl", rows + rows[:3])], now=NOW)
    _invariant(summary)
    con = open_store(db, read_only=True)
    stored = [stored_record(r[0]) for r in con.execute("SELECT record FROM interactions").fetchall()]
    con.close()
    assert len(stored) == summary.accepted
    for record in stored:
        assert validate_record(record, now=NOW) == record


def test_summary_is_written_per_file_for_the_cli(tmp_path, records):
    summary = ingest_paths(tmp_path / "db.duckdb", [write_jsonl(tmp_path / "a.jsonl", records[:2])], now=NOW)
    payload = summary.to_dict()
    assert set(payload) >= {"files", "read", "accepted", "duplicates", "quarantined", "quarantined_by_rule", "per_file"}
    assert payload["per_file"][0]["status"] == "ingested"


def test_a_step_waits_for_a_lock_another_process_lets_go_of(tmp_path):
    # The Dagster store resource opens with a wait: another run's brief hold (an ingest, the live
    # watch) delays a step instead of failing it. Without a wait the lock still fails at once.
    from assets.resources import DuckDBStore
    from dataplane.home import Home

    home = Home.at(tmp_path / "home").ensure()
    db = home.duckdb_path
    open_store(db).close()
    holder = _hold_lock(db, 2)
    try:
        with pytest.raises(StoreLockedError):
            open_store(db)
        with pytest.raises(StoreLockedError):
            open_store(db, wait_seconds=0.5)  # held longer than that
        with DuckDBStore().connect(home) as con:  # waits the holder out
            assert con.execute("SELECT count(*) FROM interactions").fetchone()[0] == 0
        assert holder.poll() is not None  # it was the holder's exit that let the step in
    finally:
        holder.kill()
        holder.wait()
