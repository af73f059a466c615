"""The pydantic record model: its published JSON Schema, and the rules it adds to the contract."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from dataplane.contract import ContractError, validate_record
from dataplane.record_schema import record_json_schema
from orchestration.cli import main
from tests.helpers_data import NOW, build_records, record_from_task

SCHEMA_FILE = Path(__file__).resolve().parent.parent / "docs" / "record.schema.json"


@pytest.fixture(scope="module")
def good(world, reference_tasks) -> dict:
    return record_from_task(world, reference_tasks[0], 1)


def test_docs_schema_is_what_retrain_schema_prints(capsys):
    assert main(["schema"]) == 0
    printed = capsys.readouterr().out
    assert SCHEMA_FILE.read_text() == printed, "regenerate: retrain schema > docs/record.schema.json"
    assert json.loads(printed)["title"] == "InteractionRecord"


def test_schema_help_exists(capsys):
    with pytest.raises(SystemExit) as done:
        main(["schema", "--help"])
    assert done.value.code == 0 and "JSON Schema" in capsys.readouterr().out


def test_valid_records_satisfy_the_published_schema(world, reference_tasks):
    validator = jsonschema.Draft202012Validator(record_json_schema())
    for record in build_records(world, reference_tasks, 6):
        assert list(validator.iter_errors(record)) == []
        assert list(validator.iter_errors(validate_record(record, now=NOW))) == []


@pytest.mark.parametrize(
    "field,value",
    [
        ("intent", "buy"),
        ("outcome", "won"),
        ("schema_version", 2),
        ("interaction_id", "has space"),
        ("started_at", "yesterday"),
        ("actions_taken", -1),
        ("customer_sentiment_delta", 1.5),
        ("messages", []),
        ("extra", 1),
    ],
)
def test_the_schema_refuses_what_the_contract_refuses(good, field, value):
    bad = {**copy.deepcopy(good), field: value}
    with pytest.raises(ContractError):
        validate_record(bad, now=NOW)
    assert list(jsonschema.Draft202012Validator(record_json_schema()).iter_errors(bad))


@pytest.mark.parametrize(
    "field,value,rule",
    [
        ("interaction_id", "4111111111111111", "pii_in_id"),
        ("customer_id", "call-415-555-0100", "pii_in_id"),
        ("actions_taken", 2**63, "number_too_large"),
        ("customer_sentiment_delta", 10**400, "sentiment_out_of_range"),
        ("policy_version", "v\ud800", "invalid_unicode"),
        ("schema_version", True, "unknown_schema_version"),
        ("intent", 3, "wrong_type"),
    ],
)
def test_rules_the_model_adds(good, field, value, rule):
    with pytest.raises(ContractError) as info:
        validate_record({**good, field: value}, now=NOW)
    assert info.value.rule == rule and field in info.value.detail


def test_schema_version_one_point_zero_is_version_one(good):
    assert validate_record({**good, "schema_version": 1.0}, now=NOW)["schema_version"] == 1


def test_unknown_message_keys_are_named(good):
    bad = copy.deepcopy(good)
    bad["messages"][0]["mood"] = "calm"
    bad["messages"][0]["tone"] = "dry"
    with pytest.raises(ContractError) as info:
        validate_record(bad, now=NOW)
    assert info.value.rule == "unknown_field" and info.value.detail == "messages[0] has unknown keys ['mood', 'tone']"


@pytest.mark.parametrize(
    "arguments,rule",
    [
        ('{"order_id": "#W1", "order_id": "#W2"}', "duplicate_key"),
        ("[" * 200 + "]" * 200, "too_deep"),
        ("{not json", "wrong_type"),
        ('{"n": ' + "9" * 5000 + "}", "number_too_large"),
    ],
)
def test_arguments_given_as_json_text_are_decoded_safely(good, arguments, rule):
    bad = copy.deepcopy(good)
    call = next(m for m in bad["messages"] if m.get("tool_calls"))["tool_calls"][0]
    call["arguments"] = arguments
    with pytest.raises(ContractError) as info:
        validate_record(bad, now=NOW)
    assert info.value.rule == rule and "arguments" in info.value.detail


def test_extra_keys_of_tool_calls_gold_and_labels_are_dropped(good):
    noisy = copy.deepcopy(good)
    noisy["gold"]["note"] = "x"
    noisy["human_label"]["shift"] = "night"
    call = next(m for m in noisy["messages"] if m.get("tool_calls"))["tool_calls"][0]
    call["id"] = "call_1"
    call["arguments"] = json.dumps(call["arguments"])
    assert validate_record(noisy, now=NOW) == validate_record(good, now=NOW)
