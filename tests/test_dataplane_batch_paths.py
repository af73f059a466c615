"""The Parquet batch path gives the rows, stored records and quarantine rows of the plain path.

Reading converts a batch a column at a time (a dictionary text column index by index) and decodes
a JSON text repeated in its column once; it is compared with `pq.read_table(...).to_pylist()`
decoded row by row. Storing skips the scrub walk of a field whose repeated JSON text
`json_text_pii_free` cleared; hypothesis checks over PII-prone text that the walk would have
returned every such value unchanged, and an ingest is compared row by row with validating and
storing each plainly read row with every field walked.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane import pii_records
from dataplane.contract import ContractError, validate_record
from dataplane.ingest import ingest_paths
from dataplane.jsontext import decode_json
from dataplane.parquet_rows import JSON_TEXT_FIELDS, read_parquet
from dataplane.rowtext import storable_text
from dataplane.scrub import scrub_json_text
from dataplane.store import open_store, prepare_row
from tests.helpers_data import NOW, build_records

# Texts of user_scenario and gold that many rows share: clean ones, PII of every kind, escapes,
# non-ASCII text, and texts the decoder refuses.
_SCENARIOS = [
    '{"instruction":"Ask about your order.","known_info":{},"persona":"terse"}',
    '{"instruction":"Ask about order #W0001234.","known_info":{"order":"#W0001234"},"persona":"calm"}',
    '{"instruction":"Call me on 415-555-0100","known_info":{},"persona":"terse"}',
    '{"instruction":"Write to ann@example.com","known_info":{"email":"ann@example.com"},"persona":"x"}',
    '{"instruction":"Card\\n4111 1111 1111 1111","known_info":{},"persona":"terse"}',
    '{"instruction":"\\u0034\\u0031\\u0035-555-0100","known_info":{},"persona":"terse"}',
    # Every character escaped: only the decoded text shows the phone number.
    '{"instruction":"\\u0034\\u0031\\u0035\\u002d\\u0035\\u0035\\u0035\\u002d\\u0030\\u0031\\u0030\\u0030",'
    '"known_info":{},"persona":"terse"}',
    '{"instruction":"IBAN GB82 WEST 1234 5698 7654 32","known_info":{},"persona":"terse"}',
    '{"instruction":"Caf\u00e9 \u260e 415\u00a0555\u00a00100","known_info":{},"persona":"terse"}',
    '{"instruction":"NI AB123456C, SSN 123-45-6789","known_info":{"n":123456789},"persona":"terse"}',
    '{"instruction":"Ring +44 20 7946 0958 or 020 7946 0958","known_info":{},"persona":"terse"}',
    '{"instruction":"ok","known_info":{},"persona":"terse","4111111111111111":"x"}',
    '{"instruction":"ok","known_info":{},"persona":"terse","extra":[1,2,3]}',
    '{"instruction":"ok","known_info":{},"persona":"terse","instruction":"twice"}',
    '{"instruction":"ok", "known_info":',
    '{"instruction":1,"known_info":{},"persona":"terse"}',
]
_GOLDS = [
    None,
    '{"actions":[],"outputs":["soon"]}',
    '{"actions":[{"name":"get_order_details","arguments":{"order_id":"#W0001234"}}],"outputs":[]}',
    '{"actions":[{"name":"find_user_id_by_email","arguments":{"email":"bo@example.org"}}],"outputs":[]}',
    '{"actions":[],"outputs":["call 415-555-0199"],"note":"extra keys are dropped"}',
    '{"actions":[],"outputs":[}',
]


def _rows(records: list[dict], count: int, seed: int = 7) -> list[dict]:
    """`count` rows cycling through `records`, ids unique, the free-form fields as JSON text."""
    pick = random.Random(seed)
    rows = []
    for i in range(count):
        record = dict(records[i % len(records)])
        record["interaction_id"] = f"int-{i:06d}"
        for key in JSON_TEXT_FIELDS:
            value = record.get(key)
            record[key] = None if value is None else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        record["user_scenario"] = pick.choice(_SCENARIOS)
        record["gold"] = pick.choice(_GOLDS)
        if i % 17 == 0:
            record["messages"] = '[{"role":"user","content":"mail ann@example.com or 415 555 0100"}]'
        if i % 29 == 0:
            record["initial_state"] = '{"users":{},"orders":{}'  # cut short
        rows.append(record)
    return rows


def _write(path, rows: list[dict], row_group_size: int) -> None:
    table = pa.Table.from_pylist(rows)
    # Dictionary-encoded in the file and read back as dictionaries: the columns the batch path
    # expands index by index (user_scenario and gold repeat; messages mostly do not).
    pq.write_table(table, path, row_group_size=row_group_size, use_dictionary=True)


def _plain_rows(path) -> list[dict]:
    table = pq.read_table(path)
    plain = pa.schema([f.with_type(f.type.value_type) if pa.types.is_dictionary(f.type) else f for f in table.schema])
    return table.cast(plain).to_pylist()


def _plain_decoded(row: dict, row_no: int) -> tuple[dict | None, ContractError | None]:
    obj = dict(row)
    for key in JSON_TEXT_FIELDS:
        if isinstance(obj.get(key), str):
            try:
                obj[key] = decode_json(obj[key])
            except ContractError as err:
                return None, err.at(f"row {row_no} {key}")
    return obj, None


@pytest.fixture(scope="module")
def records(world, reference_tasks) -> list[dict]:
    return build_records(world, reference_tasks, 8)


@pytest.mark.parametrize("row_group_size", [37, 1000])
def test_batch_reading_matches_row_by_row_conversion(tmp_path, records, row_group_size):
    rows = _rows(records, 400)
    path = tmp_path / "a.parquet"
    _write(path, rows, row_group_size)
    items = list(read_parquet(path, 1 << 20))
    plain = _plain_rows(path)
    assert len(items) == len(plain) == len(rows)
    cleared = 0
    for row_no, (item, row) in enumerate(zip(items, plain), start=1):
        obj, error = _plain_decoded(row, row_no)
        assert item.line_no == row_no
        assert item.raw == row and list(item.raw) == list(row)
        if error is None:
            assert item.error is None and item.obj == obj
        else:
            assert (item.error.rule, item.error.detail) == (error.rule, error.detail)
        for key in item.pii_free:
            cleared += 1
            assert pii_records.json_text_pii_free(row[key])
    assert cleared  # the clean repeated texts were cleared: the test reaches the skip


def test_ingest_stores_what_the_plain_path_stores(tmp_path, records):
    rows = _rows(records, 300, seed=11)
    path = tmp_path / "a.parquet"
    _write(path, rows, 64)
    summary = ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)

    expected_rows, expected_quarantine = {}, []
    for row_no, row in enumerate(_plain_rows(path), start=1):
        obj, error = _plain_decoded(row, row_no)
        try:
            if error is not None:
                raise error
            prepared = prepare_row(validate_record(obj, NOW))  # every free-form field walked
        except ContractError as err:
            expected_quarantine.append((row_no, err.rule, storable_text(scrub_json_text(err.detail))))
            continue
        expected_rows[prepared.interaction_id] = (prepared.values[13], prepared.content_hash)

    con = open_store(tmp_path / "db.duckdb", read_only=True)
    try:
        stored = {
            rid: (text, digest)
            for rid, text, digest in con.execute(
                "SELECT interaction_id, record, content_hash FROM interactions"
            ).fetchall()
        }
        quarantined = con.execute("SELECT line_no, rule, detail FROM quarantine ORDER BY line_no").fetchall()
    finally:
        con.close()
    assert stored == expected_rows
    assert quarantined == expected_quarantine
    assert summary.accepted == len(expected_rows) and summary.quarantined == len(expected_quarantine)
    # The PII in shared texts was masked, not skipped.
    assert not any("415-555-0100" in text or "ann@example.com" in text for text, _ in stored.values())


# Strings a scanner reads as PII (whole or in part), and their near misses.
_PII_PIECES = [
    "415-555-0100",
    "(415) 555-0100",
    "123-45-6789",
    "123456789",
    "4111 1111 1111 1111",
    "4111111111111111",
    "ann@example.com",
    "GB82 WEST 1234 5698 7654 32",
    "GB82WEST12345698765432",
    "AB123456C",
    "AB 12 34 56 C",
    "+44 20 7946 0958",
    "0044 20 7946 0958",
    "020 7946 0958",
    "07700900123",
    "#W0001234",
    "2024-01-01T00:00:17Z",
    "user_12345",
    "user_0123456789abcdef@masked.invalid",
]
_TEXT = st.one_of(
    st.text(alphabet="0123456789 -.+()/@#:_ABCDGWZabxz", max_size=20),
    st.sampled_from(_PII_PIECES),
    st.tuples(st.sampled_from(_PII_PIECES), st.text(alphabet="0123456789 -x@", max_size=4)).map("".join),
)
_SCALAR = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**18), 10**18),
    st.sampled_from([123456789, -123456789, 4111111111111111, 10**12, 99999999]),
    st.floats(allow_nan=False, allow_infinity=False),
    _TEXT,
)
_VALUES = st.recursive(
    _SCALAR, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_TEXT, inner, max_size=4), max_leaves=10
)
_SCANNERS = [pii_records.STRICT, pii_records.domain_scanner("retail"), pii_records.domain_scanner("airline")]


@settings(max_examples=1500, deadline=None)
@given(_VALUES, st.sampled_from([(",", ":"), (", ", ": "), (",", ": ")]), st.booleans())
def test_a_cleared_json_text_holds_nothing_any_walk_masks(value, separators, ascii_only):
    text = json.dumps(value, separators=separators, ensure_ascii=ascii_only)
    if not pii_records.json_text_pii_free(text):
        return
    for scanner in _SCANNERS:
        assert pii_records.scrub_field(value, "initial_state", scanner) is value
        assert not pii_records.record_pii({"initial_state": value}, scanner)


@pytest.mark.parametrize("piece", _PII_PIECES[:-4])
def test_pii_anywhere_in_a_text_keeps_it_from_being_cleared(piece):
    for value in (piece, [piece], {"k": piece}, {piece: 1}, {"a": ["x", {"b": f"see {piece}."}]}):
        assert not pii_records.json_text_pii_free(json.dumps(value, separators=(",", ":")))
