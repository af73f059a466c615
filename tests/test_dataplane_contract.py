"""Contract validation and PII scrubbing (pure functions)."""

from __future__ import annotations

import copy
import re
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dataplane.contract import ContractError, validate_record
from dataplane.pii_records import scrub_record
from dataplane.scrub import find_pii, scrub_text
from tests.helpers_data import NOW, record_from_task


@pytest.fixture(scope="module")
def good(world, reference_tasks) -> dict:
    return record_from_task(world, reference_tasks[0], 1)


def _set(record: dict, path: str, value) -> dict:
    out = copy.deepcopy(record)
    *parents, last = path.split(".")
    target = out
    for key in parents:
        target = target[int(key)] if isinstance(target, list) else target[key]
    if value is _DELETE:
        del target[last]
    elif isinstance(target, list):
        target[int(last)] = value
    else:
        target[last] = value
    return out


_DELETE = object()
VIOLATIONS = [
    ("customer_id", _DELETE, "missing_field", "customer_id"),
    ("actions_taken", "3", "wrong_type", "actions_taken"),
    ("actions_taken", True, "wrong_type", "actions_taken"),
    ("started_at", "yesterday", "bad_timestamp", "started_at"),
    ("started_at", "2024-06-03T09:00:00", "bad_timestamp", "started_at"),
    ("ended_at", "2024-06-02T00:00:00Z", "ended_before_started", "ended_at"),
    ("ended_at", (NOW + timedelta(minutes=6)).isoformat(), "future_timestamp", "ended_at"),
    ("outcome", "won", "unknown_outcome", "outcome"),
    ("intent", "buy", "unknown_intent", "intent"),
    ("customer_sentiment_delta", 1.5, "sentiment_out_of_range", "customer_sentiment_delta"),
    ("actions_taken", -1, "negative_actions", "actions_taken"),
    ("messages", [], "empty_messages", "messages"),
    ("messages.1.tool_calls", [{"name": "think", "arguments": {}}], "tool_calls_on_non_assistant", "messages[1]"),
    ("messages.1.role", "robot", "unknown_role", "messages[1].role"),
    ("schema_version", 2, "unknown_schema_version", "schema_version"),
    ("interaction_id", "has space", "bad_interaction_id", "interaction_id"),
    ("interaction_id", "x" * 129, "bad_interaction_id", "interaction_id"),
    ("gold", {"actions": []}, "missing_field", "gold.outputs"),
    (
        "human_label",
        {"task_success": 1, "rater": "a", "labeled_at": "2024-06-03T10:00:00Z"},
        "wrong_type",
        "human_label.task_success",
    ),
    ("escalation_was_necessary", "yes", "wrong_type", "escalation_was_necessary"),
    # The fixture's outcome is not `escalated`: the flag must then be null (README, the record).
    ("escalation_was_necessary", True, "escalation_flag_without_escalation", "escalation_was_necessary"),
    ("escalation_was_necessary", False, "escalation_flag_without_escalation", "escalation_was_necessary"),
    ("user_scenario.instruction", 5, "wrong_type", "user_scenario.instruction"),
    ("initial_state.orders", [], "bad_initial_state", "orders"),  # the domain's model names the table
    ("domain", "telecom", "unknown_domain", "telecom"),
    ("domain", 7, "wrong_type", "domain"),
    ("customer_id", "someone_else_1", "customer_not_in_state", "customer_id"),
    ("extra", 1, "unknown_field", "extra"),
]


def test_the_escalation_flag_is_kept_on_escalated_conversations(good):
    assert good["outcome"] != "escalated" and validate_record(good, now=NOW)["escalation_was_necessary"] is None
    for flag in (True, False, None):
        escalated = {**good, "outcome": "escalated", "escalation_was_necessary": flag}
        assert validate_record(escalated, now=NOW)["escalation_was_necessary"] is flag


@pytest.mark.parametrize("path,value,rule,field", VIOLATIONS, ids=[f"{v[2]}:{v[0]}" for v in VIOLATIONS])
def test_each_violation_has_its_rule_and_names_the_field(good, path, value, rule, field):
    with pytest.raises(ContractError) as info:
        validate_record(_set(good, path, value), now=NOW)
    assert info.value.rule == rule
    assert field in info.value.detail


def test_tool_message_needs_a_name(good):
    bad = copy.deepcopy(good)
    tool_index = next(i for i, m in enumerate(bad["messages"]) if m["role"] == "tool")
    del bad["messages"][tool_index]["name"]
    with pytest.raises(ContractError, match="name") as info:
        validate_record(bad, now=NOW)
    assert info.value.rule == "missing_field"


def test_valid_record_is_normalised(good):
    variant = _set(good, "customer_sentiment_delta", 0)
    del variant["human_label"]
    out = validate_record(variant, now=NOW)
    assert out["customer_sentiment_delta"] == 0.0 and isinstance(out["customer_sentiment_delta"], float)
    assert out["human_label"] is None
    assert list(out) == list(validate_record(good, now=NOW))


def test_future_tolerance_is_five_minutes(good):
    edge = (NOW + timedelta(minutes=5)).isoformat()
    assert validate_record(_set(good, "ended_at", edge), now=NOW)["ended_at"] == edge


def test_offsets_compare_as_instants(good):
    # 10:00+02:00 is 08:00Z, before a 09:00Z start.
    bad = _set(_set(good, "started_at", "2024-06-03T09:00:00Z"), "ended_at", "2024-06-03T10:00:00+02:00")
    with pytest.raises(ContractError) as info:
        validate_record(bad, now=NOW)
    assert info.value.rule == "ended_before_started"


PII = [
    ("pay with 4111 1111 1111 1111 please", "[CARD]"),
    ("card 4111111111111111", "[CARD]"),
    ("amex 3782-822463-10005", "[CARD]"),
    ("call me at +1 415-555-0100", "[PHONE]"),
    ("call (415) 555-0100", "[PHONE]"),
    ("415.555.0100 is my cell", "[PHONE]"),
    ("uk +44 20 7946 0958", "[PHONE]"),
    ("ssn 123-45-6789", "[NATIONAL_ID]"),
]


@pytest.mark.parametrize("text,token", PII)
def test_pii_is_masked(text, token):
    out = scrub_text(text)
    assert token in out
    assert find_pii(out) == []
    assert find_pii(text)


WORLD_IDS = [
    "order #W6067464",
    "item 9624127908 and 8917609800",
    "items 9624127908, 8917609800, 5019835484",
    "tracking 674931187716",
    "pay with credit_card_4190576 or gift_card_1725971",
    "zip 19031",
    "total $982.03 then 158.90",
    "user noah_brown_6181",
    "4111 1111 1111 1112 fails Luhn",
    "product 1075968781 item 9624127908 zip 19031",
    # an unrounded amount from a tool result whose fraction digits happen to pass Luhn
    '{"amount": 20.44999999999999, "transaction_type": "refund"}',
]


@pytest.mark.parametrize("text", WORLD_IDS)
def test_world_ids_survive(text):
    assert scrub_text(text) == text
    assert find_pii(text) == []


def test_whole_reference_world_survives_scrubbing(world_dir, reference_tasks):
    # Nothing but the e-mail addresses changes, and those become their pseudonyms.
    texts = [(world_dir / f"{n}.json").read_text() for n in ("users", "orders", "products")]
    texts += [t["instruction"] for t in reference_tasks]
    email = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
    assert [t for t in texts if scrub_text(t) != email.sub(lambda m: scrub_text(m.group(0)), t)] == []


def test_scrub_record_masks_content_and_instruction(good):
    dirty = copy.deepcopy(good)
    dirty["messages"][1]["content"] = "my card is 4111-1111-1111-1111, order #W6067464"
    dirty["user_scenario"]["instruction"] += " Your phone is (415) 555-0100."
    clean = scrub_record(validate_record(dirty, now=NOW))
    assert clean["messages"][1]["content"] == "my card is [CARD], order #W6067464"
    assert clean["user_scenario"]["instruction"].endswith("Your phone is [PHONE].")
    assert dirty["messages"][1]["content"].startswith("my card is 4111")  # input untouched


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    field=st.sampled_from(
        [
            "customer_id",
            "interaction_id",
            "started_at",
            "ended_at",
            "policy_version",
            "intent",
            "initial_state",
            "user_scenario",
            "messages",
            "outcome",
            "escalation_was_necessary",
            "actions_taken",
            "customer_sentiment_delta",
            "gold",
            "human_label",
            "schema_version",
        ]
    ),
    value=_json,
)
def test_fuzzed_field_either_validates_or_raises_contract_error(good, field, value):
    mutated = _set(good, field, value)
    try:
        out = validate_record(mutated, now=NOW)
    except ContractError as err:
        assert err.rule and err.detail
    else:
        assert validate_record(out, now=NOW) == out  # normalisation is idempotent
