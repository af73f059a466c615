"""No line can crash ingestion: hostile JSON is accepted or quarantined with a rule, and reading goes on.

Property-based: hypothesis builds lines (nesting of any depth, integers of any size, NaN and
Infinity, lone surrogates, huge floats, repeated keys at any depth, arbitrary text) and each one
is ingested through `ingest_paths` into a real DuckDB file between two valid lines, with a
second file after it. The summary must add up, and the lines after the hostile one must be stored.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.errors import ContractError
from dataplane.ingest import ingest_paths
from dataplane.jsontext import MAX_DEPTH, decode_json, nesting_exceeds
from dataplane.store import open_store
from tests.helpers_data import NOW, build_records, write_jsonl

PROPERTY = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
JSON_TEXT = ("initial_state", "user_scenario", "messages", "gold", "human_label")


@pytest.fixture(scope="module")
def records(world, reference_tasks) -> list[dict]:
    return build_records(world, reference_tasks, 4)


def _text(record: dict, **changes) -> str:
    return json.dumps({**record, **changes})


def _with_marker(record: dict, where: str) -> str:
    """The record's JSON with `"__at__": 0` inside the object `where` names (replaced by the caller)."""
    out = json.loads(json.dumps(record))
    target = {
        "top": out,
        "known_info": out["user_scenario"]["known_info"],
        "message": out["messages"][1],
        "arguments": next(m for m in out["messages"] if m.get("tool_calls"))["tool_calls"][0]["arguments"],
        "user": out["initial_state"]["users"][out["customer_id"]],
        "nested": out["user_scenario"]["known_info"].setdefault("a", {"b": [{"c": {}}]})["b"][0]["c"],
    }[where]
    target["__at__"] = 0
    return json.dumps(out)


def hostile_lines(template: dict) -> st.SearchStrategy[tuple[str, str | None]]:
    """(line, the rule it must get, or None when either fate is fine)."""
    depth = st.integers(MAX_DEPTH + 1, 100_000)
    deep = depth.map(lambda n: ("[" * n + "]" * n, "too_deep"))
    unbalanced = depth.map(lambda n: ("[" * n, None))
    deep_field = st.integers(MAX_DEPTH, 3000).map(
        lambda n: (_text(template, user_scenario={**template["user_scenario"], "known_info": {"x": "[" * n}}), None)
    )
    deep_value = st.integers(MAX_DEPTH + 1, 3000).map(
        lambda n: (_text(template).replace('"persona": "terse"', '"persona": ' + "[" * n + "]" * n), "too_deep")
    )
    digits = st.integers(4301, 30_000).map(lambda n: (f'{{"n": {"7" * n}}}', "number_too_large"))
    big_actions = st.integers(19, 4000).map(
        lambda n: (_text(template).replace('"actions_taken": ', '"actions_taken": ' + "9" * n), "number_too_large")
    )
    big_in_state = st.integers(19, 4000).map(
        lambda n: (_text(template).replace('"persona": "terse"', '"persona": "terse", "n": ' + "9" * n), None)
    )
    constants = st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e999", "9" * 400 + ".5"])
    non_finite = constants.map(
        lambda c: (_text(template).replace('"persona": "terse"', f'"persona": "terse", "n": {c}'), "non_finite_number")
    )
    bad_sentiment = constants.map(
        lambda c: (_text(template, customer_sentiment_delta="@").replace('"@"', c), "sentiment_out_of_range")
    )
    surrogate_text = st.integers(0xD800, 0xDFFF).map(lambda c: f"\\u{c:04x}")
    surrogates = st.tuples(surrogate_text, st.sampled_from(["policy_version", "persona", "content", "key"])).map(
        lambda t: (_surrogate(template, *t), "invalid_unicode")
    )
    duplicate = st.sampled_from(["top", "known_info", "message", "arguments", "user", "nested"]).map(
        lambda where: (_with_marker(template, where).replace('"__at__": 0', '"dup": 1, "dup": 2'), "duplicate_key")
    )
    repeated_field = st.sampled_from(["outcome", "intent", "customer_id"]).map(
        lambda key: (_text(template)[:-1] + f', "{key}": {json.dumps(template[key])}}}', "duplicate_key")
    )
    garbage = st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=["Cs"]), max_size=200).map(
        lambda t: (t, None)
    )
    return st.one_of(
        deep,
        unbalanced,
        deep_field,
        deep_value,
        digits,
        big_actions,
        big_in_state,
        non_finite,
        bad_sentiment,
        surrogates,
        duplicate,
        repeated_field,
        garbage,
    )


def _surrogate(template: dict, escape: str, where: str) -> str:
    text = _text(template)
    if where == "key":
        return text.replace('"persona": "terse"', f'"persona": "terse", "k{escape}": 1')
    if where == "content":
        return text.replace('"content": "Done.', f'"content": "{escape}Done.')
    if where == "persona":
        return text.replace('"persona": "terse"', f'"persona": "te{escape}rse"')
    return text.replace('"policy_version": "retail-agent/1"', f'"policy_version": "r{escape}"')


def _stored(db: Path) -> tuple[set[str], list[tuple]]:
    con = open_store(db, read_only=True)
    try:
        ids = {r[0] for r in con.execute("SELECT interaction_id FROM interactions").fetchall()}
        quarantine = con.execute("SELECT line_no, rule, detail FROM quarantine").fetchall()
    finally:
        con.close()
    return ids, quarantine


def _check_run(tmp: Path, files: list[Path], hostile_line_no: int, expected_rule: str | None, later: list[str]):
    summary = ingest_paths(tmp / "db.duckdb", files, now=NOW)
    assert summary.read == summary.accepted + summary.duplicates + summary.quarantined
    ids, quarantine = _stored(tmp / "db.duckdb")
    assert set(later) <= ids, "lines after the hostile one were not stored"
    assert all(rule and detail for _line, rule, detail in quarantine)
    hostile = [(rule, detail) for line, rule, detail in quarantine if line == hostile_line_no]
    if expected_rule is not None:
        assert [rule for rule, _ in hostile] == [expected_rule], hostile
    assert summary.quarantined == len(quarantine)
    return summary


@PROPERTY
@given(data=st.data())
def test_a_hostile_jsonl_line_is_accepted_or_quarantined_and_reading_goes_on(tmp_path_factory, records, data):
    line, rule = data.draw(hostile_lines(records[0]))
    tmp = tmp_path_factory.mktemp("hostile")
    first = write_jsonl(tmp / "a.jsonl", [records[1], line, records[2]])
    second = write_jsonl(tmp / "b.jsonl", [records[3]])
    later = [records[2]["interaction_id"], records[3]["interaction_id"]]
    _check_run(tmp, [first, second], 2, rule, later)


@PROPERTY
@given(data=st.data())
def test_a_hostile_json_text_column_in_parquet_is_quarantined_and_reading_goes_on(tmp_path_factory, records, data):
    line, rule = data.draw(hostile_lines(records[0]))
    column = data.draw(st.sampled_from(JSON_TEXT))
    tmp = tmp_path_factory.mktemp("hostile-parquet")
    rows = [dict(r) for r in records[1:3]]
    rows.insert(1, {**records[0], "interaction_id": "int-hostile"})
    table = {key: [r[key] for r in rows] for key in rows[0]}
    for key in JSON_TEXT:
        table[key] = [None if v is None else json.dumps(v) for v in table[key]]
    table[column][1] = line  # the whole hostile line as this column's JSON text
    pq.write_table(pa.table(table), tmp / "a.parquet")
    second = write_jsonl(tmp / "b.jsonl", [records[3]])
    summary = _check_run(
        tmp, [tmp / "a.parquet", second], 2, None, [records[2]["interaction_id"], records[3]["interaction_id"]]
    )
    if rule in ("too_deep", "number_too_large", "duplicate_key") and line.startswith(("[", "{")):
        assert summary.quarantined == 1  # decoding the column fails before the contract runs


def test_parquet_numbers_out_of_range_are_quarantined(tmp_path, records):
    rows = [dict(r) for r in records[:3]]
    table = {key: [r[key] for r in rows] for key in rows[0]}
    for key in JSON_TEXT:
        table[key] = [None if v is None else json.dumps(v) for v in table[key]]
    table["customer_sentiment_delta"] = [float("nan"), float("inf"), 0.5]
    pq.write_table(pa.table(table), tmp_path / "a.parquet")
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet"], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"sentiment_out_of_range": 2})


def test_a_repeated_key_is_never_stored_with_the_last_value(tmp_path, records):
    # Python's json keeps the last value silently; the contract must not see a record that
    # carries two answers to one question.
    line = _text(records[0])[:-1] + ', "outcome": "failed"}'
    path = write_jsonl(tmp_path / "a.jsonl", [line, records[1]])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"duplicate_key": 1})
    ids, quarantine = _stored(tmp_path / "db.duckdb")
    assert records[0]["interaction_id"] not in ids and "outcome" in quarantine[0][2]


@pytest.mark.parametrize(
    "text,rule",
    [
        ("[]", None),
        ("[" * MAX_DEPTH + "]" * MAX_DEPTH, None),
        ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "too_deep"),
        ('{"a": ' * (MAX_DEPTH + 1) + "1" + "}" * (MAX_DEPTH + 1), "too_deep"),
        ('["' + "[" * 500 + '"]', None),  # brackets inside a string do not nest
        ("[" + ",".join(["[{}]"] * 500) + "]", None),  # many, but side by side
        ("[" * 100, "invalid_json"),  # unbalanced and shallow: the decoder's own error
        ("[" * 100_000, "too_deep"),  # unbalanced and deep: the decoder gives up
    ],
)
def test_nesting_depth_is_measured_not_guessed(text, rule):
    if rule is None:
        decode_json(text, "t")
    else:
        with pytest.raises(ContractError) as info:
            decode_json(text, "t")
        assert info.value.rule == rule


def test_depth_is_measured_without_recursion():
    deep: list = []
    for _ in range(50_000):
        deep = [deep]
    assert nesting_exceeds(deep) and not nesting_exceeds([[]] * 1000)


def test_cli_ingest_exits_zero_on_hostile_lines(tmp_path, records):
    lines = ["[" * 100_000 + "]" * 100_000, '{"n": ' + "1" * 10**4 + "}", _text(records[0]).replace("terse", "\\ud800")]
    path = write_jsonl(tmp_path / "landing" / "a.jsonl", [*lines, records[1]])
    write_jsonl(tmp_path / "landing" / "b.jsonl", [records[2]])
    env = {**os.environ, "RETRAIN_HOME": str(tmp_path / "home")}
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "ingest", str(path.parent), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    summary = json.loads(done.stdout)
    assert (summary["read"], summary["accepted"], summary["quarantined"]) == (5, 2, 3)
    assert summary["quarantined_by_rule"] == {"too_deep": 1, "number_too_large": 1, "invalid_unicode": 1}


def test_a_parquet_struct_holding_a_non_json_value_is_quarantined(tmp_path, records):
    # A struct column decodes to a dict as it is: a timestamp inside one is no JSON value.
    rows = [dict(r) for r in records[:2]]
    table = {key: [r[key] for r in rows] for key in rows[0]}
    for key in ("initial_state", "messages", "gold", "human_label"):
        table[key] = [None if v is None else json.dumps(v) for v in table[key]]
    when = [NOW, None]
    table["user_scenario"] = [
        {"instruction": "i", "persona": "p", "known_info": {"when": w, "note": "n"}} for w in when
    ]
    pq.write_table(pa.table(table), tmp_path / "a.parquet")
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet"], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"wrong_type": 1})


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        # Integers within int64: a larger one is refused (number_too_large) before depth is measured.
        st.none() | st.integers(-(2**63), 2**63 - 1) | st.text(alphabet='[]{}"\\ab', max_size=4),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(alphabet='[]{"\\k', max_size=3), inner, max_size=3)
        ),
        max_leaves=80,
    )
)
def test_the_text_depth_check_agrees_with_the_container_walk(value):
    text = json.dumps(value)
    try:
        decode_json(text, "t")
    except ContractError as err:
        assert err.rule == "too_deep" and nesting_exceeds(value)
    else:
        assert not nesting_exceeds(value)
