"""The weekly review queue: `retrain review export` (stratified sample) and `retrain review import`
(all-or-nothing labels in the `labels` table), on simulated traffic ingested into a real store."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime

import duckdb
import pytest

from dataplane.labels import (
    EXPORT_FIELDS,
    LabelFileError,
    agreed_task_success,
    import_labels,
    labels_for,
)
from dataplane.review_sample import allocate, record_sample, stratified_sample
from dataplane.store import open_store
from orchestration.cli import main
from orchestration.cli.review import transcript
from tests.helpers_traffic import simulated_store

WEEK = "2026-11-23"  # a Monday
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)


# --- the sample ---------------------------------------------------------------------------------


def test_allocation_keeps_every_stratum_and_is_proportional():
    sizes = {("completed", "order_status"): 100, ("completed", "cancel_order"): 10, ("failed", "other"): 2}
    quota = allocate(sizes, 20)
    assert sum(quota.values()) == 20
    assert quota[("failed", "other")] >= 1  # a rare stratum is never rounded away
    assert quota[("completed", "order_status")] > quota[("completed", "cancel_order")] > 0
    assert allocate(sizes, 500) == sizes  # room for everything: everything
    assert sum(allocate(sizes, 2).values()) == 2  # fewer seats than strata: still exactly n


def test_sample_is_seeded_stratified_and_distinct():
    population = [(f"id-{k:03d}", "failed" if k % 10 == 0 else "completed", f"intent{k % 3}") for k in range(300)]
    first = stratified_sample(population, 40, seed=7)
    assert first == stratified_sample(population, 40, seed=7)
    assert first != stratified_sample(population, 40, seed=8)
    assert len(first) == len(set(first)) == 40
    strata = {(o, i) for rid, o, i in population if rid in set(first)}
    assert strata == {(o, i) for _, o, i in population}  # all 6 (outcome, intent) pairs are in it
    with pytest.raises(ValueError, match="sample size"):
        stratified_sample(population, -1)


def test_transcript_reads_as_a_conversation():
    lines = transcript(
        [
            {"role": "system", "content": "policy"},
            {"role": "user", "content": "Cancel #W1"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "get_order_details", "arguments": {"order_id": "#W1"}}],
            },
            {"role": "tool", "name": "get_order_details", "content": '{"status": "pending"}'},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "send_message_to_customer", "arguments": {"message": "Shall I?"}}],
            },
            {"role": "tool", "name": "send_message_to_customer", "content": "Yes."},
            {"role": "assistant", "content": "Done."},
        ]
    )
    assert lines == [
        "customer: Cancel #W1",
        'agent calls get_order_details({"order_id": "#W1"})',
        'tool get_order_details: {"status": "pending"}',
        "agent: Shall I?",
        "customer: Yes.",
        "agent: Done.",
    ]


# --- a store of one simulated week --------------------------------------------------------------


@pytest.fixture(scope="module")
def week_store(tmp_path_factory):
    """One week of simulated traffic ingested into a store; every test works on its own copy."""
    return simulated_store(tmp_path_factory.mktemp("week"), WEEK, days=7, per_day=36, seed=3, label_share=0.1)


@pytest.fixture()
def home_with_week(home, week_store):
    shutil.copy(week_store, home.duckdb_path)
    return home


def _export(tmp_path, n=200, seed=0):
    out = tmp_path / f"review-{n}-{seed}.jsonl"
    assert main(["review", "export", "--week", WEEK, "--n", str(n), "--seed", str(seed), "--out", str(out)]) == 0
    return out, [json.loads(line) for line in out.read_text().splitlines()]


def _fill(lines, path, verdict=lambda line: line["outcome"] == "completed"):
    for line in lines:
        line["task_success"] = verdict(line)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _rows(home):
    with duckdb.connect(str(home.duckdb_path), read_only=True) as con:
        return sorted(con.execute("SELECT * FROM labels").fetchall())


def test_export_lines_carry_what_a_reviewer_needs(home_with_week, tmp_path, capsys):
    out, lines = _export(tmp_path, n=60)
    summary = json.loads(capsys.readouterr().out)
    assert summary["population"] == 7 * 36 and summary["sampled"] == len(lines) == 60
    line = lines[0]
    assert tuple(line) == EXPORT_FIELDS
    assert line["task_success"] is None and line["note"] is None and line["week"] == WEEK
    assert line["transcript"][0].startswith("customer: ") and isinstance(line["proxy_reward"], float)
    assert line["proxy_reward"] == pytest.approx(sum(line["reward_terms"].values()), abs=1e-5)
    failed = [x for x in lines if x["verified_success"] is False]
    assert failed and all(x["failure_mode"] for x in failed)
    assert all(x["failure_mode"] is None for x in lines if x["verified_success"])
    # Stratified: every (outcome, intent) pair of the week is in a 60-line sample.
    with duckdb.connect(str(home_with_week.duckdb_path), read_only=True) as con:
        pairs = set(con.execute("SELECT DISTINCT outcome, intent FROM interactions").fetchall())
    assert {(x["outcome"], x["intent"]) for x in lines} == pairs
    # Reproducible, and an existing file (maybe half labelled) is not overwritten.
    again = tmp_path / "again.jsonl"
    assert main(["review", "export", "--week", "2026-11-26", "--n", "60", "--out", str(again)]) == 0
    assert again.read_text() == out.read_text()
    assert main(["review", "export", "--week", WEEK, "--n", "60", "--out", str(out)]) == 2
    assert "exists" in capsys.readouterr().err


def test_export_of_an_empty_week_or_a_bad_week_is_a_clear_error(home_with_week, tmp_path, capsys):
    assert main(["review", "export", "--week", "2026-10-05", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "no stored retail interactions" in capsys.readouterr().err
    # A week of retail traffic has nothing to review for another domain: the sample is per domain.
    other = ["review", "export", "--week", WEEK, "--domain", "airline", "--out", str(tmp_path / "x.jsonl")]
    assert main(other) == 2
    assert "no stored airline interactions" in capsys.readouterr().err
    assert main(["review", "export", "--week", "last week", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert "not a date" in capsys.readouterr().err
    assert not (tmp_path / "x.jsonl").exists()


def test_a_bad_file_is_refused_whole_naming_every_bad_line(home_with_week, tmp_path, capsys):
    _, lines = _export(tmp_path, n=30)
    capsys.readouterr()
    good = _fill(lines, tmp_path / "good.jsonl")
    text = good.read_text().splitlines()
    broken = [json.loads(line) for line in text]
    broken[1]["task_success"] = "yes"
    broken[3]["task_success"] = None
    broken[4]["interaction_id"] = "sim-no-such-id"
    broken[6]["task_sucess"] = broken[6].pop("task_success")
    broken[8]["interaction_id"] = broken[7]["interaction_id"]
    broken[9]["note"] = 5
    rendered = [json.dumps(line) for line in broken]
    rendered[2] = '{"interaction_id": "x", "task_success": tru'
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(rendered) + "\n")
    assert main(["review", "import", str(bad), "--by", "ann", "--json"]) == 2
    captured = capsys.readouterr()
    problems = json.loads(captured.out)["problems"]
    assert {(p["line"], p["rule"]) for p in problems} == {
        (2, "wrong_type"),
        (3, "invalid_json"),
        (4, "not_labelled"),
        (5, "unknown_interaction"),
        (7, "unknown_field"),
        (7, "missing_field"),
        (9, "duplicate_in_file"),
        (10, "wrong_type"),
    }
    assert "refused, nothing stored: 8 bad line(s)" in captured.err and "line 5: unknown_interaction" in captured.err
    assert _rows(home_with_week) == []


def test_reimport_changes_nothing_and_a_second_rater_sits_beside_the_first(
    home_with_week, tmp_path, capsys, monkeypatch
):
    _, lines = _export(tmp_path, n=40)
    capsys.readouterr()
    monkeypatch.setenv("LOGNAME", "ann-account")  # getpass.getuser() reads it first: ann's OS account
    first = _fill(lines, tmp_path / "ann.jsonl")
    assert main(["review", "import", str(first), "--by", "ann", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["inserted"], summary["unchanged"], summary["refused"]) == (40, 0, False)
    stored = _rows(home_with_week)
    assert len(stored) == 40
    assert main(["review", "import", str(first), "--by", "ann", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["inserted"] == 0
    assert _rows(home_with_week) == stored  # not a byte of it changed, imported_at included
    # A second rater, at their own OS account, who disagrees on the first line.
    monkeypatch.setenv("LOGNAME", "bob-account")
    flipped = {lines[0]["interaction_id"]}
    second = _fill(
        lines, tmp_path / "bob.jsonl", lambda x: (x["outcome"] == "completed") ^ (x["interaction_id"] in flipped)
    )
    assert main(["review", "import", str(second), "--by", "bob"]) == 0
    out = capsys.readouterr().out
    assert f"disagreement {lines[0]['interaction_id']}: ann=" in out
    with open_store(home_with_week.duckdb_path, read_only=True) as con:
        both = labels_for(con, [lines[0]["interaction_id"], lines[1]["interaction_id"]])
    assert {x.rater for x in both[lines[0]["interaction_id"]]} >= {"ann", "bob"}
    assert agreed_task_success(both[lines[0]["interaction_id"]]) is None
    assert agreed_task_success(both[lines[1]["interaction_id"]]) is (lines[1]["outcome"] == "completed")


def test_a_stored_label_is_never_changed(home_with_week, tmp_path):
    _, lines = _export(tmp_path, n=10)
    with open_store(home_with_week.duckdb_path) as con:
        import_labels(con, _fill(lines, tmp_path / "a.jsonl"), "ann", now=NOW)
    stored = _rows(home_with_week)
    changed = _fill(lines, tmp_path / "b.jsonl", lambda x: x["outcome"] != "completed")
    with open_store(home_with_week.duckdb_path) as con, pytest.raises(LabelFileError) as refused:
        import_labels(con, changed, "ann", now=NOW)
    assert [p.rule for p in refused.value.problems] == ["label_conflict"] * 10
    assert _rows(home_with_week) == stored


def test_records_own_human_labels_count_and_notes_are_masked(home_with_week, tmp_path):
    with open_store(home_with_week.duckdb_path) as con:
        labelled = con.execute(
            "SELECT interaction_id, human_task_success, record->'human_label'->>'rater' FROM interactions "
            "WHERE human_task_success IS NOT NULL ORDER BY 1 LIMIT 1"
        ).fetchone()
        rid, verdict, rater = labelled
        sample = record_sample(con, WEEK, [rid], "exporter").sample_id
        assert [(x.rater, x.task_success, x.source) for x in labels_for(con, [rid])[rid]] == [
            (rater, verdict, "record")
        ]
        # The record's rater re-stating the same verdict is "already stored"; a different one is a conflict.
        same = tmp_path / "same.jsonl"
        same.write_text(
            json.dumps(
                {
                    "sample_id": sample,
                    "interaction_id": rid,
                    "task_success": verdict,
                    "note": "card 4111 1111 1111 1111",
                }
            )
            + "\n"
        )
        assert import_labels(con, same, rater, now=NOW).unchanged == 1
        other = tmp_path / "other.jsonl"
        other.write_text(json.dumps({"sample_id": sample, "interaction_id": rid, "task_success": not verdict}) + "\n")
        with pytest.raises(LabelFileError, match="label_conflict"):
            import_labels(con, other, rater, now=NOW)
        summary = import_labels(con, same, "carol", now=NOW, os_user="carol-account")
        assert summary.inserted == 1
        (note,) = con.execute("SELECT note FROM labels WHERE rater = 'carol'").fetchone()
        assert "4111" not in note and "[CARD]" in note
        # The week's labels: a window on labeled_at.
        assert rid in labels_for(con, labeled_since=NOW)
        assert all(x.source == "record" for x in labels_for(con, labeled_before=NOW).get(rid, []))


def test_a_bad_rater_name_is_refused(home_with_week, tmp_path, capsys):
    path = tmp_path / "x.jsonl"
    path.write_text("")
    assert main(["review", "import", str(path), "--by", "  "]) == 2
    assert "rater" in capsys.readouterr().err
    assert main(["review", "import", str(tmp_path / "missing.jsonl"), "--by", "ann"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_a_store_without_the_labels_table_still_reads_record_labels(tmp_path, week_store):
    old = tmp_path / "old.duckdb"
    shutil.copy(week_store, old)
    with duckdb.connect(str(old)) as con:
        con.execute("DROP TABLE labels")
    with open_store(old, read_only=True) as con:
        found = labels_for(con)
    assert found and all(x.source == "record" for labels in found.values() for x in labels)


# --- the whole flow from the command line ------------------------------------------------------


def _retrain(home, *args):
    env = {**os.environ, "RETRAIN_HOME": str(home.root), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "orchestration.cli", *args], capture_output=True, text=True, env=env, timeout=600
    )


@pytest.mark.slow
def test_review_flow_from_the_command_line(home, tmp_path):
    landing = tmp_path / "landing"
    steps = [
        ("simulate", "--days", "7", "--per-day", "36", "--seed", "4", "--start", WEEK, "--out", str(landing)),
        ("ingest", str(landing)),
        ("review", "export", "--week", WEEK, "--n", "200", "--out", str(tmp_path / "review.jsonl")),
    ]
    for step in steps:
        done = _retrain(home, *step)
        assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in (tmp_path / "review.jsonl").read_text().splitlines()]
    assert len(lines) == 200 and Counter(x["task_success"] for x in lines) == {None: 200}
    filled = _fill(lines, tmp_path / "filled.jsonl")
    done = _retrain(home, "review", "import", str(filled), "--by", "ann", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["inserted"] == 200
    stored = _rows(home)
    assert len(stored) == 200
    done = _retrain(home, "review", "import", str(filled), "--by", "ann")
    assert done.returncode == 0 and "stored 0, already stored 200" in done.stdout
    assert _rows(home) == stored
    # One bad line among 200 fresh labels by another rater: refused whole, that line named.
    text = filled.read_text().splitlines()
    text[136] = (
        text[136]
        .replace('"task_success": true', '"task_success": "true"')
        .replace('"task_success": false', '"task_success": "false"')
    )
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(text) + "\n")
    done = _retrain(home, "review", "import", str(bad), "--by", "bob")
    assert done.returncode == 2
    assert "1 bad line(s)" in done.stderr and "line 137: wrong_type" in done.stderr
    assert _rows(home) == stored


# --- the demo's simulated reviewer --------------------------------------------------------------


def test_the_demos_reviewer_labels_the_whole_sample_through_the_queue(home_with_week, tmp_path):
    """Export, fill from the verifier with the reviewer's mistakes, import: every sampled conversation
    gets one label by the demo's rater, tied to the recorded sample, and the mistakes are the share asked."""
    from orchestration.cli.demo_review import DEMO_RATER, review_week
    from orchestration.cli.review import SampleSettings

    done = review_week(WEEK, tmp_path, error_rate=0.25, sample=SampleSettings(n=150, seed=4))
    assert done["sampled"] == 150 and done["unjudged"] == 0
    assert 0 < done["from_outcome"] < 150  # the week has conversations logged without gold
    assert done["labelled"] == done["stored"] == 150
    assert 0 < done["mistakes"] < 150 * 0.5  # about a quarter of 150, never all or none
    filled = [json.loads(line) for line in (tmp_path / f"review-{WEEK}.jsonl").read_text().splitlines()]
    truth = [
        x["verified_success"] if x["verified_success"] is not None else x["outcome"] == "completed" for x in filled
    ]
    against = sum(line["task_success"] != verdict for line, verdict in zip(filled, truth))
    assert against == done["mistakes"]
    with duckdb.connect(str(home_with_week.duckdb_path), read_only=True) as con:
        stored = con.execute("SELECT count(*), count(DISTINCT sample_id) FROM labels WHERE rater = ?", [DEMO_RATER])
        assert stored.fetchone() == (150, 1)
    # The same week again: the same sample and labels, nothing stored twice.
    again = review_week(WEEK, tmp_path, error_rate=0.25, sample=SampleSettings(n=150, seed=4))
    assert again["stored"] == 0 and again["already_stored"] == 150


def test_the_demos_reviewer_leaves_out_a_line_it_cannot_judge(tmp_path):
    from orchestration.cli.demo_review import fill_review_file

    path = tmp_path / "review.jsonl"
    lines = [
        {"interaction_id": "a", "verified_success": True, "outcome": "failed"},  # the replay's verdict wins
        {"interaction_id": "b", "verified_success": None, "outcome": "completed"},  # no gold: the logged outcome
        {"interaction_id": "c", "verified_success": None, "outcome": None},  # nothing to judge by
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert fill_review_file(path, 0.0, 0) == {"labelled": 2, "mistakes": 0, "from_outcome": 1, "unjudged": 1}
    kept = [json.loads(x) for x in path.read_text().splitlines()]
    assert kept == [{**lines[0], "task_success": True}, {**lines[1], "task_success": True}]
    with pytest.raises(ValueError, match="error_rate"):
        fill_review_file(path, 1.5, 0)
