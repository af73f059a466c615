"""Frozen calibration versions, per-week shadow sets, and the proof that neither is trained on."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from dataplane.ingest import ingest_paths
from dataplane.splits import split_of, split_window
from dataplane.store import open_store
from dataplane.window import cut_window, window_ids
from evaluation.eval_sets import (
    CalibrationSet,
    EvalSetError,
    ShadowSet,
    TrainingLeakError,
    assert_disjoint_from_training,
    build_shadow_set,
    calibration_eligible,
    calibration_set,
    calibration_versions,
    current_calibration_set,
    freeze_calibration_set,
    select_shadow,
    shadow_counts,
    shadow_set,
)
from tests.helpers_gates import make_record

N = 600
# make_record(n) ends at minute n of 2025-01-01, so every record of the store below ended before this.
AFTER_ALL = datetime(2025, 1, 2, tzinfo=UTC)


def _ingested(tmp_path, records: list[dict]):
    """A real store at tmp_path holding `records`, ingested from a landing file."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "batch.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    summary = ingest_paths(tmp_path / "db.duckdb", [landing])
    assert summary.accepted == len(records)
    return open_store(tmp_path / "db.duckdb")


@pytest.fixture()
def store(tmp_path):
    """A store with N ingested interactions; every third one lacks gold, every fifth a label."""
    records = [make_record(i, gold=i % 3 != 0, label=None if i % 5 == 0 else i % 2 == 0) for i in range(N)]
    con = _ingested(tmp_path, records)
    yield con, records
    con.close()


def test_calibration_set_holds_only_gold_calibration_records_labelled_or_not(store):
    con, records = store
    eligible = calibration_eligible(records)
    assert eligible and len(eligible) < len(records)
    cal = freeze_calibration_set(con, eligible)
    assert cal.created and cal.version == "v1" and cal.rows == len(eligible)
    for record in cal.records(con):
        assert split_of(record["customer_id"]) == "calibration" and record["gold"]
    # Every eligible record made it in, with a label or without (labels never choose the set).
    expected = {r["interaction_id"] for r in records if split_of(r["customer_id"]) == "calibration" and r["gold"]}
    assert set(cal.interaction_ids) == expected
    assert any(r["human_label"] is None for r in cal.records(con))


@pytest.mark.parametrize(
    "change, rule",
    [
        (lambda r: {**r, "gold": None}, "no_gold"),
        (lambda r: {**r, "domain": "servicedesk"}, "wrong_domain"),
    ],
)
def test_freeze_refuses_an_ineligible_record_naming_it(store, change, rule):
    con, records = store
    eligible = calibration_eligible(records)
    bad = change(eligible[3])
    with pytest.raises(EvalSetError) as err:
        freeze_calibration_set(con, [*eligible[:3], bad])
    assert err.value.rule == rule and err.value.record_id == bad["interaction_id"]
    assert current_calibration_set(con) is None


def test_freeze_refuses_other_splits(store):
    con, records = store
    train = next(r for r in records if split_of(r["customer_id"]) == "train" and r["gold"] and r["human_label"])
    with pytest.raises(EvalSetError) as err:
        freeze_calibration_set(con, [train])
    assert err.value.rule == "not_calibration_split"


def test_calibration_set_is_built_once_and_never_overwritten(store):
    con, records = store
    eligible = calibration_eligible(records)
    first = freeze_calibration_set(con, eligible[:10])
    # The weekly job calls freeze every week with new records: it gets the frozen version back.
    again = freeze_calibration_set(con, eligible)
    assert not again.created and again.interaction_ids == first.interaction_ids
    assert again.set_hash == first.set_hash
    with pytest.raises(EvalSetError) as err:
        freeze_calibration_set(con, eligible, version="v1")
    assert err.value.rule == "frozen_version_exists"
    with pytest.raises(EvalSetError) as err:
        freeze_calibration_set(con, eligible, version="v2")
    assert err.value.rule == "new_version_needs_force"
    assert calibration_versions(con) == ["v1"]
    # Re-freezing v1 with the same content is a no-op, not an error.
    assert freeze_calibration_set(con, eligible[:10], version="v1").set_hash == first.set_hash


def test_new_version_only_with_force_and_old_version_kept(store):
    con, records = store
    eligible = calibration_eligible(records)
    v1 = freeze_calibration_set(con, eligible[:10])
    v2 = freeze_calibration_set(con, eligible, force_new=True)
    assert v2.created and v2.version == "v2" and v2.rows == len(eligible)
    assert calibration_versions(con) == ["v1", "v2"]
    assert current_calibration_set(con).version == "v2"
    from evaluation.eval_sets import calibration_set

    assert calibration_set(con, "v1").interaction_ids == v1.interaction_ids


def _ended(record: dict) -> datetime:
    return datetime.fromisoformat(record["ended_at"])


def _newest_shadow_with_gold(records: list[dict], before: datetime) -> list[str]:
    """The shadow selection rule spelled out in Python: the reference the SQL must match."""
    pool = [r for r in records if split_of(r["customer_id"]) == "shadow" and r["gold"] and _ended(r) < before]
    pool.sort(key=lambda r: r["interaction_id"])
    pool.sort(key=_ended, reverse=True)  # stable: equal times stay in id order
    return [r["interaction_id"] for r in pool]


def test_shadow_set_takes_the_most_recent_gold_shadow_records(store):
    con, records = store
    newest = _newest_shadow_with_gold(records, AFTER_ALL)[:7]
    assert select_shadow(con, AFTER_ALL, size=7) == newest
    built = build_shadow_set(con, "2025-W02", AFTER_ALL, size=7)
    assert built.created and list(built.interaction_ids) == newest
    # Re-running the week returns the stored set, whatever is asked now.
    rerun = build_shadow_set(con, "2025-W02", datetime(2025, 1, 1, 1, tzinfo=UTC), size=3)
    assert not rerun.created and rerun.interaction_ids == built.interaction_ids
    assert shadow_set(con, "2025-W02").set_hash == built.set_hash
    assert shadow_set(con, "2025-W03") is None


def test_a_short_window_is_topped_up_from_history_before_it_and_never_after(store):
    """The window alone holds too few shadow conversations: older ones from the whole stored log fill
    the set, newest first, capped at its size, and nothing that ended at or after the week's end
    enters it (a backfill of this week, run today, sees no later traffic)."""
    con, records = store
    end = datetime(2025, 1, 1, 8, tzinfo=UTC)  # minutes 0..479 ended before it, 480..599 after
    window = cut_window(con, end, size=40)
    in_window = window_ids(con, window.week)
    size = 20
    wanted = _newest_shadow_with_gold(records, end)
    from_window = [rid for rid in wanted if rid in set(in_window)]
    later = [r for r in records if split_of(r["customer_id"]) == "shadow" and r["gold"] and _ended(r) >= end]
    assert 0 < len(from_window) < size < len(wanted) and later  # the case under test, and a future to leak

    shadow = build_shadow_set(con, "2025-W01", end, size=size)
    chosen = shadow.records(con)
    assert list(shadow.interaction_ids) == wanted[:size]
    ended = [_ended(r) for r in chosen]
    assert all(t < end for t in ended) and ended == sorted(ended, reverse=True)
    assert all(split_of(r["customer_id"]) == "shadow" and r["gold"] for r in chosen)
    assert set(from_window) <= set(shadow.interaction_ids)  # the window's own come first: they are newest
    assert shadow_counts(shadow, in_window, requested=size) == {
        "found_in_window": len(from_window),
        "found_before_window": size - len(from_window),
        "found": size,
        "requested": size,
    }
    # Asking for more than the log holds takes every eligible conversation and says it fell short.
    everything = build_shadow_set(con, "2025-W01-all", end)
    assert list(everything.interaction_ids) == wanted
    counts = shadow_counts(everything, in_window, requested=5000)
    assert counts["found"] == len(wanted) < counts["requested"] == 5000


def test_a_week_before_any_shadow_conversation_is_an_empty_set_error_naming_the_week(store):
    con, _ = store
    with pytest.raises(EvalSetError) as err:
        build_shadow_set(con, "2024-W52", datetime(2025, 1, 1, tzinfo=UTC))
    assert err.value.rule == "empty_set" and "2024-W52" in str(err.value)
    assert shadow_set(con, "2024-W52") is None
    with pytest.raises(ValueError, match="timezone-aware"):
        select_shadow(con, datetime(2025, 1, 2))


def test_shadow_size_defaults_to_5000_and_ties_break_by_id(tmp_path):
    from evaluation.eval_sets import DEFAULT_SHADOW_SIZE

    assert DEFAULT_SHADOW_SIZE == 5000
    records = [make_record(i, minute=0) for i in range(40)]
    con = _ingested(tmp_path, records)
    try:
        ids = select_shadow(con, AFTER_ALL)
    finally:
        con.close()
    assert ids == sorted(ids) and len(ids) == sum(split_of(r["customer_id"]) == "shadow" for r in records) > 1


def test_neither_set_is_ever_trained_on(store):
    """The training split of every week's window excludes both evaluation sets."""
    con, records = store
    cal = freeze_calibration_set(con, calibration_eligible(records))
    shadow = build_shadow_set(con, "2025-W02", AFTER_ALL)
    # Two "weeks" of windows overlapping the frozen calibration set's period.
    for window in (records[: N // 2], records[N // 3 :]):
        train_ids = [r["interaction_id"] for r in split_window(window)["train"]]
        assert train_ids
        assert_disjoint_from_training(train_ids, cal, shadow)
    # And the guard does fire when a set member sneaks into training.
    with pytest.raises(TrainingLeakError) as err:
        assert_disjoint_from_training([*train_ids, cal.interaction_ids[0]], cal, shadow)
    assert err.value.overlap == (cal.interaction_ids[0],)
    assert err.value.set_name == "calibration set v1"
    with pytest.raises(TrainingLeakError) as err:
        assert_disjoint_from_training([shadow.interaction_ids[-1]], cal, shadow)
    assert err.value.set_name == "shadow set of 2025-W02"


def test_both_kinds_of_set_reload_as_their_own_kind(store):
    con, records = store
    cal = freeze_calibration_set(con, calibration_eligible(records))
    shadow = build_shadow_set(con, "2025-W02", AFTER_ALL)
    again_cal, again_shadow = calibration_set(con, "v1"), shadow_set(con, "2025-W02")
    assert type(again_cal) is CalibrationSet and type(again_shadow) is ShadowSet
    assert (again_cal.version, again_shadow.week) == ("v1", "2025-W02")
    assert again_cal == replace(cal, created=False) and again_shadow == replace(shadow, created=False)
    # The two tables never mix: a calibration version is not a shadow week, nor the reverse.
    assert shadow_set(con, "v1") is None and calibration_set(con, "2025-W02") is None
