"""Duplicate and conflict detection against the store stays exact with the range-restricted lookup.

`RowBatch.flush` asks only for stored ids within the chunk's own id range, then plain-inserts the
rest. These tests interleave new, duplicate and conflicting ids in any order and chunk size, and
compare the summary and the stored rows with a model computed in Python.
"""

from __future__ import annotations

import copy
import json

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane import ingest as ingest_module
from dataplane import store as store_module
from dataplane.ingest import ingest_paths
from dataplane.store import RowBatch, insert_interactions, open_store, prepare_row, rows_table
from tests.helpers_data import NOW, build_records, write_jsonl

ID_CHARS = "abcXYZ019_.:-"


@pytest.fixture(scope="module")
def template(world, reference_tasks) -> dict:
    return build_records(world, reference_tasks, 1)[0]


def _record(template: dict, rid: str, delta: float) -> dict:
    out = copy.deepcopy(template)
    out["interaction_id"] = rid
    out["customer_sentiment_delta"] = delta
    return out


def _stored(db) -> dict[str, float]:
    con = open_store(db, read_only=True)
    try:
        return {
            rid: json.loads(text)["customer_sentiment_delta"]
            for rid, text in con.execute("SELECT interaction_id, record FROM interactions").fetchall()
        }
    finally:
        con.close()


ids = st.text(ID_CHARS, min_size=1, max_size=6)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    first=st.lists(ids, min_size=1, max_size=12, unique=True),  # an empty file is its own case
    second=st.lists(st.tuples(ids, st.sampled_from([0.0, 0.5])), min_size=1, max_size=14),
    chunk=st.integers(1, 5),
)
def test_new_duplicate_and_conflicting_ids_in_any_order(tmp_path_factory, monkeypatch, template, first, second, chunk):
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", chunk)
    work = tmp_path_factory.mktemp("dedup")
    db = work / "db.duckdb"
    ingest_paths(db, [write_jsonl(work / "a.jsonl", [_record(template, rid, 0.0) for rid in first])], now=NOW)
    summary = ingest_paths(
        db, [write_jsonl(work / "b.jsonl", [_record(template, rid, d) for rid, d in second])], now=NOW
    )

    # The model: the first copy of an id wins; a later copy is a duplicate if its content equals
    # the winner's, else a quarantined conflict.
    winner = {rid: 0.0 for rid in first}
    accepted = duplicates = conflicts = 0
    for rid, delta in second:
        if rid not in winner:
            winner[rid], accepted = delta, accepted + 1
        elif winner[rid] == delta:
            duplicates += 1
        else:
            conflicts += 1
    assert (summary.accepted, summary.duplicates, summary.quarantined) == (accepted, duplicates, conflicts)
    assert summary.quarantined_by_rule == ({"duplicate_conflict": conflicts} if conflicts else {})
    assert _stored(db) == winner


def test_flush_reports_stored_ids_inside_the_chunks_range(tmp_path, template):
    """A stored id between the chunk's smallest and largest new id is found, not re-inserted."""
    con = open_store(tmp_path / "db.duckdb")
    try:
        batch = RowBatch("a.jsonl", NOW)
        stored_row = prepare_row(_record(template, "m", 0.0))
        batch.append(stored_row, "first")
        assert batch.flush(con).inserted == ["m"]
        for rid, delta in (("a", 0.0), ("m", 0.5), ("z", 0.0)):
            batch.append(prepare_row(_record(template, rid, delta)), f"tag-{rid}")
        result = batch.flush(con)
        assert sorted(result.inserted) == ["a", "z"]
        assert result.not_inserted == {"m": ("tag-m", stored_row.content_hash)}
        assert len(batch) == 0
    finally:
        con.close()


def test_primary_key_still_refuses_a_stored_id(tmp_path, template):
    """The plain insert leans on the primary key: a stored id slipping past the lookup is an error."""
    con = open_store(tmp_path / "db.duckdb")
    try:
        table = rows_table([prepare_row(_record(template, "dup", 0.0))])
        insert_interactions(con, table, "a.jsonl", NOW)
        with pytest.raises(duckdb.ConstraintException):
            insert_interactions(con, table, "b.jsonl", NOW)
    finally:
        con.close()


def test_new_file_is_inserted_without_looking_up_stored_ids(tmp_path, monkeypatch, template):
    db = tmp_path / "db.duckdb"
    ingest_paths(
        db, [write_jsonl(tmp_path / "a.jsonl", [_record(template, f"old-{i}", 0.0) for i in range(4)])], now=NOW
    )
    lookups = []
    real = store_module._stored_hashes
    monkeypatch.setattr(store_module, "_stored_hashes", lambda con, ids: lookups.append(len(ids)) or real(con, ids))
    fresh = ingest_paths(
        db, [write_jsonl(tmp_path / "b.jsonl", [_record(template, f"new-{i}", 0.0) for i in range(4)])], now=NOW
    )
    assert (fresh.accepted, lookups) == (4, [])


def test_file_with_a_stored_id_is_redone_once_with_lookups(tmp_path, monkeypatch, template):
    """The aborted first pass leaves nothing behind: no row, no quarantine row, no counts."""
    monkeypatch.setattr(ingest_module, "CHUNK_ROWS", 2)
    db = tmp_path / "db.duckdb"
    ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", [_record(template, "old", 0.0)])], now=NOW)
    passes = []
    real = ingest_module._FileIngest.run
    monkeypatch.setattr(
        ingest_module._FileIngest, "run", lambda self: passes.append(self.batch.look_up_stored) or real(self)
    )
    rows = [_record(template, "new-1", 0.0), _record(template, "new-2", 0.0), _record(template, "old", 0.5)]
    summary = ingest_paths(db, [write_jsonl(tmp_path / "b.jsonl", rows, raw_lines=["{not json"])], now=NOW)
    assert passes == [False, True]
    assert (summary.read, summary.accepted, summary.duplicates, summary.quarantined) == (4, 2, 0, 2)
    assert summary.quarantined_by_rule == {"duplicate_conflict": 1, "invalid_json": 1}
    con = open_store(db, read_only=True)
    try:
        assert con.execute("SELECT count(*) FROM quarantine").fetchone()[0] == 2
    finally:
        con.close()
    assert _stored(db) == {"old": 0.0, "new-1": 0.0, "new-2": 0.0}
