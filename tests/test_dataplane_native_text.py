"""The stored text written by orjson (`rowtext._native_text`) is the json module's, byte for byte,
or is not used: every record hashes alike whichever encoder wrote it.

Properties over generated JSON values (floats of every size, NaN and infinities, all of Unicode,
integers past 64 bits, nested nulls) and the cases that take the slow path on purpose; then
ingestion: records read from JSON Lines and plain Parquet take the fast path and store what the
slow path stores; a Parquet column of a type orjson would write where json refuses (a UUID) keeps
its records on the slow path and its rule.
"""

from __future__ import annotations

import math
import random
import struct
import uuid

import pyarrow as pa
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dataplane import rowtext
from dataplane.contract import ContractError, validate_record
from dataplane.ingest import ingest_paths
from dataplane.store import open_store, prepare_row
from tests.helpers_data import NOW, build_records, count_slow_encodes, write_jsonl, write_parquet

_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.floats(min_value=-1e-3, max_value=1e-3)  # where the two spell floats differently
    | st.text()
)
_values = st.recursive(
    _leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)
_records = st.dictionaries(st.text(max_size=8), _values, max_size=6)


def _python_text(record: dict) -> str | None:
    """What the slow path stores for `record`, or None where it refuses it."""
    try:
        text = rowtext._encode(record)
        rowtext._require_utf8(text)
    except ContractError:
        return None
    return text


@settings(max_examples=3000, deadline=None)
@given(_records)
@example({"x": 1e-05})
@example({"x": [3e-07]})
@example({"x": {"y": math.nan}})
@example({"x": [math.inf]})
@example({"x": -math.inf, "y": None})
@example({"x": "\ud800"})
@example({"x": 2**64})
def test_native_text_is_the_json_modules_or_nothing(record):
    fast = rowtext._native_text(record)
    if fast is not None:
        assert fast == _python_text(record)


def test_every_float_is_written_alike_or_sent_to_the_slow_path():
    # Every binary exponent with mantissas at both ends, decimal literals of every power of ten,
    # and random bit patterns: orjson's spelling of a finite float is json's unless its text
    # shows one of the two forms `_native_text` sends to the slow path.
    rng = random.Random(5)
    floats = [math.ldexp(m, e) for e in range(-1074, 972) for m in (1.0, 1.5, 1.9999999999999998)]
    floats += [float(f"{m}e{e}") for e in range(-323, 308) for m in ("1", "2.5", "9.999999999999999")]
    floats += [struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0] for _ in range(100_000)]
    checked = 0
    for value in floats:
        if math.isfinite(value):
            for v in (value, -value):
                fast = rowtext._native_text({"x": v})
                assert fast is None or fast == _python_text({"x": v}), v
                checked += fast is not None
    assert checked > len(floats)  # most floats take the fast path


@pytest.mark.parametrize(
    "record",
    [
        {"x": 1e-05},  # json "1e-05", orjson "0.00001"
        {"x": [3e-07]},  # json "3e-07", orjson "3e-7"
        {"a": None, "x": {"y": math.nan}},  # orjson writes NaN as null; json refuses it
        {"x": [math.inf]},
        {"x": 2**64},  # past orjson's integers
        {"x": b"bytes"},
        {"x": {1: "a non-text key"}},
    ],
)
def test_what_orjson_would_write_otherwise_takes_the_slow_path(record):
    # (A UUID or an Enum, which orjson writes and json refuses, is kept out by the caller: only a
    # record of JSON-native values is handed over, see the UUID column below.)
    assert rowtext._native_text(record) is None


def test_a_top_level_null_and_ordinary_floats_take_the_fast_path():
    record = {"b": None, "a": [0.1, 1e-4, 1e16, -0.0, 12.5], "c": 'é\u2028\x00"\\'}
    assert rowtext._native_text(record) == _python_text(record)


def test_a_str_subclass_is_written_as_json_writes_it():
    class Text(str):
        pass

    record = {"x": Text("abc"), Text("k"): 1}
    assert rowtext._native_text(record) in (None, _python_text(record))


@pytest.fixture(scope="module")
def records(world, reference_tasks) -> list[dict]:
    return build_records(world, reference_tasks, 8)


def _stored(db) -> list[tuple]:
    con = open_store(db, read_only=True)
    try:
        return con.execute("SELECT interaction_id, record, content_hash FROM interactions ORDER BY 1").fetchall()
    finally:
        con.close()


def _with_column(name: str, array: pa.Array):
    return lambda table: table.set_column(table.schema.get_field_index(name), name, array)


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_ingest_stores_what_the_slow_path_stores(tmp_path, records, monkeypatch, fmt):
    path = tmp_path / f"day.{fmt}"
    if fmt == "jsonl":
        write_jsonl(path, records)
    else:
        write_parquet(path, records)
    slow_calls = count_slow_encodes(monkeypatch)
    fast = ingest_paths(tmp_path / "fast.duckdb", [path], now=NOW)
    assert fast.accepted == len(records) and slow_calls == [0]  # every record took the fast path
    monkeypatch.setattr(rowtext, "_native_text", lambda record: None)
    slow = ingest_paths(tmp_path / "slow.duckdb", [path], now=NOW)
    assert slow.accepted == len(records) and slow_calls == [len(records)]
    assert _stored(tmp_path / "fast.duckdb") == _stored(tmp_path / "slow.duckdb")


def test_a_nested_uuid_column_keeps_its_records_on_the_slow_path(tmp_path, records):
    # `user_scenario` as an Arrow struct whose `known_info` holds a UUID: orjson would write the
    # UUID as text; json refuses it, and the record is quarantined as before.
    n = len(records)
    scenarios = pa.StructArray.from_arrays(
        [
            pa.array([r["user_scenario"]["instruction"] for r in records]),
            pa.StructArray.from_arrays([pa.array([uuid.UUID(int=i).bytes for i in range(n)], pa.uuid())], ["order"]),
            pa.array(["terse"] * n),
        ],
        ["instruction", "known_info", "persona"],
    )
    path = tmp_path / "day.parquet"
    write_parquet(path, records, _with_column("user_scenario", scenarios))
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (0, {"wrong_type": n})


def test_prepare_row_without_the_flag_never_uses_orjson(records, monkeypatch):
    monkeypatch.setattr(rowtext, "_native_text", lambda record: pytest.fail("the fast path was taken"))
    valid = validate_record(records[0], NOW)
    assert prepare_row(valid).content_hash == prepare_row(valid).content_hash
