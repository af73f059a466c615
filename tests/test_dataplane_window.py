"""Weekly window cut (order, ties, idempotence, hash) and customer-hash splits."""

from __future__ import annotations

import copy
import hashlib
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane.ingest import ingest_paths
from dataplane.splits import customers_in_several_splits, split_counts, split_of, split_window
from dataplane.store import load_records, open_store
from dataplane.window import (
    arrow_window_hash,
    cut_window,
    week_id,
    window_frame,
    window_hash,
    window_ids,
    window_records,
)
from tests.helpers_data import BASE_TIME, NOW, build_records, write_jsonl

WEEK_END = datetime(2024, 6, 10, tzinfo=UTC)  # Monday: ends ISO week 2024-W23


@pytest.fixture()
def store(tmp_path, world, reference_tasks):
    records = build_records(world, reference_tasks, 40)
    # Two records share an ended_at with an earlier one: ties break by interaction_id.
    tie = copy.deepcopy(records[10])
    tie["interaction_id"] = "int-000010a"
    records.append(tie)
    offset = copy.deepcopy(records[11])  # same instant as record 11, written with another offset
    offset["interaction_id"] = "int-000011-tz"
    moment = datetime.fromisoformat(records[11]["ended_at"].replace("Z", "+00:00"))
    offset["ended_at"] = moment.astimezone(timezone(timedelta(hours=-7))).isoformat()
    records.append(offset)
    ingest_paths(tmp_path / "db.duckdb", [write_jsonl(tmp_path / "a.jsonl", records)], now=NOW)
    con = open_store(tmp_path / "db.duckdb")
    yield con, records
    con.close()


def _expected(records: list[dict], end: datetime, size: int) -> list[str]:
    def key(r):
        return (datetime.fromisoformat(r["ended_at"].replace("Z", "+00:00")), r["interaction_id"])

    kept = sorted((r for r in records if key(r)[0] < end), key=key)
    return [r["interaction_id"] for r in kept[-size:]]


def test_window_is_last_n_before_week_end_with_deterministic_ties(store):
    con, records = store
    end = BASE_TIME + timedelta(minutes=17 * 30)  # record 30 ends exactly here: excluded
    # 32 records end before `end`; 21 of them cuts between the two records tied at record 10's
    # ended_at, and the tie-break keeps the later id.
    info = cut_window(con, end, size=21)
    ids = window_ids(con, info.week)
    assert ids == _expected(records, end, 21)
    assert info.rows == 21
    assert ids[0] == "int-000010a" and "int-000010" not in ids
    assert ids.index("int-000011") + 1 == ids.index("int-000011-tz")
    assert info.ended_at_max < end.isoformat()


def test_recut_is_idempotent_and_hash_is_over_ordered_pairs(store):
    con, _ = store
    first = cut_window(con, WEEK_END, size=25)
    second = cut_window(con, WEEK_END, size=25)
    assert first == second
    assert con.execute("SELECT count(*) FROM windows WHERE week = ?", [first.week]).fetchone()[0] == 25
    pairs = con.execute(
        "SELECT interaction_id, content_hash FROM windows WHERE week = ? ORDER BY position", [first.week]
    ).fetchall()
    assert first.content_hash == hashlib.sha256("".join(f"{a}\t{b}\n" for a, b in pairs).encode()).hexdigest()
    smaller = cut_window(con, WEEK_END, size=5)  # a recut replaces the week's rows
    assert smaller.content_hash != first.content_hash
    assert len(window_ids(con, WEEK_END)) == 5


def test_window_info_metadata(store):
    con, records = store
    info = cut_window(con, WEEK_END, size=30)
    assert info.week == "2024-W23" == week_id(WEEK_END)
    assert sum(info.outcome_mix.values()) == sum(info.intent_mix.values()) == 30
    chosen = set(window_ids(con, info.week))
    assert info.intent_mix == {
        k: v
        for k, v in sorted(
            {
                i: sum(1 for r in records if r["interaction_id"] in chosen and r["intent"] == i)
                for i in {r["intent"] for r in records}
            }.items()
        )
        if v
    }
    assert info.to_dict()["rows"] == 30


def test_window_records_and_frame(store):
    con, _ = store
    info = cut_window(con, WEEK_END, size=8)
    full = window_records(con, info.week)
    assert [r["interaction_id"] for r in full] == window_ids(con, info.week)
    assert full == load_records(con, window_ids(con, info.week))
    frame = window_frame(con, info.week)
    assert list(frame["interaction_id"]) == window_ids(con, info.week)
    assert str(frame["ended_at"].dtype).startswith("datetime64")


def test_empty_window_and_naive_week_end(store):
    con, _ = store
    info = cut_window(con, datetime(2020, 1, 6, tzinfo=UTC))
    assert (info.rows, info.ended_at_min) == (0, None)
    with pytest.raises(ValueError, match="timezone-aware"):
        cut_window(con, datetime(2024, 6, 10))


def test_split_is_stable_and_proportional():
    customers = [f"user_{i}" for i in range(4000)]
    assignment = [split_of(c) for c in customers]
    assert assignment == [split_of(c) for c in customers]
    shares = {name: assignment.count(name) / len(customers) for name in ("train", "calibration", "shadow")}
    assert abs(shares["train"] - 0.8) < 0.03 and abs(shares["shadow"] - 0.1) < 0.02
    # The value depends on sha256 only: pinned so a change of algorithm or salt is noticed.
    digest = hashlib.sha256(b"agent-retrain/splits/v1\x00user_0").digest()
    point = int.from_bytes(digest[:8], "big") / 2**64
    assert split_of("user_0") == ("train" if point < 0.8 else "calibration" if point < 0.9 else "shadow")
    assert split_of("user_0", salt="other") in ("train", "calibration", "shadow")
    with pytest.raises(ValueError):
        split_of("user_0", fractions=(0.5, 0.5, 0.5))


def test_held_out_customer_never_in_any_weeks_train_split(store):
    con, _ = store
    held_out: set[str] = set()
    trained: set[str] = set()
    for size in (10, 25, 42):
        splits = split_window(window_records(con, cut_window(con, WEEK_END, size=size).week))
        assert customers_in_several_splits(splits) == {}
        held_out |= {r["customer_id"] for name in ("calibration", "shadow") for r in splits[name]}
        trained |= {r["customer_id"] for r in splits["train"]}
        assert sum(v for k, v in split_counts(splits).items() if k.endswith("_rows")) == size
    assert not held_out & trained


def test_overlap_check_reports_customers():
    fake = {"train": [{"customer_id": "a"}, {"customer_id": "b"}], "calibration": [{"customer_id": "a"}], "shadow": []}
    assert customers_in_several_splits(fake) == {"a": ["calibration", "train"]}


def _stored(con, week: str) -> list[tuple]:
    """The week's stored rows with their rowids: a rewrite gives new rowids."""
    return con.execute(
        "SELECT rowid, position, interaction_id, content_hash, window_hash, week_end FROM windows "
        "WHERE week = ? ORDER BY position",
        [week],
    ).fetchall()


def test_recut_of_an_unchanged_week_skips_the_write_yet_returns_the_same_info(store):
    con, _ = store
    first = cut_window(con, WEEK_END, size=25)
    before = _stored(con, first.week)
    again = cut_window(con, WEEK_END, size=25)
    assert again == first
    assert _stored(con, first.week) == before  # same rowids: nothing was deleted or inserted


def test_recut_of_a_changed_week_rewrites_it(store, tmp_path, world, reference_tasks):
    con, records = store
    first = cut_window(con, WEEK_END, size=25)
    before = _stored(con, first.week)
    # Same week id, another week_end (still after every record): same rows, but week_end is stored.
    earlier_end = WEEK_END - timedelta(hours=20)
    moved = cut_window(con, earlier_end, size=25)
    assert (moved.week, moved.content_hash) == (first.week, first.content_hash)
    stored = _stored(con, first.week)
    assert {row[5] for row in stored} == {earlier_end}
    assert [row[1:5] for row in stored] == [row[1:5] for row in before]
    # A newer record arrives: the week's window changes and is rewritten.
    con.close()
    newer = build_records(world, reference_tasks, 1, start=500)[0]
    newer["interaction_id"] = "int-newer"
    newer["ended_at"] = (WEEK_END - timedelta(days=1)).isoformat().replace("+00:00", "Z")
    newer["started_at"] = (WEEK_END - timedelta(days=1, minutes=5)).isoformat().replace("+00:00", "Z")
    ingest_paths(tmp_path / "db.duckdb", [write_jsonl(tmp_path / "b.jsonl", [newer])], now=NOW)
    con = open_store(tmp_path / "db.duckdb")
    try:
        changed = cut_window(con, WEEK_END, size=25)
        assert changed.content_hash != first.content_hash
        ids = window_ids(con, WEEK_END)
        assert ids[-1] == "int-newer" and ids[:-1] == [row[2] for row in before][1:]  # the oldest drops out
        pairs = con.execute(
            "SELECT interaction_id, content_hash FROM windows WHERE week = ? ORDER BY position", [changed.week]
        ).fetchall()
        assert changed.content_hash == window_hash(pairs)
    finally:
        con.close()


def test_cut_shrinking_to_empty_clears_the_week(store):
    con, _ = store
    end = BASE_TIME + timedelta(minutes=1)  # only record 0 ends before it
    week = cut_window(con, end, size=5).week
    assert len(window_ids(con, week)) == 1
    # Another week_end of the same ISO week that precedes every record: the window is empty.
    empty = cut_window(con, BASE_TIME - timedelta(minutes=1), size=5)
    assert empty.week == week and empty.rows == 0
    assert window_ids(con, week) == []
    assert cut_window(con, BASE_TIME - timedelta(minutes=1), size=5) == empty


pair_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(pair_text, pair_text), max_size=30), st.integers(0, 5), st.booleans())
def test_arrow_window_hash_equals_window_hash(pairs, start, large):
    kind = pa.large_string() if large else pa.string()
    ids = pa.array([a for a, _ in pairs], kind)
    contents = pa.array([b for _, b in pairs], kind)
    assert arrow_window_hash(ids, contents) == window_hash(pairs)
    # A slice (non-zero offset into shared buffers) and a chunked column hash the same pairs.
    assert arrow_window_hash(ids[start:], contents[start:]) == window_hash(pairs[start:])
    half = len(pairs) // 2
    chunked_ids = pa.chunked_array([ids[:half], ids[half:]], kind)
    chunked_contents = pa.chunked_array([contents[:half], contents[half:]], kind)
    assert arrow_window_hash(chunked_ids, chunked_contents) == window_hash(pairs)


def test_arrow_window_hash_refuses_nulls():
    with pytest.raises(ValueError, match="null"):
        arrow_window_hash(pa.array(["a", None]), pa.array(["x", "y"]))
