"""PII is masked wherever a record carries text, and every no-PII check reads the whole record.

The checks (the window frame's PII text, the GX `no_pii` expectation, the `window_no_pii` asset
check) are shown failing on a record that bypassed the scrubber: inserted into the store directly.
"""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane import pii_records, scrub
from dataplane.contract import validate_record
from dataplane.ingest import ingest_paths
from dataplane.pii_records import record_pii, scrub_record
from dataplane.rowtext import canonical_json, scrubbed_canonical
from dataplane.scrub import find_pii, scrub_json_text
from dataplane.store import open_store, prepare_row
from dataplane.validation import validate_window
from dataplane.window import cut_window, records_frame, window_frame
from tests.helpers_data import BASE_TIME, NOW, build_records, record_from_task, write_jsonl

pytestmark = pytest.mark.filterwarnings("ignore")

CARD, CARD_DIGITS, PHONE, SSN = "4111 1111 1111 1111", "4012888888881881", "(415) 555-0100", "123-45-6789"
RAW_PII = (CARD, CARD_DIGITS, PHONE, SSN, "4111", "555-0100", "45-6789")


@pytest.fixture(scope="module")
def good(world, reference_tasks) -> dict:
    return record_from_task(world, reference_tasks[0], 1)


def _dirty(record: dict) -> dict:
    """PII in every producer-written place the old scrubber skipped."""
    out = copy.deepcopy(record)
    calls = [m for m in out["messages"] if m.get("tool_calls")]
    calls[0]["tool_calls"][0]["arguments"]["summary"] = {"notes": [f"customer card {CARD}, phone {PHONE}"]}
    out["messages"].append(
        {"role": "assistant", "content": "", "tool_calls": [{"name": "handover", "arguments": {"ssn": SSN}}]}
    )
    out["messages"].append({"role": "tool", "name": "handover", "content": f'{{"callback": "{PHONE}"}}'})
    out["user_scenario"]["known_info"]["card"] = CARD
    out["user_scenario"]["known_info"]["cards"] = [{"number": int(CARD_DIGITS)}]
    out["user_scenario"]["known_info"][f"ssn {SSN}"] = "as a key"
    out["user_scenario"]["persona"] = f"terse; gives out {PHONE} freely"
    out["user_scenario"]["channel"] = {"phone": PHONE}  # an extra scenario field
    if out["gold"] is not None:
        out["gold"]["outputs"].append(f"card on file {CARD}")
    out["human_label"]["rater"] = f"ops ({PHONE})"
    out["initial_state"]["users"][out["customer_id"]]["phone"] = PHONE
    out["policy_version"] = f"retail-agent/1 for {PHONE}"
    return out


def test_scrub_record_masks_every_free_form_place(good):
    dirty = validate_record(_dirty(good), now=NOW)
    assert len(record_pii(dirty)) >= 12
    clean = scrub_record(dirty)
    assert record_pii(clean) == []
    text = json.dumps(clean)
    assert not [p for p in RAW_PII if p in text]
    known = clean["user_scenario"]["known_info"]
    assert known["card"] == "[CARD]" and known["cards"] == [{"number": "[CARD]"}] and "ssn [NATIONAL_ID]" in known
    assert clean["user_scenario"]["persona"] == "terse; gives out [PHONE] freely"
    assert clean["human_label"]["rater"] == "ops ([PHONE])"
    # The retail world's identifiers survive (the test in test_dataplane_contract covers the world).
    assert clean["initial_state"]["orders"] == dirty["initial_state"]["orders"]
    for before, after in zip(dirty["gold"]["actions"], clean["gold"]["actions"]):
        assert {k: v for k, v in after["arguments"].items() if k != "summary"} == {
            k: v for k, v in before["arguments"].items() if k != "summary"
        }


def test_a_clean_record_is_shared_not_copied(good):
    # The reference record holds its customer's address: once pseudonymised, nothing is left to
    # change, and a second scrub shares every field.
    record = scrub_record(validate_record(good, now=NOW))
    clean = scrub_record(record)
    assert all(clean[k] is record[k] for k in pii_records.FREE_FORM_FIELDS)


def test_pii_everywhere_is_accepted_and_none_of_it_is_stored(tmp_path, good):
    path = write_jsonl(tmp_path / "a.jsonl", [_dirty(good)])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    assert (summary.accepted, summary.quarantined) == (1, 0)
    con = open_store(tmp_path / "db.duckdb", read_only=True)
    try:
        rows = con.execute("SELECT * FROM interactions").fetchall()
    finally:
        con.close()
    raw = repr(rows)
    assert not [p for p in RAW_PII if p in raw]
    assert "[CARD]" in raw and "[PHONE]" in raw and "[NATIONAL_ID]" in raw
    assert record_pii(json.loads(rows[0][13])) == []


def test_pii_next_to_a_json_escape_is_masked_in_quarantine(tmp_path, good):
    bad = {**copy.deepcopy(good), "outcome": "won"}
    bad["messages"][1]["content"] = f"line one\n{CARD_DIGITS}\tand \\u0034111 1111 1111 1111"
    path = write_jsonl(tmp_path / "a.jsonl", [bad])
    ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    con = open_store(tmp_path / "db.duckdb", read_only=True)
    try:
        (raw,) = con.execute("SELECT raw FROM quarantine").fetchone()
    finally:
        con.close()
    assert CARD_DIGITS not in raw and "[CARD]" in raw
    assert record_pii(json.loads(raw)) == []


def test_json_text_without_pii_is_kept_exactly():
    text = '{"a": "caf\\u00e9 \\n order #W6067464, \\"item\\" 9624127908\\\\"}'
    assert scrub_json_text(text) == text


def test_an_id_that_reads_as_pii_is_quarantined_not_masked(tmp_path, good):
    path = write_jsonl(tmp_path / "a.jsonl", [{**good, "interaction_id": CARD_DIGITS}])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    assert summary.quarantined_by_rule == {"pii_in_id": 1}


def test_keys_that_mask_alike_are_quarantined(tmp_path, good):
    record = copy.deepcopy(good)
    record["user_scenario"]["known_info"].update({CARD: 1, "4242 4242 4242 4242": 2})
    path = write_jsonl(tmp_path / "a.jsonl", [record])
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    assert summary.quarantined_by_rule == {"pii_key_collision": 1}


# The prefilter must never clear a text some pass would mask: generated from PII-shaped pieces.
_pieces = st.sampled_from(
    [
        "4111",
        "1111",
        "555",
        "0100",
        "123",
        "45",
        "6789",
        "AB",
        "C",
        "+44",
        "(415)",
        "#W",
        "9",
        "٤١١",
        "12 34",
        "020",
        "07700",
        "0044",
        "(0)",
        "DE89",
        "3704",
        "0044",
        "0532",
        "0130",
        "00",
        "gb82",
        "WEST",
        "a@b.co",
        "@",
        "user_0123456789abcdef@masked.invalid",
        "\u200b",
        "\u00a0",
        "\u2013",
        "４",
        "\\n",
        "\\u0007",
    ]
)
_glue = st.sampled_from(["", " ", "-", ".", "\n", "x", "_", "/", "\t", '"', "é"])


@settings(max_examples=600, deadline=None)
@given(st.lists(st.tuples(_pieces, _glue), max_size=8), st.text(alphabet="0123456789 -.+()AB", max_size=30))
def test_prefilter_never_clears_a_text_with_pii(pieces, noise):
    text = "".join(p + g for p, g in pieces) + noise
    if find_pii(text):
        assert pii_records.may_hold_pii(text)
        # Long texts take the shape path; a record's JSON holds the text among other fields.
        assert pii_records.may_hold_pii("é" * 300 + text)
    # The record walk (with its own shortcuts for short strings) masks what scrub_text masks.
    assert pii_records.scrub_field({"k": [text], text: 1}, "f") == {
        "k": [scrub.scrub_text(text)],
        scrub.scrub_text(text): 1,
    }


@pytest.fixture()
def bypassed(tmp_path, world, reference_tasks):
    """A store of 12 scrubbed records plus one whose PII (only where the old checks never looked:
    tool-call arguments, known_info, persona) was written into `interactions.record` directly."""
    records = build_records(world, reference_tasks, 12)
    path = write_jsonl(tmp_path / "landing.jsonl", records)
    ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
    con = open_store(tmp_path / "db.duckdb")
    leaky = copy.deepcopy(validate_record(record_from_task(world, reference_tasks[1], 99, ended_at=BASE_TIME), now=NOW))
    call = leaky["messages"][2]["tool_calls"][0]
    call["arguments"] = {**call["arguments"], "note": f"card {CARD}"}  # not the gold action it aliases
    leaky["user_scenario"]["known_info"]["phone"] = PHONE
    leaky["user_scenario"]["persona"] = f"ssn {SSN}"
    row = list(prepare_row(leaky).values)  # scrubs: the stored text below is put back raw
    row[13] = json.dumps(leaky)
    # The table's columns in order: the prepared row's 15 up to content_hash, the source and time of
    # the insert, then domain and replayable.
    con.execute(
        "INSERT INTO interactions VALUES (" + ", ".join("?" * 19) + ")", [*row[:15], "direct-insert", NOW, *row[15:]]
    )
    try:
        yield con, cut_window(con, NOW, size=100)
    finally:
        con.close()


def test_window_frame_pii_text_reads_the_whole_stored_record(bypassed):
    con, info = bypassed
    frame = window_frame(con, info.week)
    kinds = {rid: find_pii(text) for rid, text in zip(frame["interaction_id"], frame["text"])}
    # The bypassing record keeps its customer's raw address (in initial_state and known_info) too.
    leaky = kinds.pop("int-000099")
    assert {"card", "phone", "national_id", "email"} == set(leaky)
    assert set(map(len, kinds.values())) == {0}


def test_gx_no_pii_fails_on_a_record_that_bypassed_the_scrubber(bypassed, home):
    con, info = bypassed
    report = validate_window(window_frame(con, info.week), home, min_gold_share=0.0, name="bypass")
    result = report.result("no_pii")
    assert not result["success"] and result["unexpected_count"] == 1 and result["sample_ids"] == ["int-000099"]


def test_window_no_pii_asset_check_fails_on_it(bypassed, home):
    from assets.data import WindowConfig, _window_checks
    from assets.handoffs import IngestedInteractions, RecentIngests
    from dataplane.ingest import IngestSummary

    con, info = bypassed
    report = validate_window(window_frame(con, info.week), home, min_gold_share=0.0, name="bypass")
    ingested = IngestedInteractions(IngestSummary(), 13, RecentIngests(1, 13, 13, 0, 0, 0))
    checks = {c.check_name: c for c in _window_checks(report, info, ingested, WindowConfig())}
    assert checks["window_no_pii"].passed is False
    found = checks["window_no_pii"].metadata["found"]
    assert getattr(found, "value", found) == 1


def test_a_clean_window_passes_the_pii_checks(world, reference_tasks, home):
    frame = records_frame(
        [scrub_record(validate_record(_dirty(r), now=NOW)) for r in build_records(world, reference_tasks, 5)]
    )
    report = validate_window(frame, home, min_gold_share=0.0, name="clean")
    assert report.result("no_pii")["success"]


def test_the_stored_text_is_the_canonical_json_of_the_scrubbed_record(world, reference_tasks):
    # Stored text must be exactly what the encoder writes, or content hashes would change with
    # the way a record was scrubbed.
    records = build_records(world, reference_tasks, 6)
    for record in [*records, *(_dirty(r) for r in records)]:
        valid = validate_record(record, now=NOW)
        clean, text = scrubbed_canonical(valid)
        assert clean == scrub_record(valid)
        assert text == canonical_json(clean)
        assert text == json.dumps(clean, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
