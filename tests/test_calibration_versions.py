"""Calibration refresh: versions drawn by a stable hash from the eligible pool (never by labels) and
frozen as it grows, each week pinned to the version its first run used, and `retrain calibration
list / refresh`; on a real DuckDB store."""

from __future__ import annotations

import json
import shutil
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pytest

from assets.partitions import week_end
from dataplane.ingest import ingest_paths
from dataplane.labels import import_labels
from dataplane.review_sample import record_sample
from dataplane.splits import split_of, stable_point
from dataplane.store import open_store
from evaluation.calibration_versions import (
    DRAW_SALT,
    calibration_draw,
    eligible_pool,
    pinned_weeks,
    refresh_calibration,
    week_calibration,
)
from evaluation.eval_sets import EvalSetError, calibration_versions
from orchestration.cli import main
from tests.helpers_gates import make_record

W1, W2, W3 = "2025-01-06", "2025-01-13", "2025-01-20"  # Mondays


def customers(split: str, n: int) -> list[str]:
    """`n` customer ids that the default split puts in `split`."""
    found = [f"cust_{k}" for k in range(2000) if split_of(f"cust_{k}") == split]
    return found[:n]


def week_records(week: str, first: int, n: int, *, label: bool | None = True, split: str = "calibration") -> list[dict]:
    """`n` interactions of `split` customers that ended on the Wednesday of `week`, ids from `first`."""
    day = date.fromisoformat(week) + timedelta(days=2)
    out = []
    for i, customer in enumerate(customers(split, n)):
        record = make_record(first + i, customer=customer, label=None if label is None else (i % 2 == 0))
        record["started_at"] = record["ended_at"] = f"{day}T{i % 24:02d}:00:00+00:00"
        if record["human_label"]:
            record["human_label"]["labeled_at"] = f"{day}T23:30:00+00:00"
        out.append(record)
    return out


class Store:
    """A DuckDB file that batches of records are ingested into, opened per step."""

    def __init__(self, root: Path):
        self.path, self.landing, self.batches = root / "store.duckdb", root / "landing", 0
        self.landing.mkdir(parents=True)

    def add(self, records: list[dict]) -> None:
        self.batches += 1
        path = self.landing / f"batch-{self.batches}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in records))
        assert ingest_paths(self.path, [path]).accepted == len(records)

    def connect(self) -> duckdb.DuckDBPyConnection:
        return open_store(self.path)

    def week(self, week: str, refresh_after: int = 5):
        with self.connect() as con:
            return week_calibration(con, week, before=week_end(week), refresh_after=refresh_after)


@pytest.fixture()
def store(tmp_path) -> Store:
    return Store(tmp_path)


def review(con, tmp_path: Path, rater: str, verdicts: dict[str, bool], os_user: str) -> None:
    """`rater` labels `verdicts` through a recorded review sample of exactly those interactions."""
    sample = record_sample(con, W1, sorted(verdicts), "exporter").sample_id
    path = tmp_path / f"{rater}-{sample}.jsonl"
    path.write_text(
        "".join(
            json.dumps({"sample_id": sample, "interaction_id": k, "task_success": v}) + "\n"
            for k, v in verdicts.items()
        )
    )
    import_labels(con, path, rater, os_user=os_user)


def test_a_week_is_pinned_and_a_rerun_never_uses_a_newer_version(store):
    store.add(week_records(W1, 0, 8))
    first = store.week(W1)
    assert first.frozen_now and not first.pinned_before and first.version.version == "v1"
    assert first.version.rows == 8

    store.add(week_records(W2, 100, 6))  # 6 new eligible >= refresh_after 5
    second = store.week(W2)
    assert second.frozen_now and second.version.version == "v2" and second.new_eligible == 6
    assert set(first.version.interaction_ids) < set(second.version.interaction_ids)

    again = store.week(W1)  # a backfill of the first week, after v2 exists
    assert again.pinned_before and not again.frozen_now and again.new_eligible is None
    assert (again.version.version, again.version.set_hash) == ("v1", first.version.set_hash)
    assert store.week(W2).version.set_hash == second.version.set_hash
    with store.connect() as con:
        assert pinned_weeks(con) == {"v1": [W1], "v2": [W2]}


def test_too_few_new_eligible_keep_the_current_version(store):
    store.add(week_records(W1, 0, 8))
    store.week(W1)
    store.add(week_records(W2, 100, 3))
    second = store.week(W2)
    assert not second.frozen_now and second.version.version == "v1" and second.new_eligible == 3
    store.add(week_records(W3, 200, 3))  # 6 accrued outside v1 now
    third = store.week(W3)
    assert third.frozen_now and third.version.version == "v2" and third.new_eligible == 6
    assert third.version.rows == 14


def test_the_pool_is_calibration_customers_with_gold_whatever_their_labels(store, tmp_path):
    labelled, unlabelled = week_records(W1, 100, 4), week_records(W1, 0, 6, label=None)
    store.add(
        [
            *labelled,
            *unlabelled,
            *week_records(W1, 200, 4, split="train"),
            *[{**r, "gold": None} for r in week_records(W1, 300, 3)],
        ]
    )
    expected = sorted(r["interaction_id"] for r in [*labelled, *unlabelled])
    with store.connect() as con:
        assert eligible_pool(con) == expected
        # Review labels, agreeing or not, neither add an interaction nor take one away.
        agree, split = unlabelled[0]["interaction_id"], unlabelled[1]["interaction_id"]
        review(con, tmp_path, "ann", {agree: True, split: True}, "ann-account")
        review(con, tmp_path, "bob", {agree: True, split: False}, "bob-account")
        assert eligible_pool(con) == expected
        version = week_calibration(con, W1, before=week_end(W1)).version
        assert sorted(version.interaction_ids) == expected


def test_labelling_a_subset_does_not_change_what_refresh_picks(store, tmp_path):
    """The reported case: one person labelled the calibration interactions of their choice and the
    refresh froze exactly those. Now the refresh draws by the stable hash alone."""
    records = week_records(W1, 0, 12, label=None)
    store.add(records)
    ids = sorted(r["interaction_id"] for r in records)
    by_hash = sorted(ids, key=lambda rid: stable_point(rid, DRAW_SALT))
    assert calibration_draw(ids, 5) == by_hash[:5] and calibration_draw(list(reversed(ids)), 5) == by_hash[:5]
    chosen = by_hash[5:11]  # six interactions the draw of 5 leaves out: the labeller's pick
    labelled = store.path.with_name("labelled.duckdb")
    shutil.copy(store.path, labelled)
    with open_store(labelled) as con:
        review(con, tmp_path, "ann", dict.fromkeys(chosen, True), "ann-account")
        assert eligible_pool(con) == ids
        small_labelled = refresh_calibration(con, size=5).version
        whole_labelled = refresh_calibration(con).version  # the default size holds all 12
    with store.connect() as con:
        small = refresh_calibration(con, size=5).version
        whole = refresh_calibration(con).version
    assert sorted(small.interaction_ids) == sorted(by_hash[:5]) and not set(chosen) & set(small.interaction_ids)
    assert (small_labelled.interaction_ids, small_labelled.set_hash) == (small.interaction_ids, small.set_hash)
    assert sorted(whole.interaction_ids) == ids  # every eligible one, not the 6 that were labelled
    assert (whole_labelled.interaction_ids, whole_labelled.set_hash) == (whole.interaction_ids, whole.set_hash)


def test_a_draw_keeps_what_it_drew_until_lower_hashes_arrive(store):
    store.add(week_records(W1, 0, 8, label=None))
    first = store.week(W1, refresh_after=1).version
    store.add(week_records(W2, 100, 8, label=None))
    with store.connect() as con:
        pool = eligible_pool(con)
        second = week_calibration(con, W2, before=week_end(W2), refresh_after=1, size=8).version
    assert sorted(second.interaction_ids) == sorted(calibration_draw(pool, 8))
    stay = [rid for rid in first.interaction_ids if rid in second.interaction_ids]
    cut = max(stable_point(rid, DRAW_SALT) for rid in second.interaction_ids)
    # Every first-version member at or below the new draw's highest hash stayed in it.
    assert stay == [rid for rid in first.interaction_ids if stable_point(rid, DRAW_SALT) <= cut]
    with pytest.raises(ValueError, match="calibration size must be an integer >= 1, got 0"):
        calibration_draw(pool, 0)


def test_a_first_run_of_an_old_week_freezes_nothing_that_ended_after_it(store):
    store.add([*week_records(W1, 0, 4), *week_records(W2, 100, 6)])
    old = store.week(W1, refresh_after=50)
    assert old.version.rows == 4  # W2's interactions ended after W1's end
    assert store.week(W2, refresh_after=50).version.version == "v1"  # 6 accrued, fewer than 50


def test_a_failed_freeze_pins_nothing_and_bad_settings_are_named(store):
    store.add([{**r, "gold": None} for r in week_records(W1, 0, 4)])
    with pytest.raises(EvalSetError) as err:
        store.week(W1)
    assert err.value.rule == "empty_set" and "calibration-split customer has gold" in err.value.detail
    with store.connect() as con:
        assert pinned_weeks(con) == {} and calibration_versions(con) == []
    with pytest.raises(ValueError, match="calibration_refresh_after must be an integer >= 1, got 0"):
        store.week(W1, refresh_after=0)


def test_refresh_freezes_now_whatever_the_threshold_and_only_when_something_is_new(store):
    store.add(week_records(W1, 0, 4))
    store.week(W1, refresh_after=50)
    store.add(week_records(W2, 100, 1))
    with store.connect() as con:
        done = refresh_calibration(con)
        assert done.frozen_now and done.version.version == "v2" and done.new_eligible == 1
        same = refresh_calibration(con)
        assert not same.frozen_now and same.version.version == "v2" and same.new_eligible == 0
        assert calibration_versions(con) == ["v1", "v2"]


def test_calibration_commands(home, capsys):
    store = Store(home.root / "cli")
    store.path = home.duckdb_path
    store.add(week_records(W1, 0, 4))
    assert main(["calibration", "list"]) == 0
    assert "no calibration version yet; 4 eligible interactions" in capsys.readouterr().out
    assert main(["calibration", "refresh", "--json"]) == 0
    v1 = json.loads(capsys.readouterr().out)
    assert v1["frozen"] and v1["version"] == "v1" and v1["rows"] == 4 and len(v1["digest"]) == 64
    with open_store(home.duckdb_path) as con:
        week_calibration(con, W1, before=week_end(W1))
    store.add(week_records(W2, 100, 2))
    assert main(["calibration", "refresh"]) == 0
    assert "froze calibration v2: 6 rows" in capsys.readouterr().out
    assert main(["calibration", "refresh"]) == 0
    assert "calibration v2 is current: no drawn interaction outside it" in capsys.readouterr().out
    assert main(["calibration", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [(v["version"], v["rows"], v["weeks"]) for v in listing["versions"]] == [("v1", 4, [W1]), ("v2", 6, [])]
    assert listing["current"] == "v2" and listing["eligible"] == listing["drawn"] == 6
    assert listing["outside_current"] == 0
    assert listing["versions"][0]["digest"] == v1["digest"]
    assert main(["calibration", "list"]) == 0
    table = capsys.readouterr().out
    assert "v1 " in table and W1 in table and "v2 *" in table and v1["digest"][:16] in table
    # Each domain has its own versions: the retail ones are not the airline's.
    assert main(["calibration", "list", "--domain", "airline", "--json"]) == 0
    airline = json.loads(capsys.readouterr().out)
    assert airline["versions"] == [] and airline["current"] is None and airline["eligible"] == 0
    assert main(["calibration", "refresh", "--domain", "airline"]) == 1
    assert "no stored replayable airline interaction" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["calibration", "list", "--domain", "telecom"])
    assert "no domain named 'telecom'" in capsys.readouterr().err


def test_a_report_spreads_its_tasks_over_as_many_customers_as_the_version_holds():
    from evaluation.calibration_versions import spread_over_customers

    # Version order: customer a's three tasks first, then b's two, then c's one.
    tasks = [{"customer_id": c, "interaction_id": f"{c}{i}"} for c, i in ("a1", "a2", "a3", "b1", "b2", "c1")]
    picked = [t["interaction_id"] for t in spread_over_customers(tasks, 4)]
    assert picked == ["a1", "b1", "c1", "a2"]  # everyone's first, then the second round in version order
    assert [t["interaction_id"] for t in spread_over_customers(tasks, 3)] == ["a1", "b1", "c1"]
    assert spread_over_customers(tasks, 10) == sorted(
        tasks, key=lambda t: (int(t["interaction_id"][1]), tasks.index(t))
    )
    with pytest.raises(ValueError, match="size"):
        spread_over_customers(tasks, 0)
