"""Ingest loses nothing good and admits nothing huge; landing reads regular files only.

Each test drives the public ingest (`ingest_paths`, `ingest_landed`, or `retrain ingest` itself)
against a real DuckDB file, and fails if its fix is taken out: links, FIFOs and sockets refused
unread (`not_a_regular_file`); a line that is not UTF-8 spoils only itself (`invalid_utf8`); an
integer out of the 64-bit range is refused at any depth (`number_too_large`); one byte cap per
record for JSON Lines and Parquet alike (`line_too_long`), a Parquet row measured before it becomes
Python objects; the quarantine rows of a half-written read superseded by the complete one; records
older than the age horizon refused (`too_old`).
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import socket
import subprocess
import sys
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dataplane import parquet_rows
from dataplane.ingest import ingest_file, ingest_paths, landing_entries
from dataplane.ingest_settings import IngestSettings
from dataplane.landing import ingest_landed, ingested_since
from dataplane.store import open_store
from dataplane.window import cut_window
from tests.helpers_data import NOW, build_records, record_from_task, write_jsonl

JSON_TEXT = ("initial_state", "user_scenario", "messages", "gold", "human_label")
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def records(world, reference_tasks) -> list[dict]:
    return build_records(world, reference_tasks, 10)


def _query(db: Path, sql: str, params: list | None = None) -> list[tuple]:
    con = open_store(db, read_only=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


def _stored_ids(db: Path) -> set[str]:
    return {r[0] for r in _query(db, "SELECT interaction_id FROM interactions")}


def _cli(home: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """`retrain ingest ARGS`; a FIFO opened for reading would hang it, hence the timeout."""
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "ingest", *args],
        capture_output=True,
        text=True,
        env={**os.environ, "RETRAIN_HOME": str(home)},
        timeout=timeout,
    )


# --- 1. landing reads regular files inside the landing root only ---------------------------------


def _hostile_landing(tmp_path: Path, records: list[dict]) -> tuple[Path, dict[str, Path], Path]:
    """A landing folder with one good file and every kind of entry that must not be read, the
    links leading to valid records outside it (which must never be stored)."""
    outside = tmp_path / "outside"
    write_jsonl(outside / "secret.jsonl", records[5:7])
    write_jsonl(outside / "dir" / "more.jsonl", records[7:9])
    landing = tmp_path / "landing"
    good = write_jsonl(landing / "good.jsonl", records[:2])
    refused = {
        "file link": landing / "link.jsonl",
        "folder link": landing / "sub" / "mirror",
        "dangling link": landing / "gone.jsonl",
        "fifo": landing / "pipe.jsonl",
        "socket": landing / "sock.jsonl",
    }
    refused["folder link"].parent.mkdir(parents=True)
    refused["file link"].symlink_to(outside / "secret.jsonl")
    refused["folder link"].symlink_to(outside / "dir", target_is_directory=True)
    refused["dangling link"].symlink_to(outside / "nothing.jsonl")
    os.mkfifo(refused["fifo"])
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(refused["socket"]))
    server.close()  # the socket file stays on disk
    return landing, refused, good


def test_cli_refuses_links_fifos_and_sockets_in_landing_and_reads_none(tmp_path, records):
    landing, refused, good = _hostile_landing(tmp_path, records)
    done = _cli(tmp_path / "home", str(landing), "--json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    summary = json.loads(done.stdout)
    assert summary["accepted"] == 2
    assert summary["quarantined_by_rule"] == {"not_a_regular_file": len(refused)}
    by_path = {item["path"]: item for item in summary["per_file"]}
    for path in refused.values():
        assert by_path[str(path)]["quarantined_by_rule"] == {"not_a_regular_file": 1}
    db = tmp_path / "home" / "interactions.duckdb"
    assert _stored_ids(db) == {r["interaction_id"] for r in records[:2]}  # nothing from outside
    rows = _query(db, "SELECT source_file, rule, detail, file_level FROM quarantine ORDER BY source_file")
    assert sorted(r[0] for r in rows) == sorted(str(p) for p in refused.values())
    assert {r[1] for r in rows} == {"not_a_regular_file"} and all(r[3] for r in rows)
    details = {r[0]: r[2] for r in rows}
    assert "a symbolic link to" in details[str(refused["file link"])]
    assert "a FIFO" in details[str(refused["fifo"])] and "a socket" in details[str(refused["socket"])]

    again = _cli(tmp_path / "home", str(landing))  # the plain summary; every entry is known now
    assert again.returncode == 0, again.stderr
    assert "quarantined 0" in again.stdout


def test_plain_cli_output_names_each_refused_path(tmp_path, records):
    landing, refused, _good = _hostile_landing(tmp_path, records)
    done = _cli(tmp_path / "home", str(landing))
    assert done.returncode == 0, done.stderr
    assert f"quarantined not_a_regular_file: {len(refused)}" in done.stdout
    for path in refused.values():
        assert f"file {path}: not_a_regular_file" in done.stdout


def test_cli_refuses_a_link_or_fifo_named_directly(tmp_path, records):
    target = write_jsonl(tmp_path / "real.jsonl", records[:2])
    link = tmp_path / "given" / "link.jsonl"
    link.parent.mkdir()
    link.symlink_to(target)
    fifo = tmp_path / "given" / "pipe.jsonl"
    os.mkfifo(fifo)
    done = _cli(tmp_path / "home", str(link), str(fifo), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["accepted"], summary["quarantined_by_rule"]) == (0, {"not_a_regular_file": 2})
    assert _stored_ids(tmp_path / "home" / "interactions.duckdb") == set()


def test_landing_sensor_refuses_once_and_reads_nothing(tmp_path, records):
    landing, refused, good = _hostile_landing(tmp_path, records)
    db = tmp_path / "db.duckdb"
    first = ingest_landed(db, landing, now=NOW)
    assert first.summary.accepted == 2
    assert first.summary.quarantined_by_rule == {"not_a_regular_file": len(refused)}
    assert ingest_landed(db, landing, now=NOW).files == []  # remembered, not reported every tick
    assert _stored_ids(db) == {r["interaction_id"] for r in records[:2]}


def test_a_folder_swapped_for_a_link_after_listing_is_refused(tmp_path, records):
    # Between the listing and the open, a folder inside landing is replaced by a link to one
    # outside holding a file of the same name: the path now resolves outside the landing root.
    landing = tmp_path / "landing"
    write_jsonl(landing / "day" / "a.jsonl", records[:2])
    write_jsonl(tmp_path / "outside" / "a.jsonl", records[2:4])
    [entry] = landing_entries([landing])
    (landing / "day").rename(tmp_path / "moved")
    (landing / "day").symlink_to(tmp_path / "outside", target_is_directory=True)
    con = open_store(tmp_path / "db.duckdb")
    try:
        result = ingest_file(con, entry.path, NOW, root=entry.root)
        [(detail,)] = con.execute("SELECT detail FROM quarantine").fetchall()
    finally:
        con.close()
    assert (result.status, result.quarantined_by_rule) == ("quarantined", {"not_a_regular_file": 1})
    assert "outside" in detail
    assert _stored_ids(tmp_path / "db.duckdb") == set()


# --- 2. one line that is not UTF-8 spoils only itself --------------------------------------------


@pytest.mark.parametrize("gzipped", [False, True])
def test_invalid_utf8_quarantines_its_line_only(tmp_path, records, gzipped):
    lines = [json.dumps(r).encode() for r in records[:3]]
    bad = json.dumps(records[3]).encode().replace(b'"content": "', b'"content": "\xff\xfe', 1)
    blob = b"\n".join([lines[0], bad, lines[1], lines[2]]) + b"\n"
    path = tmp_path / ("a.jsonl.gz" if gzipped else "a.jsonl")
    path.write_bytes(gzip.compress(blob) if gzipped else blob)
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [path], now=NOW)
    assert (summary.read, summary.accepted, summary.quarantined) == (4, 3, 1)
    assert summary.quarantined_by_rule == {"invalid_utf8": 1}
    [(line_no, rid, raw, detail, file_level)] = _query(
        db, "SELECT line_no, interaction_id, raw, detail, file_level FROM quarantine"
    )
    assert (line_no, rid, file_level) == (2, records[3]["interaction_id"], False)
    assert "\ufffd\ufffdYou are" in raw and "byte 0xff" in detail  # the bad bytes marked and named
    assert _stored_ids(db) == {r["interaction_id"] for r in records[:3]}


# --- 3. integers are range-checked at every depth ------------------------------------------------


def _nested(record: dict, value: int) -> dict:
    out = copy.deepcopy(record)
    [uid] = out["initial_state"]["users"]
    out["initial_state"]["users"][uid]["loyalty"] = {"points": [1, {"balance": value}]}
    return out


@pytest.mark.parametrize(
    "value,rule", [(2**64 + 1, "number_too_large"), (-(2**63) - 1, "number_too_large"), (2**63 - 1, None)]
)
def test_a_nested_integer_out_of_int64_is_refused(tmp_path, records, value, rule):
    path = write_jsonl(tmp_path / "a.jsonl", [_nested(records[0], value), records[1]])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    if rule is None:
        assert (summary.accepted, summary.quarantined) == (2, 0)
    else:
        assert (summary.accepted, summary.quarantined_by_rule) == (1, {rule: 1})
        [(detail,)] = _query(tmp_path / "db.duckdb", "SELECT detail FROM quarantine")
        assert str(value) in detail


def test_a_nested_int_in_tool_call_arguments_text_is_refused(tmp_path, records):
    bad = copy.deepcopy(records[0])
    call = next(m for m in bad["messages"] if m.get("tool_calls"))["tool_calls"][0]
    call["arguments"] = json.dumps({"n": [2**70]})  # OpenAI-style: arguments as JSON text
    summary = ingest_paths(tmp_path / "db.duckdb", [write_jsonl(tmp_path / "a.jsonl", [bad])], now=NOW)
    assert summary.quarantined_by_rule == {"number_too_large": 1}


def test_a_parquet_uint64_beyond_int64_is_refused_at_any_depth(tmp_path, records):
    rows = records[:2]
    table = {key: [r[key] for r in rows] for key in rows[0] if key != "user_scenario"}
    for key in JSON_TEXT:
        if key in table:
            table[key] = [None if v is None else json.dumps(v) for v in table[key]]
    scenario = pa.struct(
        [("instruction", pa.string()), ("persona", pa.string()), ("known_info", pa.struct([("n", pa.uint64())]))]
    )
    table["user_scenario"] = pa.array(
        [{"instruction": "i", "persona": "p", "known_info": {"n": n}} for n in (2**64 - 1, 7)], scenario
    )
    pq.write_table(pa.table(table), tmp_path / "a.parquet")
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet"], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"number_too_large": 1})


# --- 4. one byte cap per record, for every format ------------------------------------------------


def test_an_oversized_jsonl_line_is_quarantined_alone(tmp_path, records):
    huge = copy.deepcopy(records[1])
    huge["messages"][1]["content"] = "x" * (MIB + 10)
    path = write_jsonl(tmp_path / "a.jsonl", [records[0], huge, records[2]])
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [path], now=NOW)
    assert (summary.read, summary.accepted, summary.quarantined_by_rule) == (3, 2, {"line_too_long": 1})
    [(line_no, rid, raw)] = _query(db, "SELECT line_no, interaction_id, raw FROM quarantine")
    assert (line_no, rid) == (2, records[1]["interaction_id"]) and len(raw) < 5000  # the head of the line
    assert _stored_ids(db) == {records[0]["interaction_id"], records[2]["interaction_id"]}


def test_the_cap_is_one_setting_for_jsonl_and_parquet(tmp_path, records):
    # A cap below one reference record refuses it in both formats; the default takes it.
    small = IngestSettings(max_record_bytes=2048)
    write_jsonl(tmp_path / "in" / "a.jsonl", records[:2])
    _parquet(tmp_path / "in" / "b.parquet", [records[2:4]])
    capped = ingest_paths(tmp_path / "capped.duckdb", [tmp_path / "in"], now=NOW, settings=small)
    assert (capped.accepted, capped.quarantined_by_rule) == (0, {"line_too_long": 4})
    plain = ingest_paths(tmp_path / "plain.duckdb", [tmp_path / "in"], now=NOW)
    assert (plain.accepted, plain.quarantined) == (4, 0)


def _parquet(path: Path, groups: list[list[dict]], **options) -> Path:
    """`groups` of records as JSON-text columns, each group its own row group."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [r for group in groups for r in group]
    columns = {key: [r.get(key) for r in rows] for key in rows[0]}
    for key in JSON_TEXT:
        columns[key] = [None if v is None else (v if isinstance(v, str) else json.dumps(v)) for v in columns[key]]
    table = pa.table(columns)
    with pq.ParquetWriter(path, table.schema, compression="zstd", **options) as writer:
        start = 0
        for group in groups:  # one write per group: each its own row group
            writer.write_table(table.slice(start, len(group)))
            start += len(group)
    return path


def _warm_up(tmp_path: Path, records: list[dict]) -> None:
    """One small Parquet ingest first, so that what a first ingest imports and caches is not
    counted as the file's memory."""
    ingest_paths(tmp_path / "warm.duckdb", [_parquet(tmp_path / "warm" / "w.parquet", [records[:2]])], now=NOW)


def _inflating(record: dict, size: int) -> dict:
    """`record` whose messages column, as JSON text, inflates to about `size` bytes (it zstd-
    compresses to almost nothing)."""
    messages = copy.deepcopy(record["messages"])
    messages[1]["content"] = "x" * size
    return {**record, "messages": json.dumps(messages)}


@pytest.mark.parametrize("layout", ["refused-on-metadata", "measured-in-arrow", "measured-through-duckdb"])
def test_a_parquet_row_that_inflates_is_refused_before_it_is_python(tmp_path, records, layout, monkeypatch):
    big = _inflating(records[1], 48 * MIB)
    own_row_group = layout == "refused-on-metadata"
    groups = [[records[0]], [big], [records[2]]] if own_row_group else [[records[0], big, records[2]]]
    if layout == "measured-through-duckdb":  # a row group over the Arrow batch budget
        monkeypatch.setattr(parquet_rows, "PARQUET_BATCH_BYTES", 16 * MIB)
    path = _parquet(tmp_path / "a.parquet", groups)
    assert path.stat().st_size < MIB  # small on disk
    db = tmp_path / "db.duckdb"
    _warm_up(tmp_path, records)
    tracemalloc.start()
    try:
        summary = ingest_paths(db, [path], now=NOW)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # No Python string of the row was made: the Python heap never held a sixth of it.
    assert peak < 8 * MIB, peak
    assert (summary.read, summary.accepted, summary.quarantined_by_rule) == (3, 2, {"line_too_long": 1})
    [(line_no, rid, raw, detail)] = _query(db, "SELECT line_no, interaction_id, raw, detail FROM quarantine")
    assert (line_no, rid) == (2, records[1]["interaction_id"])
    assert json.loads(raw)["interaction_id"] == records[1]["interaction_id"] and len(raw) < 8192
    assert "over the cap" in detail
    assert _stored_ids(db) == {records[0]["interaction_id"], records[2]["interaction_id"]}


def test_a_large_row_group_read_through_duckdb_stores_what_pyarrow_would(tmp_path, records, monkeypatch):
    # The two readers of a row group must agree on every value, aware timestamps included.
    rows = [dict(r) for r in records[:6]]
    path = _parquet(tmp_path / "a.parquet", [rows[:3], rows[3:]])
    table = pq.read_table(path)
    for key in ("started_at", "ended_at"):
        instants = [datetime.fromisoformat(v.replace("Z", "+00:00")) for v in table.column(key).to_pylist()]
        index = table.schema.get_field_index(key)
        table = table.set_column(index, key, pa.array(instants, pa.timestamp("us", "UTC")))
    pq.write_table(table, path, row_group_size=3)
    plain = ingest_paths(tmp_path / "plain.duckdb", [path], now=NOW)
    monkeypatch.setattr(parquet_rows, "PARQUET_BATCH_BYTES", 1024)  # every row group is "large"
    through = ingest_paths(tmp_path / "duck.duckdb", [path], now=NOW)
    assert plain.accepted == through.accepted == 6
    hashes = "SELECT interaction_id, content_hash, started_at FROM interactions ORDER BY interaction_id"
    assert _query(tmp_path / "plain.duckdb", hashes) == _query(tmp_path / "duck.duckdb", hashes)


@pytest.mark.parametrize("reader", ["arrow", "duckdb"])
def test_a_dictionary_value_shared_by_many_rows_is_not_expanded_per_row(tmp_path, records, reader, monkeypatch):
    # 400 rows point at one 2 MiB dictionary value: expanded row by row that is 800 MiB of text.
    if reader == "duckdb":
        monkeypatch.setattr(parquet_rows, "PARQUET_BATCH_BYTES", MIB)
    shared = _inflating(records[0], 2 * MIB)["messages"]
    rows = [{**records[i % 10], "interaction_id": f"bomb-{i}", "messages": shared} for i in range(400)]
    path = _parquet(tmp_path / "a.parquet", [rows], dictionary_pagesize_limit=8 * MIB)
    meta = pq.ParquetFile(path).metadata.row_group(0)
    assert any(meta.column(j).has_dictionary_page for j in range(meta.num_columns))
    _warm_up(tmp_path, records)
    tracemalloc.start()
    try:
        summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
        _now, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert summary.quarantined_by_rule == {"line_too_long": 400}
    assert peak < 16 * MIB, peak


# --- 5. a complete read supersedes the quarantine rows of a half-written one -----------------------


def test_a_file_read_half_written_then_whole_supersedes_its_stale_quarantine(tmp_path, records):
    landing = tmp_path / "landing"
    full = "".join(json.dumps(r) + "\n" for r in records[:5])
    cut = full.index(json.dumps(records[3])) + 200  # the writer is in the middle of line 4
    path = landing / "a.jsonl"
    landing.mkdir()
    path.write_text(full[:cut])
    db = tmp_path / "db.duckdb"
    first = ingest_landed(db, landing, now=NOW)
    assert (first.summary.accepted, first.summary.quarantined_by_rule) == (3, {"invalid_json": 1})

    path.write_text(full)  # the writer finished
    second = ingest_landed(db, landing, now=NOW)
    assert (second.summary.accepted, second.summary.duplicates, second.summary.quarantined) == (2, 3, 0)
    assert second.summary.superseded == 1
    [(rule, by)] = _query(db, "SELECT rule, superseded_by FROM quarantine")
    [(sha,)] = _query(db, "SELECT sha256 FROM ingested_files WHERE size = ?", [len(full.encode())])
    assert (rule, by) == ("invalid_json", sha)
    con = open_store(db, read_only=True)
    try:
        recent = ingested_since(con, NOW - timedelta(days=1))
    finally:
        con.close()
    assert (recent["quarantined"], recent["superseded"]) == (0, 1)  # no longer reads as data loss


def test_the_cli_summary_shows_superseded_rows(tmp_path, records):
    path = tmp_path / "in" / "a.jsonl"
    path.parent.mkdir()
    text = json.dumps(records[0]) + "\n" + json.dumps(records[1])
    path.write_text(text[:-30])
    assert _cli(tmp_path / "home", str(path)).returncode == 0
    path.write_text(text + "\n")
    done = _cli(tmp_path / "home", str(path))
    assert done.returncode == 0, done.stderr
    assert "superseded 1 quarantine row(s)" in done.stdout


def test_a_rewritten_file_does_not_supersede_what_its_earlier_version_lost(tmp_path, records):
    # Not a prefix: the earlier version's bad line is gone from the file, not read again.
    path = write_jsonl(tmp_path / "a.jsonl", [records[0]], ["{broken"])
    db = tmp_path / "db.duckdb"
    ingest_paths(db, [path], now=NOW)
    write_jsonl(path, records[1:4])
    again = ingest_paths(db, [path], now=NOW)
    assert (again.accepted, again.superseded) == (3, 0)
    assert _query(db, "SELECT rule, superseded_by FROM quarantine") == [("invalid_json", None)]


# --- 6. records older than the horizon never reach a window --------------------------------------


def _at(world, reference_tasks, index: int, ended: datetime) -> dict:
    return record_from_task(world, reference_tasks[index % len(reference_tasks)], 100 + index, ended_at=ended)


@pytest.mark.parametrize("first", [True, False], ids=["old-rows-first", "old-rows-last"])
def test_clock_reset_timestamps_are_too_old_even_in_an_empty_store(tmp_path, world, reference_tasks, records, first):
    epoch = _at(world, reference_tasks, 1, datetime(1970, 1, 1, 0, 5, tzinfo=UTC))
    year_one = _at(world, reference_tasks, 2, datetime(1, 1, 1, 0, 5, tzinfo=UTC))
    good = records[:3]
    path = write_jsonl(tmp_path / "a.jsonl", [epoch, year_one, *good] if first else [*good, epoch, year_one])
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [path], now=NOW)
    assert (summary.read, summary.accepted, summary.quarantined_by_rule) == (5, 3, {"too_old": 2})
    lines = sorted(r[0] for r in _query(db, "SELECT line_no FROM quarantine WHERE rule = 'too_old'"))
    assert lines == ([1, 2] if first else [4, 5])
    assert _stored_ids(db) == {r["interaction_id"] for r in good}
    con = open_store(db)
    try:
        info = cut_window(con, NOW, size=100)
    finally:
        con.close()
    assert info.rows == 3 and info.ended_at_min.startswith("2024-")


def test_the_horizon_counts_from_the_newest_stored_row(tmp_path, world, reference_tasks, records):
    db = tmp_path / "db.duckdb"
    ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", records[:2])], now=NOW)
    newest = max(datetime.fromisoformat(r["ended_at"]) for r in records[:2])
    inside = _at(world, reference_tasks, 3, newest - timedelta(days=700))
    outside = _at(world, reference_tasks, 4, newest - timedelta(days=740))
    summary = ingest_paths(db, [write_jsonl(tmp_path / "b.jsonl", [inside, outside])], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"too_old": 1})
    [(rid, detail)] = _query(db, "SELECT interaction_id, detail FROM quarantine")
    assert rid == outside["interaction_id"] and "730 days" in detail


def test_the_horizon_is_a_setting_the_cli_takes(tmp_path, world, reference_tasks, records):
    path = write_jsonl(
        tmp_path / "a.jsonl", [records[0], _at(world, reference_tasks, 1, datetime(1990, 1, 1, tzinfo=UTC))]
    )
    wide = _cli(tmp_path / "wide", str(path), "--json", "--max-age-days", "20000")
    assert wide.returncode == 0, wide.stderr
    assert json.loads(wide.stdout)["accepted"] == 2
    narrow = _cli(tmp_path / "narrow", str(path), "--json")
    assert json.loads(narrow.stdout)["quarantined_by_rule"] == {"too_old": 1}
    bad = _cli(tmp_path / "bad", str(path), "--max-age-days", "0")
    assert bad.returncode == 2 and "max_age_days" in bad.stderr
