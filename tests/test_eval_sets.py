"""Frozen calibration versions, per-week shadow sets, and the proof that neither is trained on."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from dataplane.ingest import ingest_paths
from dataplane.splits import split_of, split_window
from dataplane.store import open_store
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
    shadow_set,
)
from tests.helpers_gates import make_record

N = 600


@pytest.fixture()
def store(tmp_path):
    """A store with N ingested interactions; every third one lacks gold, every fifth a label."""
    records = [make_record(i, gold=i % 3 != 0, label=None if i % 5 == 0 else i % 2 == 0) for i in range(N)]
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "batch.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    summary = ingest_paths(tmp_path / "db.duckdb", [landing])
    assert summary.accepted == N
    con = open_store(tmp_path / "db.duckdb")
    yield con, records
    con.close()


def test_calibration_set_holds_only_labelled_gold_calibration_records(store):
    con, records = store
    eligible = calibration_eligible(records)
    assert eligible and len(eligible) < len(records)
    cal = freeze_calibration_set(con, eligible)
    assert cal.created and cal.version == "v1" and cal.rows == len(eligible)
    for record in cal.records(con):
        assert split_of(record["customer_id"]) == "calibration"
        assert record["gold"] and isinstance(record["human_label"]["task_success"], bool)
    # Every eligible record made it in; nothing else did.
    expected = {
        r["interaction_id"]
        for r in records
        if split_of(r["customer_id"]) == "calibration" and r["gold"] and r["human_label"]
    }
    assert set(cal.interaction_ids) == expected


@pytest.mark.parametrize(
    "change, rule",
    [
        (lambda r: {**r, "gold": None}, "no_gold"),
        (lambda r: {**r, "human_label": None}, "no_human_label"),
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


def test_shadow_set_takes_the_most_recent_gold_shadow_records(store):
    con, records = store
    chosen = select_shadow(records, size=7)
    pool = [r for r in records if split_of(r["customer_id"]) == "shadow" and r["gold"]]
    newest = sorted(pool, key=lambda r: r["ended_at"], reverse=True)[:7]
    assert [r["interaction_id"] for r in chosen] == [r["interaction_id"] for r in newest]
    built = build_shadow_set(con, "2025-W02", records, size=7)
    assert built.created and list(built.interaction_ids) == [r["interaction_id"] for r in newest]
    # Re-running the week returns the stored set, whatever is passed in now.
    rerun = build_shadow_set(con, "2025-W02", records[:50], size=3)
    assert not rerun.created and rerun.interaction_ids == built.interaction_ids
    assert shadow_set(con, "2025-W02").set_hash == built.set_hash
    assert shadow_set(con, "2025-W03") is None


def test_shadow_size_defaults_to_5000_and_ties_break_by_id():
    from evaluation.eval_sets import DEFAULT_SHADOW_SIZE

    assert DEFAULT_SHADOW_SIZE == 5000
    records = [make_record(i, minute=0) for i in range(40)]
    chosen = select_shadow(records)
    ids = [r["interaction_id"] for r in chosen]
    assert ids == sorted(ids) and len(ids) == sum(split_of(r["customer_id"]) == "shadow" for r in records)


def test_neither_set_is_ever_trained_on(store):
    """The training split of every week's window excludes both evaluation sets."""
    con, records = store
    cal = freeze_calibration_set(con, calibration_eligible(records))
    shadow = build_shadow_set(con, "2025-W02", records)
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
    shadow = build_shadow_set(con, "2025-W02", records)
    again_cal, again_shadow = calibration_set(con, "v1"), shadow_set(con, "2025-W02")
    assert type(again_cal) is CalibrationSet and type(again_shadow) is ShadowSet
    assert (again_cal.version, again_shadow.week) == ("v1", "2025-W02")
    assert again_cal == replace(cal, created=False) and again_shadow == replace(shadow, created=False)
    # The two tables never mix: a calibration version is not a shadow week, nor the reverse.
    assert shadow_set(con, "v1") is None and calibration_set(con, "2025-W02") is None
