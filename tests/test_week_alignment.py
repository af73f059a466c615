"""Fresh reward alignment every week: the labels of the interactions the week served (review labels
and records' own alike), scored with the run's weights; the gate says which week lacks labels."""

from __future__ import annotations

import dataclasses
import json
import shutil
from datetime import UTC, datetime, timedelta

import pytest

from assets.partitions import week_end
from dataplane.labels import import_labels
from dataplane.review_sample import record_sample
from dataplane.store import load_records, open_store
from evaluation.gates import evaluate_gates
from evaluation.replay import reward_alignment
from evaluation.week_alignment import alignment_series, measure_alignment, read_week_labels
from tests.helpers_gates import gate_inputs
from tests.helpers_traffic import simulated_store

W1, W2 = "2026-11-09", "2026-11-16"  # Mondays
NOW = datetime(2026, 11, 24, 9, tzinfo=UTC)


@pytest.fixture(scope="module")
def two_weeks(tmp_path_factory):
    """Two weeks of simulated traffic, a third of it labelled in the records, ingested into a store."""
    return simulated_store(tmp_path_factory.mktemp("two-weeks"), W1, days=14, per_day=20, seed=4, label_share=0.35)


@pytest.fixture()
def con(two_weeks, tmp_path):
    path = tmp_path / "store.duckdb"
    shutil.copy(two_weeks, path)
    with open_store(path) as connection:
        yield connection


def _read(con, week):
    end = week_end(week)
    return read_week_labels(con, week, end - timedelta(days=7), end)


def _served(con, week) -> list[dict]:
    """Every record that ended in `week`, straight from the store."""
    end = week_end(week)
    ids = [
        r[0]
        for r in con.execute(
            "SELECT interaction_id FROM interactions WHERE ended_at >= ? AND ended_at < ?",
            [end - timedelta(days=7), end],
        ).fetchall()
    ]
    return load_records(con, ids)


def test_a_week_is_measured_on_the_labels_of_the_interactions_it_served(con):
    first, second = _read(con, W1), _read(con, W2)
    for week, labels in ((W1, first), (W2, second)):
        own = {r["interaction_id"] for r in _served(con, week) if r.get("human_label")}
        assert set(labels.tally.agreed) == own and own  # every label of the week, none of the other's
    assert not set(first.tally.agreed) & set(second.tally.agreed)
    alignment = measure_alignment(second, {})
    expected = reward_alignment([r for r in _served(con, W2) if r.get("human_label")])
    assert alignment.summary()["labels_week"] == W2
    assert alignment.summary()["auc"] == pytest.approx(expected["auc"]) and alignment.summary()["n"] == expected["n"]
    assert len(alignment.proxy_rewards) == len(alignment.human_success) == expected["n"]
    assert measure_alignment(first, {}).summary()["auc"] != pytest.approx(expected["auc"])  # not the same labels


def test_review_labels_join_the_week_they_were_served_in_and_disagreements_are_left_out(con, tmp_path):
    served = _served(con, W2)
    unlabelled = [r["interaction_id"] for r in served if not r.get("human_label")][:4]
    labelled = next(r for r in served if r.get("human_label"))
    before, other_week = _read(con, W2).tally, _read(con, W1).tally
    review = {rid: i % 2 == 0 for i, rid in enumerate(unlabelled)}
    review[labelled["interaction_id"]] = not labelled["human_label"]["task_success"]  # contradicts its rater
    sample = record_sample(con, W2, sorted(review), "exporter").sample_id
    path = tmp_path / "review.jsonl"
    path.write_text(
        "".join(
            json.dumps({"sample_id": sample, "interaction_id": k, "task_success": v}) + "\n" for k, v in review.items()
        )
    )
    import_labels(con, path, "ann", now=NOW)

    after = _read(con, W2)
    counts = after.tally.counts()
    assert counts["labels"] == before.labels + 5 and "ann" in after.tally.raters
    assert counts["agreed"] == len(before.agreed) + 4 - 1  # the contradicted one has no verdict now
    assert [d["interaction_id"] for d in after.tally.disagreements] == [labelled["interaction_id"]]
    verdicts = {r["interaction_id"]: r["human_label"]["task_success"] for r in after.records}
    assert {k: verdicts[k] for k in unlabelled} == {k: review[k] for k in unlabelled}
    assert labelled["interaction_id"] not in verdicts
    assert _read(con, W1).tally == other_week  # labels of W2's interactions stay out of W1
    summary = measure_alignment(after, {}).summary()
    assert summary["disagreements"] == 1 and summary["raters"] == len(after.tally.raters)
    series = alignment_series(summary)
    assert series["labels"] == counts["labels"] and series["disagreements"] == 1.0


def test_alignment_series_leaves_out_an_undefined_score():
    assert alignment_series({"auc": None, "n": 3, "labels": 4, "agreement": 0.5}) == {
        "agreement": 0.5,
        "n": 3.0,
        "labels": 4.0,
    }


def test_too_few_labels_of_the_week_hold_saying_how_many_more_and_how():
    inputs = dataclasses.replace(gate_inputs("better", labels=12), labels_week=W2)
    gate = evaluate_gates(inputs).gate("reward_alignment")
    assert gate.verdict == "hold"
    assert gate.lift.startswith(f"12 human labels, 200 needed: label 188 more of week {W2}'s interactions")
    assert f"retrain review export --week {W2}" in gate.lift and "re-run the week" in gate.lift
    assert f"12 human labels of week {W2}'s interactions" in gate.detail
    measured = evaluate_gates(dataclasses.replace(gate_inputs("better"), labels_week=W2)).gate("reward_alignment")
    assert measured.verdict == "pass" and f"labels of week {W2}'s interactions" in measured.detail
