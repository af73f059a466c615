"""Labels with provenance: an import answers a recorded review sample and only its interactions; a
rater is the name typed and the OS account that typed it (two names from one account are one
rater); a rater's name never stores PII; and a store from before provenance is migrated."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import duckdb
import pytest

from dataplane.labels import (
    LabelFileError,
    check_rater,
    import_label_rows,
    import_labels,
    labels_for,
    tally,
)
from dataplane.review_sample import record_sample, review_sample, sample_id_for
from dataplane.scrub import scrub_text
from dataplane.store import open_store
from orchestration.cli import main
from tests.helpers_traffic import simulated_store

WEEK = "2026-11-23"  # a Monday
NOW = datetime(2026, 12, 1, 9, tzinfo=UTC)
CARD = "4111 1111 1111 1111"  # a Luhn-valid test card number


@pytest.fixture(scope="module")
def week_store(tmp_path_factory):
    return simulated_store(tmp_path_factory.mktemp("week"), WEEK, days=2, per_day=12, seed=5, label_share=0.0)


@pytest.fixture()
def home_with_week(home, week_store, monkeypatch):
    shutil.copy(week_store, home.duckdb_path)
    monkeypatch.setenv("LOGNAME", "ann-account")  # getpass.getuser() reads LOGNAME first
    return home


def _export(tmp_path, n=8):
    out = tmp_path / "review.jsonl"
    assert main(["review", "export", "--week", WEEK, "--n", str(n), "--out", str(out)]) == 0
    return [json.loads(line) for line in out.read_text().splitlines()]


def _write(lines, path, verdict=lambda line: line["outcome"] == "completed"):
    for line in lines:
        line["task_success"] = verdict(line)
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _labels(home):
    with duckdb.connect(str(home.duckdb_path), read_only=True) as con:
        return con.execute(
            "SELECT interaction_id, rater, task_success, os_user, sample_id FROM labels ORDER BY 1, 2"
        ).fetchall()


def _import(path, by, *flags):
    return main(["review", "import", str(path), "--by", by, *flags])


# --- the sample ---------------------------------------------------------------------------------


def test_export_records_its_sample_and_writes_its_id_on_every_line(home_with_week, tmp_path, capsys):
    lines = _export(tmp_path)
    summary = json.loads(capsys.readouterr().out)
    ids = [line["interaction_id"] for line in lines]
    assert {line["sample_id"] for line in lines} == {summary["sample_id"]} == {sample_id_for(WEEK, ids)}
    with open_store(home_with_week.duckdb_path, read_only=True) as con:
        sample = review_sample(con, summary["sample_id"])
        assert con.execute("SELECT count(*) FROM review_samples").fetchone()[0] == 1
    assert (sample.week, sample.interaction_ids, sample.exported_by) == (WEEK, tuple(sorted(ids)), "ann-account")
    # The same export again is the same sample: nothing new recorded, first export's record kept.
    assert main(["review", "export", "--week", WEEK, "--n", "8", "--out", str(tmp_path / "again.jsonl")]) == 0
    with open_store(home_with_week.duckdb_path, read_only=True) as con:
        assert con.execute("SELECT count(*) FROM review_samples").fetchone()[0] == 1
        assert review_sample(con, summary["sample_id"]) == sample


def test_an_interaction_the_sample_did_not_draw_is_refused_by_name(home_with_week, tmp_path, capsys):
    lines = _export(tmp_path)
    capsys.readouterr()
    with open_store(home_with_week.duckdb_path, read_only=True) as con:
        other = con.execute(
            "SELECT interaction_id FROM interactions WHERE interaction_id NOT IN (SELECT unnest(?)) ORDER BY 1 LIMIT 1",
            [[line["interaction_id"] for line in lines]],
        ).fetchone()[0]
    # A hand-added line for an interaction that exists but that nobody drew.
    lines.append({**lines[0], "interaction_id": other})
    path = _write(lines, tmp_path / "filled.jsonl")
    assert _import(path, "ann", "--json") == 2
    captured = capsys.readouterr()
    problems = json.loads(captured.out)["problems"]
    assert [(p["line"], p["rule"]) for p in problems] == [(len(lines), "not_in_sample")]
    assert repr(other) in problems[0]["detail"] and "not drawn in this review sample" in problems[0]["detail"]
    assert f"line {len(lines)}: not_in_sample" in captured.err
    assert _labels(home_with_week) == []
    # Without that line the file is the sample's, and goes in with its sample id on every label.
    assert _import(_write(lines[:-1], tmp_path / "ok.jsonl"), "ann") == 0
    stored = _labels(home_with_week)
    assert len(stored) == len(lines) - 1 and {row[4] for row in stored} == {lines[0]["sample_id"]}


def test_a_file_without_a_recorded_sample_is_refused(home_with_week, tmp_path, capsys):
    lines = _export(tmp_path)
    capsys.readouterr()
    unknown = [{**line, "sample_id": "rs-00000000000000000000"} for line in lines]
    assert _import(_write(unknown, tmp_path / "unknown.jsonl"), "ann", "--json") == 2
    assert [(p["line"], p["rule"]) for p in json.loads(capsys.readouterr().out)["problems"]] == [(1, "unknown_sample")]
    bare = [{k: v for k, v in line.items() if k != "sample_id"} for line in lines]
    assert _import(_write(bare, tmp_path / "bare.jsonl"), "ann", "--json") == 2
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert {p["rule"] for p in problems} == {"missing_field"} and len(problems) == len(lines)
    assert "sample_id is missing" in problems[0]["detail"]
    mixed = [*lines[:2], {**lines[2], "sample_id": "rs-11111111111111111111"}, *lines[3:]]
    assert _import(_write(mixed, tmp_path / "mixed.jsonl"), "ann", "--json") == 2
    assert [(p["line"], p["rule"]) for p in json.loads(capsys.readouterr().out)["problems"]] == [(3, "sample_mismatch")]
    assert _labels(home_with_week) == []


# --- one OS account, one rater ------------------------------------------------------------------


def test_one_os_account_typing_two_names_is_one_rater_and_cannot_veto(home_with_week, tmp_path, capsys, monkeypatch):
    lines = _export(tmp_path)
    capsys.readouterr()
    ann = _write(lines, tmp_path / "ann.jsonl")
    assert _import(ann, "ann") == 0
    assert "by ann (OS account ann-account" in capsys.readouterr().out
    first = lines[0]["interaction_id"]
    flipped = _write(lines, tmp_path / "flipped.jsonl", lambda x: (x["outcome"] == "completed") ^ (x is lines[0]))
    # The same account as `bob`, contradicting ann's verdict on one line: a conflict, refused whole.
    assert _import(flipped, "bob", "--json") == 2
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert [(p["line"], p["rule"]) for p in problems] == [(1, "label_conflict")]
    assert "OS account 'ann-account' (as 'ann'" in problems[0]["detail"]
    # The same verdicts as `bob` from that account: already stored, no second row, no second rater.
    assert _import(ann, "bob", "--json") == 0
    assert json.loads(capsys.readouterr().out)["unchanged"] == len(lines)
    stored = _labels(home_with_week)
    assert {row[1] for row in stored} == {"ann"} and {row[3] for row in stored} == {"ann-account"}
    with open_store(home_with_week.duckdb_path, read_only=True) as con:
        assert first in tally(labels_for(con)).agreed  # ann's verdict stands
    # Another account's contradicting verdict is a second rater: stored, and the disagreement reported.
    monkeypatch.setenv("LOGNAME", "bob-account")
    assert _import(flipped, "bob", "--json") == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["os_user"] == "bob-account" and summary["inserted"] == len(lines)
    assert [d["interaction_id"] for d in summary["disagreements"]] == [first]


# --- the rater's name ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "by, rule",
    [
        (CARD, "rater_pii"),
        ("4111111111111111", "rater_pii"),
        ("ann 415-555-0100", "rater_pii"),
        ("", "rater_empty"),
        ("a" * 65, "rater_too_long"),
        ("ann\u202ebob", "rater_characters"),  # a right-to-left override: reads otherwise than stored
        ("ann\nbob", "rater_characters"),
    ],
)
def test_a_bad_rater_name_is_refused_naming_the_rule_and_never_echoing_pii(home_with_week, tmp_path, capsys, by, rule):
    lines = _export(tmp_path)
    capsys.readouterr()
    assert _import(_write(lines, tmp_path / "filled.jsonl"), by) == 2
    err = capsys.readouterr().err
    assert rule in err and "4111" not in err and "555-0100" not in err
    assert _labels(home_with_week) == []


def test_names_of_any_script_are_kept_and_an_email_is_masked_as_anywhere(home):
    assert check_rater("  Zoe\u0308 Müller ") == "Zoë Müller"  # NFC: one code point for ë
    assert check_rater("ops_1.night+2") == "ops_1.night+2"
    # An e-mail address is stored as the scrub stores it (a pseudonym: one address, one rater).
    email = check_rater("ann.smith@acme.example")
    assert email == scrub_text("ann.smith@acme.example") and "ann.smith" not in email
    assert check_rater("ann.smith@acme.example") == email != check_rater("bob.jones@acme.example")


def test_the_os_account_is_masked_like_any_text(home_with_week, tmp_path):
    lines = _export(tmp_path)
    with open_store(home_with_week.duckdb_path) as con:
        summary = import_labels(con, _write(lines, tmp_path / "f.jsonl"), "ann", now=NOW, os_user=CARD)
    assert summary.os_user == scrub_text(CARD) and "4111" not in summary.os_user
    assert {row[3] for row in _labels(home_with_week)} == {summary.os_user}


# --- rows from another source -------------------------------------------------------------------


def test_rows_from_any_source_follow_the_same_rules(home_with_week):
    with open_store(home_with_week.duckdb_path) as con:
        ids = [r[0] for r in con.execute("SELECT interaction_id FROM interactions ORDER BY 1 LIMIT 4").fetchall()]
        sample = record_sample(con, WEEK, ids[:3], "exporter")
        rows = [{"interaction_id": rid, "task_success": True, "note": f"card {CARD}"} for rid in ids]
        with pytest.raises(LabelFileError) as refused:
            import_label_rows(con, rows, sample_id=sample.sample_id, rater="ann", source="trace:42", os_user="ann")
        assert refused.value.path == "trace:42"
        assert [(p.line_no, p.rule) for p in refused.value.problems] == [(4, "not_in_sample")]
        summary = import_label_rows(
            con, rows[:3], sample_id=sample.sample_id, rater="ann", source="trace:42", os_user="ann", now=NOW
        )
        assert (summary.inserted, summary.sample_id, summary.file) == (3, sample.sample_id, "trace:42")
        stored = con.execute("SELECT DISTINCT source_file, note, sample_id FROM labels").fetchall()
    assert stored == [("trace:42", scrub_text(f"card {CARD}"), sample.sample_id)] and "4111" not in stored[0][1]


# --- a store from before provenance -------------------------------------------------------------


def test_a_store_from_before_provenance_is_migrated_and_its_labels_kept(tmp_path, week_store):
    old = tmp_path / "old.duckdb"
    shutil.copy(week_store, old)
    with duckdb.connect(str(old)) as con:
        con.execute("DROP TABLE labels")
        con.execute("DROP TABLE review_samples")
        con.execute(  # the labels table as it first shipped
            "CREATE TABLE labels (interaction_id VARCHAR NOT NULL, rater VARCHAR NOT NULL, "
            "task_success BOOLEAN NOT NULL, labeled_at TIMESTAMPTZ NOT NULL, note VARCHAR, "
            "source_file VARCHAR NOT NULL, imported_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (interaction_id, rater))"
        )
        rid = con.execute("SELECT interaction_id FROM interactions ORDER BY 1 LIMIT 1").fetchone()[0]
        con.execute("INSERT INTO labels VALUES (?, 'ann', true, ?, NULL, 'old.jsonl', ?)", [rid, NOW, NOW])
    # A read-only reader first: the store is migrated once by a writer, then read.
    with open_store(old, read_only=True) as con:
        (label,) = labels_for(con, [rid])[rid]
        assert con.execute("SELECT count(*) FROM review_samples").fetchone()[0] == 0
    assert (label.rater, label.task_success, label.os_user) == ("ann", True, None)
    # The old label is ann's: ann may not change it, and from any account the name still binds.
    with open_store(old) as con:
        sample = record_sample(con, WEEK, [rid], "exporter").sample_id
        rows = [{"interaction_id": rid, "task_success": False}]
        with pytest.raises(LabelFileError, match="label_conflict"):
            import_label_rows(con, rows, sample_id=sample, rater="ann", source="s", os_user="ann-account")
        import_label_rows(con, rows, sample_id=sample, rater="bob", source="s", os_user="bob-account")
        assert con.execute("SELECT rater, os_user, sample_id FROM labels ORDER BY rater").fetchall() == [
            ("ann", None, None),
            ("bob", "bob-account", sample),
        ]
