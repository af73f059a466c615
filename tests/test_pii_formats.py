"""What the PII scanner finds, what it leaves, and how it pseudonymises e-mail addresses.

Formats (cards with any separator, IBANs, SSNs with and without dashes, UK National Insurance,
E.164 and US/UK/DE/FR national phone numbers, e-mail addresses), separators hidden behind
zero-width or non-breaking characters, the worlds' own identifiers that must survive (whole
retail and airline worlds included), the domains' world keys, the per-home key, and a record
that identifies its customer by e-mail replaying to the same verified outcome once stored.
"""

from __future__ import annotations

import copy
import json
import os
import re
import stat
from pathlib import Path

import pytest

from dataplane import scrub
from dataplane.contract import validate_record
from dataplane.home import PII_KEY_ENV, Home, PiiKeyError
from dataplane.ingest import ingest_paths
from dataplane.pii_records import domain_scanner, scrub_field, scrub_record
from dataplane.scrub import check_free_text, find_pii, scrub_text
from dataplane.store import open_store
from dataplane.validation import validate_window
from dataplane.window import records_frame
from tests.helpers_data import NOW, build_records, record_from_task, write_jsonl

pytestmark = pytest.mark.filterwarnings("ignore")

AIRLINE_DATA = Path(__file__).resolve().parent.parent / "domains" / "airline" / "data"
PSEUDONYM = re.compile(r"user_[0-9a-f]{16}@masked\.invalid")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)*\.[a-z]+")

MASKED = [
    # cards: spaces, dashes, dots, none; Amex 4-6-5; a 13-digit Visa
    ("pay with 4111 1111 1111 1111 please", "card"),
    ("card 4111-1111-1111-1111", "card"),
    ("card 4111.1111.1111.1111", "card"),
    ("card 4111111111111111", "card"),
    ("amex 3782-822463-10005", "card"),
    ("old visa 4222222222222", "card"),
    # IBANs, grouped or not, any case
    ("iban DE89 3704 0044 0532 0130 00", "iban"),
    ("iban GB82WEST12345698765432, thanks", "iban"),
    ("iban fr1420041010050500013m02606", "iban"),
    # US SSN with and without separators; UK National Insurance
    ("ssn 123-45-6789", "national_id"),
    ("ssn 123 45 6789", "national_id"),
    ("my ssn is 123456789", "national_id"),
    ("NI AB 12 34 56 C", "national_id"),
    ("NI AB123456C", "national_id"),
    # phone numbers: E.164, US, UK, DE, FR, international prefixes
    ("e164 +14155550100", "phone"),
    ("call me at +1 415-555-0100", "phone"),
    ("call (415) 555-0100", "phone"),
    ("cell 415.555.0100 is mine", "phone"),
    ("uk +44 20 7946 0958", "phone"),
    ("uk +44 (0)20 7946 0958", "phone"),
    ("uk 020 7946 0958", "phone"),
    ("uk mobile 07700 900123", "phone"),
    ("uk mobile 07700900123", "phone"),
    ("de 030 12345678", "phone"),
    ("de 030/1234 5678", "phone"),
    ("de (030) 1234567", "phone"),
    ("de mobile 0151 12345678", "phone"),
    ("de +49 30 12345678", "phone"),
    ("fr 01 23 45 67 89", "phone"),
    ("fr 06.12.34.56.78", "phone"),
    ("fr 0612345678", "phone"),
    ("fr +33 6 12 34 56 78", "phone"),
    ("intl 0044 20 7946 0958", "phone"),
    # e-mail addresses
    ("mail noah.brown7922@example.com.", "email"),
    ("mail first_last+tag@mail.example.co.uk", "email"),
]


@pytest.mark.parametrize("text,kind", MASKED)
def test_each_format_is_found_and_replaced(text, kind):
    assert find_pii(text) == [kind]
    clean = scrub_text(text)
    assert find_pii(clean) == []
    token = {"card": "[CARD]", "iban": "[IBAN]", "national_id": "[NATIONAL_ID]", "phone": "[PHONE]"}.get(kind)
    assert (token in clean) if token else PSEUDONYM.search(clean)
    # Only the span changes: the words around it survive.
    assert clean.split(" ")[0] == text.split(" ")[0]


KEPT = [
    "order #W6067464 and #W0000007",
    "item 9624127908, product 1075968781",
    "tracking 357962501027",
    "pay with credit_card_4190576 or gift_card_1725971",
    "zip 19031 and zip+4 80279-1234",
    "total $982.03, unrounded 20.44999999999999",
    "flight HAT170, reservation 4WQ150, certificate_3221322, user mia_li_3668",
    "dates 2024-05-22, 05/22/2024, 01.02.2024 10:30 and 22.05.2024",
    "timestamps 2024-05-02T03:10:19, 2024-01-01T00:00:00+05:30 and 2026-11-02T09:00:00.123456Z",
    "epoch 1717171717 and millis 1717171717171 and micros 1717171717171717",
    "never issued: 666-12-3456, 000-12-3456, 923-45-6789, 123-00-4567, 123-45-0000, 000123456",
    "Luhn fails: 4111 1111 1111 1112",
    "unknown IBAN country XX12 ABCD EFGH IJKL MN, a word like ab12 cdef",
    "ids int-123456789, conv-0612345678, run_4111111111111111",
    "version 1.2.3, port 8080, 3 of 10, room 101",
    "time zone UTC+14:00 and +05:30",
    "user_0123456789abcdef@masked.invalid is a pseudonym already",
]


@pytest.mark.parametrize("text", KEPT)
def test_identifiers_dates_and_numbers_survive(text):
    assert find_pii(text) == []
    assert scrub_text(text) is text or scrub_text(text) == text


HIDDEN = [
    "call 415\u200b-555\u200b-0100",  # zero-width space
    "call 415\u2060555\u20600100 or 415-555-0100",  # word joiners
    "card 4111\u00a01111\u00a01111\u00a01111",  # non-breaking spaces
    "card 4111\u202f1111\u202f1111\u202f1111",  # narrow no-break spaces
    "card 4111\u00ad1111\u00ad1111\u00ad1111",  # soft hyphens
    "call 415\u2013555\u20130100",  # en dashes
    "card \uff14\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11\uff11",  # fullwidth
    "card \u0664\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661\u0661",  # Arabic-Indic
    "mail noah\u200b.brown@example\ufe52com",  # a zero-width space, a small full stop
    "ssn \ufeff123-45-6789",  # a byte order mark before it
]


def test_an_iban_needs_its_country_length_and_checksum():
    assert find_pii("DE89 3704 0044 0532 0130 00") == ["iban"]
    # One digit off: no IBAN (what is left of it may still read as another kind).
    assert "iban" not in find_pii("DE88 3704 0044 0532 0130 00")
    assert "iban" not in find_pii("DE89 3704 0044 0532 0130 0")  # a digit short for Germany


@pytest.mark.parametrize("text", HIDDEN)
def test_separators_hidden_by_format_or_odd_characters_do_not_hide_pii(text):
    kinds = find_pii(text)
    assert kinds, text
    clean = scrub_text(text)
    assert find_pii(clean) == [] and clean != text


def test_only_the_spans_change_in_text_that_is_not_ascii():
    text = "Café René: carte 4111\u00a01111\u00a01111\u00a01111, appelez le 06\u00a012\u00a034\u00a056\u00a078 — merci"
    assert scrub_text(text) == "Café René: carte [CARD], appelez le [PHONE] — merci"
    assert scrub.normalise("a\u200bb\u00a0c\u2013d\uff15") == "ab c-d5"


def test_email_pseudonyms_are_stable_case_blind_and_keyed(monkeypatch):
    monkeypatch.setenv(PII_KEY_ENV, "k" * 32)
    one = scrub_text("write to Noah.Brown7922@Example.com")
    assert one == scrub_text("write to noah.brown7922@example.com")
    token = PSEUDONYM.search(one).group(0)
    assert scrub_text(token) == token and find_pii(token) == []  # a pseudonym is left as it is
    monkeypatch.setenv(PII_KEY_ENV, "another key of enough length")
    assert PSEUDONYM.search(scrub_text("noah.brown7922@example.com")).group(0) != token


def test_the_key_file_is_created_once_private_and_refused_when_readable(tmp_path, monkeypatch):
    monkeypatch.delenv(PII_KEY_ENV, raising=False)
    home = Home(tmp_path / "home")
    key = home.pii_key()
    path = home.pii_key_path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and len(key) == 64
    assert Home(tmp_path / "home").pii_key() == key  # read back, not created again
    os.chmod(path, 0o644)
    with pytest.raises(PiiKeyError, match="readable by group or others"):
        home.pii_key()
    # The deployment's key (RETRAIN_PII_KEY, handed in by whoever reads the environment) wins over the file.
    with pytest.raises(PiiKeyError, match="at least 16"):
        home.pii_key("short")
    assert home.pii_key("x" * 20) == b"x" * 20


def test_free_text_check_reports_kinds_and_the_scrubbed_text():
    clean, kinds = check_free_text("Jo Bloggs (jo@example.com, 07700 900123)")
    assert kinds == ["email", "phone"] and "[PHONE]" in clean and PSEUDONYM.search(clean)
    assert check_free_text("Jo Bloggs") == ("Jo Bloggs", [])


def _emails(value, found):
    """Every value of an "email" key in `value`, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "email" and isinstance(item, str):
                found.add(item)
            _emails(item, found)
    elif isinstance(value, list):
        for item in value:
            _emails(item, found)
    return found


def _pseudonymised(world):
    """`world` with each customer's address replaced by its pseudonym, and nothing else changed."""
    text = json.dumps(world)
    for email in _emails(world, set()):
        text = text.replace(json.dumps(email), json.dumps(scrub_text(email)))
    return json.loads(text)


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_a_whole_world_passes_unchanged_but_for_its_customers_addresses(domain, world):
    if domain == "retail":
        data = world
        tasks = [json.loads(line) for line in (Path(__file__).parent / "data/retail-world/tasks_train.jsonl").open()]
    else:
        data = {
            name: json.loads((AIRLINE_DATA / f"{name}.json").read_text())
            for name in ("users", "reservations", "flights")
        }
        tasks = [json.loads(line) for line in (AIRLINE_DATA / "tasks_dev.jsonl").open()]
    assert _emails(data, set())  # both worlds identify customers by address too
    for scanner in (domain_scanner(domain), scrub.STRICT):
        assert scrub_field(data, "initial_state", scanner) == _pseudonymised(data)
        for task in tasks:
            assert scrub_field(task["instruction"], "user_scenario", scanner) == _EMAIL.sub(
                lambda m: scrub_text(m.group(0)), task["instruction"]
            )
            assert scrub_field(task["actions"], "gold", scanner) == task["actions"]


def test_a_domains_world_keys_survive_where_they_would_read_as_pii(world, reference_tasks, home):
    # A 10-digit item id starting with 0 reads as a French phone number; retail declares \b\d{10}\b
    # a world key, so its records keep it (and its window passes the no-PII check), where a
    # scanner without world keys masks it.
    record = copy.deepcopy(record_from_task(world, reference_tasks[0], 1))
    order = next(iter(record["initial_state"]["orders"].values()))
    order["items"][0]["item_id"] = "0612345678"
    record["messages"][1]["content"] += " Item 0612345678, phone 06 12 34 56 78."
    clean = scrub_record(validate_record(record, NOW))
    assert next(iter(clean["initial_state"]["orders"].values()))["items"][0]["item_id"] == "0612345678"
    assert clean["messages"][1]["content"].endswith(" Item 0612345678, phone [PHONE].")
    assert scrub_text("Item 0612345678") == "Item [PHONE]"
    others = [scrub_record(validate_record(r, NOW)) for r in build_records(world, reference_tasks, 4)]
    report = validate_window(records_frame([clean, *others]), home, min_gold_share=0.0, name="keys")
    assert report.result("no_pii")["success"]


def test_an_id_that_is_a_bare_ssn_is_quarantined_like_one_that_is_a_card(tmp_path, world, reference_tasks):
    good = record_from_task(world, reference_tasks[0], 1)
    records = [{**good, "interaction_id": "123456789"}, {**good, "interaction_id": "int-123456789"}]
    summary = ingest_paths(tmp_path / "db.duckdb", [write_jsonl(tmp_path / "a.jsonl", records)], now=NOW)
    assert summary.quarantined_by_rule == {"pii_in_id": 1} and summary.accepted == 1


def test_a_customer_identified_by_email_replays_to_the_same_outcome_once_stored(
    tmp_path, world, reference_tasks, home, monkeypatch
):
    from evaluation.replay import record_verified_success, replay_record

    monkeypatch.delenv(PII_KEY_ENV)  # the home's own key, created on first use

    task = reference_tasks[0]
    email = world["users"][task["user_id"]]["email"]
    find = {"name": "find_user_id_by_email", "arguments": {"email": email.upper()}}  # the lookup ignores case
    record = copy.deepcopy(record_from_task(world, task, 1))  # its gold shares the task's actions
    record["messages"][1:1] = [
        {"role": "user", "content": f"Hi, it's {email}."},
        {"role": "assistant", "content": "", "tool_calls": [find]},
        {"role": "tool", "name": "find_user_id_by_email", "content": task["user_id"]},
    ]
    record["gold"]["actions"].insert(0, copy.deepcopy(find))
    assert record_verified_success(record) is True

    ingest_paths(home.duckdb_path, [write_jsonl(tmp_path / "a.jsonl", [record])], now=NOW)
    con = open_store(home.duckdb_path, read_only=True)
    try:
        (text,) = con.execute("SELECT record FROM interactions").fetchone()
    finally:
        con.close()
    assert email.lower() not in text.lower()
    stored = json.loads(text)
    token = PSEUDONYM.search(stored["messages"][1]["content"]).group(0)
    assert stored["messages"][2]["tool_calls"][0]["arguments"]["email"] == token
    assert stored["gold"]["actions"][0]["arguments"]["email"] == token
    assert stored["initial_state"]["users"][task["user_id"]]["email"] == token
    assert stored["user_scenario"]["known_info"]["email"] == token
    # The pseudonymised lookup still finds the customer, and the outcome is verified as before.
    replayed = replay_record(stored)
    assert not [d for d in replayed.divergences if d.tool == "find_user_id_by_email"]
    assert record_verified_success(stored) is True
    assert stat.S_IMODE(home.pii_key_path.stat().st_mode) == 0o600


def test_the_mlflow_guard_reads_normalised_text_and_knows_emails(monkeypatch):
    from tracking import run_log

    assert "user_" in run_log.scrubbed_samples([{"transcript": "mail jo@example.com"}])["transcript"][0]
    monkeypatch.setattr(run_log, "scrub_text", lambda text: text)  # a scrubber that misses everything
    for leak in ("call 415\u200b-555\u200b-0100", "mail jo@example.com", {"iban": "GB82 WEST 1234 5698 7654 32"}):
        with pytest.raises(run_log.PIILeakError):
            run_log.scrubbed_samples([{"transcript": leak}])


def test_a_north_american_number_is_masked_with_its_country_code():
    assert scrub_text("call me at +1 415-555-0100 or 1-415-555-0101") == "call me at [PHONE] or [PHONE]"


def test_a_given_key_is_written_private_once_and_never_replaces_an_existing_one(tmp_path, monkeypatch):
    monkeypatch.delenv(PII_KEY_ENV, raising=False)
    home = Home(tmp_path / "home")
    with pytest.raises(PiiKeyError, match="at least 16"):
        home.write_pii_key("short")
    assert not home.pii_key_path.exists()
    assert home.write_pii_key("a fixed demo key of enough length") is True
    assert stat.S_IMODE(home.pii_key_path.stat().st_mode) == 0o600
    assert home.pii_key() == b"a fixed demo key of enough length"
    assert home.write_pii_key("another key of enough length") is False  # the first key stays
    assert home.pii_key() == b"a fixed demo key of enough length"
    assert [p.name for p in home.root.iterdir()] == ["pii.key"]  # no temporary file left behind
