"""Calibration refresh: versions frozen as eligible interactions accrue, each week pinned to the
version its first run used, and `retrain calibration list / refresh`; on a real DuckDB store."""

from __future__ import annotations

import json
from datetime import date, timedelta
from pathlib import Path

import duckdb
import pytest

from assets.partitions import week_end
from dataplane.ingest import ingest_paths
from dataplane.labels import import_labels
from dataplane.splits import split_of
from dataplane.store import open_store
from evaluation.calibration_versions import (
    eligible_verdicts,
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


def test_only_calibration_customers_with_gold_and_an_agreed_label_are_eligible(store, tmp_path):
    unlabelled = week_records(W1, 0, 6, label=None)
    store.add(
        [
            *week_records(W1, 100, 4),
            *unlabelled,
            *week_records(W1, 200, 4, split="train"),
            *[{**r, "gold": None} for r in week_records(W1, 300, 3)],
        ]
    )
    with store.connect() as con:
        assert len(eligible_verdicts(con)) == 4
        # Review labels make an unlabelled interaction eligible; two raters who disagree do not.
        agree, split = unlabelled[0]["interaction_id"], unlabelled[1]["interaction_id"]
        for rater, verdicts in (("ann", {agree: True, split: True}), ("bob", {agree: True, split: False})):
            path = tmp_path / f"{rater}.jsonl"
            path.write_text(
                "".join(json.dumps({"interaction_id": k, "task_success": v}) + "\n" for k, v in verdicts.items())
            )
            import_labels(con, path, rater)
        pool = eligible_verdicts(con)
        assert len(pool) == 5 and pool[agree] is True and split not in pool
        version = week_calibration(con, W1, before=week_end(W1)).version
        assert agree in version.interaction_ids and split not in version.interaction_ids


def test_a_first_run_of_an_old_week_freezes_nothing_that_ended_after_it(store):
    store.add([*week_records(W1, 0, 4), *week_records(W2, 100, 6)])
    old = store.week(W1, refresh_after=50)
    assert old.version.rows == 4  # W2's interactions ended after W1's end
    assert store.week(W2, refresh_after=50).version.version == "v1"  # 6 accrued, fewer than 50


def test_a_failed_freeze_pins_nothing_and_bad_settings_are_named(store):
    store.add(week_records(W1, 0, 4, label=None))
    with pytest.raises(EvalSetError) as err:
        store.week(W1)
    assert err.value.rule == "empty_set" and "agreed human label" in err.value.detail
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
    assert "calibration v2 is current: no eligible interaction outside it" in capsys.readouterr().out
    assert main(["calibration", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert [(v["version"], v["rows"], v["weeks"]) for v in listing["versions"]] == [("v1", 4, [W1]), ("v2", 6, [])]
    assert listing["current"] == "v2" and listing["eligible"] == 6 and listing["outside_current"] == 0
    assert listing["versions"][0]["digest"] == v1["digest"]
    assert main(["calibration", "list"]) == 0
    table = capsys.readouterr().out
    assert "v1 " in table and W1 in table and "v2 *" in table and v1["digest"][:16] in table
