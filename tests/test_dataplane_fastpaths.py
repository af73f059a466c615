"""The ingest fast paths give the same answers as the plain checks they shortcut.

Contract: exact-type tests first, the generic check (subclasses, error text) only on a miss.
Scrubbing: a pass is skipped when the text has too few digits for it to mask anything.
Parquet: only timestamp and JSON-text columns are converted per row. Ingest: the cyclic GC is
paused per file and its state restored. Storing: a record whose objects hold no PII is serialised
once, as a whole.
"""

from __future__ import annotations

import copy
import gc
import json
import struct
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dataplane import jsontext, pii_records, record_model, rowtext, scrub, timestamps
from dataplane.contract import ContractError, validate_record
from dataplane.ingest import ingest_paths
from dataplane.store import open_store, prepare_row
from tests.helpers_data import NOW, build_records, count_slow_encodes, record_from_task, write_jsonl, write_parquet


@pytest.fixture(scope="module")
def good(world, reference_tasks) -> dict:
    return record_from_task(world, reference_tasks[0], 1)


@pytest.fixture(scope="module")
def records(world, reference_tasks) -> list[dict]:
    return build_records(world, reference_tasks, 6)


class _Text(str):
    """A str subclass: not what json.loads yields, but the contract accepts it."""


def test_str_subclasses_take_the_slow_path_and_hash_alike(good):
    odd = copy.deepcopy(good)
    for key in ("interaction_id", "policy_version", "customer_id", "intent", "outcome"):
        odd[key] = _Text(odd[key])
    odd["messages"] = [{**m, "role": _Text(m["role"]), "content": _Text(m["content"])} for m in odd["messages"]]
    assert prepare_row(validate_record(odd, NOW)).content_hash == prepare_row(validate_record(good, NOW)).content_hash


@pytest.mark.parametrize(
    "key,value,rule",
    [
        ("actions_taken", True, "wrong_type"),
        ("customer_sentiment_delta", False, "wrong_type"),
        ("customer_sentiment_delta", float("nan"), "sentiment_out_of_range"),
        ("customer_sentiment_delta", -1.5, "sentiment_out_of_range"),
        ("escalation_was_necessary", 1, "wrong_type"),
    ],
)
def test_scalar_rules_unchanged(good, key, value, rule):
    with pytest.raises(ContractError) as info:
        validate_record({**good, key: value}, NOW)
    assert info.value.rule == rule and key in info.value.detail


def test_bad_timestamp_is_rejected_every_time(good):
    # Successful parses are cached; failures must not be.
    for _ in range(2):
        with pytest.raises(ContractError) as info:
            validate_record({**good, "ended_at": "2024-13-01T00:00:00Z"}, NOW)
        assert info.value.rule == "bad_timestamp"


def _scrub_every_pass(text: str) -> str:
    """What the scanner replaces when no pass is skipped (every pass runs on the normalised text)."""
    norm = scrub.normalise(text)
    return scrub.STRICT._spans(norm, scrub._PASSES)


def _scrub_skipping(text: str) -> str:
    norm = scrub.normalise(text)
    return scrub.STRICT._spans(norm, scrub._shape_passes(norm))


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="0123456789٣ -.+()#Wx_\n\u200b", max_size=60))
def test_digit_count_skip_never_changes_the_result(text):
    assert _scrub_skipping(text) == _scrub_every_pass(text)


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet="0123456789 -.+()/ABCDEWZxlm#@", max_size=40))
def test_shape_skip_never_changes_the_result(text):
    # The shape tests skip passes on ASCII text; capitals and small letters reach the UK id's and
    # the IBAN's passes, '0' and '/' the national phone numbers', '@' the e-mail one.
    assert _scrub_skipping(text) == _scrub_every_pass(text)
    assert _scrub_skipping(f"[{text}]") == _scrub_every_pass(f"[{text}]")


# Each kind at exactly the fewest digits its pass is given, and mixes.
@pytest.mark.parametrize(
    "text",
    [
        "card 4222222222222",
        "ssn 123-45-6789",
        "ssn 123456789",
        "AB 12 34 56 C",
        "call 415-555-0100",
        "+44 123 456",
        "4111 1111 1111 1111",
        "+44 20 7946 0958",
        "(415) 555-0100",
        "+1 415-555-0100 and 4111111111111111",
        "order #W0001234, call 415-555-0001",
        "0044 20 7946 0958",
        "01 23 45 67 89",
        "(030) 1234567",
        "07700900123",
        "iban DE89 3704 0044 0532 0130 00",
        "mail a@b.co",
    ],
)
def test_skip_keeps_every_kind_masked(text):
    spans = _scrub_skipping(text)
    assert spans and spans == _scrub_every_pass(text)


def _as_aware_timestamps(table: pa.Table) -> pa.Table:
    for key in ("started_at", "ended_at"):
        stamps = [
            datetime.fromisoformat(v.replace("Z", "+00:00")).astimezone(UTC) for v in table.column(key).to_pylist()
        ]
        table = table.set_column(table.schema.get_field_index(key), key, pa.array(stamps, pa.timestamp("us", "UTC")))
    return table


def _as_dictionary_text(table: pa.Table) -> pa.Table:
    for key in ("user_scenario", "messages", "intent"):
        index = table.schema.get_field_index(key)
        table = table.set_column(index, key, table.column(key).dictionary_encode())
    return table


def test_parquet_dictionary_columns_decode_like_plain_text(tmp_path, records):
    write_parquet(tmp_path / "a.parquet", records[:3], _as_dictionary_text)
    write_jsonl(tmp_path / "b.jsonl", records[:3])
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet", tmp_path / "b.jsonl"], now=NOW)
    assert (summary.accepted, summary.duplicates, summary.quarantined) == (3, 3, 0)


def test_parquet_timestamp_columns_become_text(tmp_path, records):
    # An aware Arrow timestamp reads back as an aware datetime: it passes as the same instant.
    write_parquet(tmp_path / "a.parquet", records[:2], _as_aware_timestamps)
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet"], now=NOW)
    assert (summary.accepted, summary.quarantined) == (2, 0)
    con = open_store(tmp_path / "db.duckdb", read_only=True)
    try:
        stored = {r[0]: r[1] for r in con.execute("SELECT interaction_id, ended_at FROM interactions").fetchall()}
    finally:
        con.close()
    for record in records[:2]:
        assert stored[record["interaction_id"]] == datetime.fromisoformat(record["ended_at"].replace("Z", "+00:00"))


def test_naive_parquet_timestamp_is_still_rejected(tmp_path, records):
    def naive(table: pa.Table) -> pa.Table:
        index = table.schema.get_field_index("ended_at")
        return table.set_column(index, "ended_at", pa.array([datetime(2024, 6, 3, 9, 30)] * len(table)))

    write_parquet(tmp_path / "a.parquet", records[:2], naive)
    summary = ingest_paths(tmp_path / "db.duckdb", [tmp_path / "a.parquet"], now=NOW)
    assert summary.quarantined_by_rule == {"bad_timestamp": 2}


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_state_is_restored_after_ingest(tmp_path, records, enabled):
    path = write_jsonl(tmp_path / "a.jsonl", records[:2])
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        ingest_paths(tmp_path / "db.duckdb", [path], now=NOW)
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()


def test_a_record_is_serialised_once(good, monkeypatch):
    # PII in a message, a tool result, known_info, a key and an integer: every free-form field is
    # walked, and the clean record serialised once.
    record = copy.deepcopy(good)
    record["messages"][0]["content"] += " call me on 415-555-0100"
    record["messages"].append({"role": "tool", "name": "t", "content": '{"card": "4111 1111 1111 1111"}'})
    known = record["user_scenario"]["known_info"]
    known.update({"ssn": "123-45-6789", "4242 4242 4242 4242": "card", "number": 4012888888881881})
    valid = validate_record(record, NOW)
    calls = count_slow_encodes(monkeypatch)
    clean, text = rowtext.scrubbed_canonical(valid)
    assert calls == [1]
    assert not [p for p in ("555-0100", "4111", "6789", "4242", "4012", "@example.com") if p in text]
    assert text == rowtext.canonical_json(clean)


def test_short_clean_strings_are_remembered_and_the_memory_is_bounded(monkeypatch):
    scanned = []
    real = scrub.STRICT.scrub
    monkeypatch.setattr(scrub.STRICT, "scrub", lambda text: scanned.append(text) or real(text))
    walk = pii_records._Walk(scrub.STRICT)
    for _ in range(3):
        assert walk.text("get_order_details") == "get_order_details"
        assert walk.text("call 415-555-0100") == "call [PHONE]"  # PII is never remembered
    assert scanned == ["get_order_details", *["call 415-555-0100"] * 3]
    for i in range(pii_records._KNOWN_CLEAN_MAX + 10):
        walk.text(f"tool_name_{i}")
    assert len(walk.known) <= pii_records._KNOWN_CLEAN_MAX


# ---- the shortcuts of the ingest hot path, each against the plain code it must equal ----


def _id_may_hold_pii_by_str(value: str) -> bool:
    """`record_model._id_may_hold_pii` as it was: a `str.translate` shape (the bytes one replaced it)."""
    table = str.maketrans(
        {
            chr(c): "d" if chr(c).isdigit() else "s" if chr(c) in ".-" else "L" if chr(c).isupper() else "_"
            for c in range(128)
        }
    )
    if value[:1].isdigit() or ":" in value:
        return True
    shape = value.translate(table)
    if "d" * 13 in shape or "dddsd" in shape or "LLdddddd" in shape:
        return True
    return len(value) >= 15 and record_model._ID_IBAN.search(value) is not None


@settings(max_examples=1500, deadline=None)
@given(st.text(alphabet="0123456789AZGBdx_.:-", min_size=1, max_size=40))
def test_id_shape_in_bytes_gives_the_str_shape_answer(value):
    # Identifiers reach the check only after their pattern ([A-Za-z0-9_.:-]): ASCII.
    assert record_model._id_may_hold_pii(value) == _id_may_hold_pii_by_str(value)


def test_non_ascii_id_is_always_scanned():
    assert record_model._id_may_hold_pii("ab\u0663cd")


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {"content": st.text(alphabet="0123456789 -+@.ab\u200b", max_size=30)},
            optional={
                "role": st.just("user"),
                "name": st.text(alphabet="0123456789 -@.ab", max_size=20),
                "tool_calls": st.lists(
                    st.fixed_dictionaries(
                        {"name": st.just("f"), "arguments": st.dictionaries(st.just("k"), st.text("0123456789 -@.ab"))}
                    ),
                    max_size=2,
                ),
            },
        ),
        min_size=1,
        max_size=3,
    )
)
def test_message_of_role_and_content_scrubs_as_a_whole_message(messages):
    # A message of role and content alone skips the tool-call and name lookups: the same result as
    # walking its content as any other free-form text; any other message (even of two keys) is
    # walked in full.
    scanner = pii_records.domain_scanner()
    clean = pii_records.scrub_field(messages, "messages", scanner)
    for before, after in zip(messages, clean):
        assert after["content"] == scanner.scrub(before["content"])
        if "name" in before:
            assert after["name"] == scanner.scrub(before["name"])
        for call, new_call in zip(before.get("tool_calls") or [], after.get("tool_calls") or []):
            assert new_call["arguments"] == pii_records.scrub_field(call["arguments"], "initial_state", scanner)
        if after == before:
            assert after is before


@pytest.mark.parametrize(
    "text, rule",
    [
        ("", "invalid_json"),
        (" {}", None),
        ('{"a": 1} x', "invalid_json"),
        ('{"a": 1, "a": 2}', "duplicate_key"),
        ("[" * 65 + "]" * 65, "too_deep"),
        ("[" * 64 + "]" * 64, None),
        ("9" * 30, "number_too_large"),
    ],
)
def test_decode_json_with_the_scanner_inlined_keeps_every_rule(text, rule):
    if rule is None:
        assert jsontext.decode_json(text) == json.loads(text)
    else:
        with pytest.raises(ContractError) as err:
            jsontext.decode_json(text, "line 3")
        assert err.value.rule == rule and err.value.detail.startswith("line 3")


def _same_json(a, b) -> bool:
    """Equal as JSON values and in every type and float bit (0.0 is not -0.0, 1 is not 1.0)."""
    if type(a) is not type(b):
        return False
    if type(a) is dict:
        return list(a) == list(b) and all(_same_json(a[k], b[k]) for k in a)
    if type(a) is list:
        return len(a) == len(b) and all(_same_json(x, y) for x, y in zip(a, b))
    if type(a) is float:
        return struct.pack("<d", a) == struct.pack("<d", b) or (a != a and b != b)
    return a == b


_json_leaves = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64 + 5), max_value=2**64 + 5)
    | st.integers(min_value=-(2**63) - 2, max_value=-(2**63) + 2)
    | st.integers(min_value=2**63 - 2, max_value=2**63 + 2)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from(':"\\{}[],u'))
)
_json_values = st.recursive(
    _json_leaves,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(st.tuples(st.sampled_from(["a", "b", ":", "a:b"]) | st.text(max_size=4), inner), max_size=4)
    ),
    max_leaves=25,
)


def _as_text(value, draw_ascii: bool, spaced: bool) -> str:
    """JSON text of `value`, where a list of pairs is written as an object (so keys may repeat);
    `spaced` also spells floats in another way and escapes colons in strings."""
    if type(value) is list and value and all(type(p) is tuple for p in value):
        sep = ", " if spaced else ","
        return (
            "{"
            + sep.join(
                json.dumps(k, ensure_ascii=draw_ascii) + (": " if spaced else ":") + _as_text(v, draw_ascii, spaced)
                for k, v in value
            )
            + "}"
        )
    if type(value) is list:
        return "[" + (", " if spaced else ",").join(_as_text(v, draw_ascii, spaced) for v in value) + "]"
    if type(value) is tuple:
        return _as_text(list(value), draw_ascii, spaced)
    if type(value) is float and value == value and abs(value) != float("inf") and spaced:
        return f"{value:.17e}"  # another spelling of the same float
    if type(value) is str and spaced:
        return json.dumps(value, ensure_ascii=draw_ascii).replace(":", "\\u003a")
    return json.dumps(value, ensure_ascii=draw_ascii)


def _slow_or_error(text: str):
    try:
        return jsontext._read_slow(text, "")
    except ContractError as err:
        return err


@settings(max_examples=3000, deadline=None)
@given(_json_values, st.booleans(), st.booleans())
def test_the_fast_reader_reads_as_the_slow_one_or_steps_aside(value, ascii_only, spaced):
    text = _as_text(value, ascii_only, spaced)
    fast = jsontext._read_fast(text)
    if fast is not jsontext._SLOW:
        slow = _slow_or_error(text)
        assert not isinstance(slow, ContractError), (text, slow)
        assert _same_json(fast, slow), text


@pytest.mark.parametrize(
    "text",
    [
        '{"a": 1, "a": 2}',
        '{"a": {"x": ":"}, "b": 1, "a": 2}',
        '{"a": "\\u003a", "a": 1}',  # a colon escaped inside a string
        '{"k\\u003A": 1, "k\\u003A": 2}',
        '{"a": 1, "a": 2, "b": "\\u003a"}',  # the escaped colon makes up for the key lost
        "9223372036854775808",  # past int64, inside uint64: orjson reads it as an int
        "[18446744073709551616]",  # past uint64: orjson reads it as a float
        "-9223372036854775809",
        "NaN",
        '"\\ud800"',
    ],
)
def test_what_orjson_reads_otherwise_goes_the_slow_way(text):
    assert jsontext._read_fast(text) is jsontext._SLOW


@pytest.mark.parametrize("depth", [65, 300, 500, 990, 1100, 5000])
@pytest.mark.parametrize("inner", ["", '{"a": 1}'])
def test_a_deep_text_read_by_orjson_gets_the_slow_readers_error(depth, inner):
    # orjson reads deeper than the json module (and than it writes): where the slow reader gives
    # up on a text, its error stands; where it reads it, the text is refused as too deep, as before.
    text = "[" * depth + inner + "]" * depth
    try:
        jsontext._read_slow(text, "t")
        expected = ("too_deep", f"t: arrays and objects nest deeper than {jsontext.MAX_DEPTH} levels")
    except ContractError as err:
        expected = (err.rule, err.detail)
    with pytest.raises(ContractError) as err:
        jsontext.decode_json(text, "t")
    assert (err.value.rule, err.value.detail) == expected


def test_validation_context_is_reused_only_for_the_same_now_and_domains(good):
    from dataplane import contract
    from dataplane.domain_rules import DomainLookup

    lookup = DomainLookup()
    first = contract._context(NOW, lookup, False)
    assert contract._context(NOW, lookup, False) is first
    assert contract._context(NOW, DomainLookup(), False) is not first
    assert contract._context(NOW, lookup, True)["rebuilt"] is True
    later = datetime(2031, 1, 1, tzinfo=UTC)
    assert contract._context(later, lookup, False)["now"] is later
    # A record in the future of one `now` and not of the other is judged by the `now` given.
    future = {**good, "ended_at": "2030-12-01T00:00:00Z", "started_at": "2030-12-01T00:00:00Z"}
    with pytest.raises(ContractError):
        validate_record(future, NOW, lookup)
    assert validate_record(future, later, lookup)["ended_at"] == "2030-12-01T00:00:00Z"


def _rewritten_instant(value: str) -> datetime:
    """The instant of an RFC 3339 text by the rewrite alone (what `valid_instant` did before it
    tried `datetime.fromisoformat` on the text as given)."""
    tail = value[19:]
    offset_at = len(tail) - (1 if tail[-1] in "Zz" else 6)
    offset = tail[offset_at:]
    text = f"{value[:10]}T{value[11:19]}{tail[:offset_at][:7]}{'+00:00' if offset in ('Z', 'z') else offset}"
    return datetime.fromisoformat(text)


_TWO = st.integers(0, 99).map("{:02d}".format)


@settings(max_examples=3000, deadline=None)
@given(
    year=st.sampled_from(["0001", "1970", "2024", "2028", "9999"]),
    month=_TWO,
    day=_TWO,
    sep=st.sampled_from("Tt "),
    clock=st.tuples(_TWO, _TWO, _TWO),
    frac=st.one_of(st.just(""), st.text("0123456789", min_size=1, max_size=12).map(lambda d: "." + d)),
    offset=st.one_of(
        st.sampled_from(["Z", "z"]), st.tuples(st.sampled_from("+-"), _TWO, _TWO).map(lambda t: f"{t[0]}{t[1]}:{t[2]}")
    ),
)
def test_timestamp_fast_read_gives_the_rewrites_instant_or_error(year, month, day, sep, clock, frac, offset):
    value = f"{year}-{month}-{day}{sep}{clock[0]}:{clock[1]}:{clock[2]}{frac}{offset}"
    assert timestamps.RFC3339_RE.fullmatch(value)
    try:
        expected = _rewritten_instant(value)
    except ValueError:
        with pytest.raises(ContractError) as err:
            timestamps.valid_instant.__wrapped__(value, "ended_at")
        assert err.value.rule == "bad_timestamp" and err.value.detail.startswith(f"ended_at={value!r}: ")
        return
    got = timestamps.valid_instant.__wrapped__(value, "ended_at")
    assert got == expected and got.utcoffset() == expected.utcoffset()
