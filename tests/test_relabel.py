"""training.tiny.relabel: SFT copies with fresh identifiers, consistent within a conversation."""

from __future__ import annotations

import json
import random
import re

import pytest

from domains.retail.level1 import as_level1, level1_demonstration
from tests.helpers_eval import make_records
from training.sft import replay_trajectory, sft_rows
from training.tiny.relabel import customer_names, name_pool, relabel_messages


@pytest.fixture(scope="module")
def demos():
    tasks = [t for t in map(as_level1, make_records(16, seed=4)) if t is not None]
    return [level1_demonstration(t) for t in tasks]


def _calls(messages):
    return [c["function"] for m in messages for c in m.get("tool_calls") or []]


def _name_zip_demo(demos):
    return next(d for d in demos if d["messages"][2]["tool_calls"][0]["name"] == "find_user_id_by_name_zip")


def test_a_relabelled_copy_keeps_the_structure_and_changes_every_identifier(demos):
    demo = _name_zip_demo(demos)
    messages = replay_trajectory(demo)
    first, last = customer_names(demo)
    pool = ("Ada", "Bruno", "Chen", "Dara")
    copy = relabel_messages(messages, (first, last), pool, random.Random(1))
    assert copy[0] == messages[0]  # the system prompt is the product's, never relabelled
    assert [m["role"] for m in copy] == [m["role"] for m in messages]
    assert [c["name"] for c in _calls(copy)] == [c["name"] for c in _calls(messages)]
    auth = _calls(copy)[0]["arguments"]
    original = _calls(messages)[0]["arguments"]
    assert auth["first_name"] in pool and auth["last_name"] in pool
    assert len(auth["zip"]) == len(original["zip"]) and auth["zip"].isdigit()
    # Consistent within the conversation: the call carries what the customer said.
    opening = copy[1]["content"]
    assert f"{auth['first_name']} {auth['last_name']}, zip code {auth['zip']}" in opening
    order_ids = {c["arguments"]["order_id"] for c in _calls(copy) if "order_id" in c["arguments"]}
    assert len(order_ids) == 1 and next(iter(order_ids)) in opening
    # Nothing of the customer's identity survives in the non-system text.
    text = json.dumps(copy[1:])
    assert original["zip"] not in text and f"{first} {last}" not in text
    assert re.search(rf"(?<![a-z]){last.lower()}(?![a-z])", text) is None  # the user id spells it in lower case too


def test_amounts_and_short_numbers_are_kept_so_the_arithmetic_still_adds_up():
    from training.tiny.relabel import Relabeller

    relabeller = Relabeller((), (), random.Random(0))
    text = relabeller.text('{"order_id": "#W2015197", "price": 186.17, "refund": 1234.50, "zip": "85786", "qty": 2}')
    assert "186.17" in text and "1234.50" in text and '"qty": 2' in text
    assert "2015197" not in text and "85786" not in text
    assert re.search(r'"#W\d{7}"', text) and re.search(r'"zip": "\d{5}"', text)


def test_copies_differ_from_each_other(demos):
    messages = replay_trajectory(demos[0])
    names = customer_names(demos[0])
    rng = random.Random(0)
    zips = {
        json.dumps(
            _calls(relabel_messages(messages, names, name_pool(map(customer_names, demos)), rng))[0]["arguments"]
        )
        for _ in range(20)
    }
    assert len(zips) > 15


def test_sft_rows_hands_out_as_many_relabelled_rows_as_asked(demos):
    plain = sft_rows(demos)
    rows = sft_rows(demos, relabelled=3 * len(plain) + 1, seed=2)
    assert len(rows) == 3 * len(plain) + 1
    assert rows[0]["tools"] == plain[0]["tools"]
    # The same trajectory's copies share the structure but not the identifiers.
    same = [rows[0], rows[len(plain)], rows[2 * len(plain)]]
    assert len({json.dumps(_calls(r["messages"])) for r in same}) == 3
    assert {tuple(c["name"] for c in _calls(r["messages"])) for r in same} == {
        tuple(c["name"] for c in _calls(plain[0]["messages"]))
    }
    assert sft_rows(demos, relabelled=5, seed=2) == sft_rows(demos, relabelled=5, seed=2)  # seeded


def test_an_email_pseudonym_gets_fresh_hex_the_same_throughout_the_conversation():
    """Stored records carry `user_<16 hex>@masked.invalid` (dataplane.scrub): a copy must give each
    pseudonym new hex, consistently, or a model could learn each training customer's hash."""
    from dataplane.pii_records import FREE_FORM_FIELDS, domain_scanner, scrub_field
    from dataplane.scrub import PSEUDONYM_RE, using_pii_key

    def stored(record):
        return {k: scrub_field(v, k, domain_scanner()) if k in FREE_FORM_FIELDS else v for k, v in record.items()}

    with using_pii_key("relabel-test-key-0123456789"):
        tasks = [as_level1(stored(r)) for r in make_records(40, seed=5)]
    demos = [level1_demonstration(t) for t in tasks if t is not None]
    demo = next(d for d in demos if d["messages"][2]["tool_calls"][0]["name"] == "find_user_id_by_email")
    messages = replay_trajectory(demo)
    [original] = set(PSEUDONYM_RE.findall(json.dumps(messages[1:])))
    copies = [relabel_messages(messages, customer_names(demo), (), random.Random(seed)) for seed in range(5)]
    fresh = set()
    for copy in copies:
        found = set(PSEUDONYM_RE.findall(json.dumps(copy[1:])))
        assert len(found) == 1 and original not in found  # one new pseudonym, in the opening and the call alike
        [pseudonym] = found
        assert pseudonym in copy[1]["content"] and _calls(copy)[0]["arguments"]["email"] == pseudonym
        fresh |= found
    assert len(fresh) == len(copies)


def test_a_payment_methods_source_is_swapped_the_same_way_throughout_a_copy():
    """A domain's interchangeable openings (retail: a payment method's source) are permuted per
    copy, consistently, so a source in a call can only be copied from the conversation."""
    from domains.registry import load_domain
    from training.tiny.relabel import Relabeller

    groups = load_domain("retail").interchangeable_prefixes
    text = 'Please use paypal_7271316. {"payment_method_id": "paypal_7271316", "old": "credit_card_1234567"}'
    sources = set()
    for seed in range(12):
        copy = Relabeller((), (), random.Random(seed), groups).text(text)
        said, called, old = re.findall(r"(credit_card_|gift_card_|paypal_)(\d{7})", copy)
        assert said == called and old[0] != said[0]  # one mapping: the same id stays one id, two stay two
        assert said[1] != "7271316"  # the digits are relabelled as before
        sources.add(said[0])
    assert sources == {"credit_card_", "gift_card_", "paypal_"}
    # Words that are not an identifier's opening, and domains without groups, are left alone.
    assert Relabeller((), (), random.Random(0), groups).text("source credit_card, paypal_x") == (
        "source credit_card, paypal_x"
    )
    assert Relabeller((), (), random.Random(0)).text("paypal_7271316").startswith("paypal_")


def test_sft_rows_swap_the_sources_only_when_asked(demos):
    # Level-1 conversations show the order's payment ids: copies swap their sources only with
    # swap_prefixes (the recipe's shop stage), and are otherwise drawn exactly as before.
    replayed = json.dumps([row["messages"] for row in sft_rows(demos)])
    assert re.search(r"(credit_card|gift_card|paypal)_\d{7}", replayed)
    plain = sft_rows(demos, relabelled=40, seed=3)
    swapped = sft_rows(demos, relabelled=40, seed=3, swap_prefixes=True)
    assert plain != swapped
    assert plain == sft_rows(demos, relabelled=40, seed=3)

    def sources(rows):
        return {m for r in rows for m in re.findall(r"(credit_card|gift_card|paypal)_\d{7}", json.dumps(r["messages"]))}

    assert sources(swapped) == {"credit_card", "gift_card", "paypal"}
