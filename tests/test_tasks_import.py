"""Task import: reference retail tasks become contract records whose gold replays to the expected changes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from domains.retail.intents import intent_of, known_info_of
from tests.helpers_retail import replay_actions
from tests.helpers_traffic import expected_changes_hold, ingest, read_records, validate_all
from training.traffic.tasks_import import TaskImportError, import_tasks, persona_of

FIRST_WRITE_INTENT = {
    "cancel_pending_order": "cancel_order",
    "return_delivered_order_items": "return_items",
    "exchange_delivered_order_items": "exchange_items",
    "modify_pending_order_items": "modify_order_items",
    "modify_pending_order_address": "modify_order_address",
    "modify_pending_order_payment": "modify_order_payment",
}


@pytest.fixture(scope="module")
def imported(tmp_path_factory, world_dir):
    out = tmp_path_factory.mktemp("imported")
    summary = import_tasks(world_dir / "tasks_train.jsonl", world_dir, out)
    return summary, read_records([summary["out_file"]])


def test_all_reference_tasks_become_valid_records(imported, reference_tasks, tmp_path):
    summary, records = imported
    json.dumps(summary)
    assert summary["records"] == len(records) == len(reference_tasks) == 500
    validate_all(records)
    report = ingest(tmp_path, [summary["out_file"]])
    assert (report["accepted"], report["quarantined"]) == (500, 0)
    assert len({r["interaction_id"] for r in records}) == 500
    for task, record in zip(reference_tasks, records):
        assert record["customer_id"] == task["user_id"]
        assert record["intent"] == FIRST_WRITE_INTENT[task["actions"][0]["name"]]
        assert record["gold"] == {"actions": task["actions"], "outputs": task["outputs"]}
        assert (record["outcome"], record["escalation_was_necessary"], record["human_label"]) == (
            "completed",
            None,
            None,
        )
        assert [m["role"] for m in record["messages"]] == ["user"] and record["messages"][0]["content"]
        info = record["user_scenario"]["known_info"]
        for value in (info.get("zip"), info.get("email"), info.get("first_name"), *info.get("order_ids", [])):
            assert value is None or value in task["instruction"]
        assert "zip" in info or "email" in info
        assert set(record["initial_state"]["orders"]) >= set(
            record["initial_state"]["users"][task["user_id"]]["orders"]
        )


def test_gold_replays_on_the_imported_state_to_the_expected_changes(imported, reference_tasks):
    _, records = imported
    mismatches = {}
    for task, record in zip(reference_tasks, records):
        final, errors = replay_actions(record["initial_state"], record["gold"]["actions"])
        problems = expected_changes_hold(record["initial_state"], final, task["expected_changes"])
        if errors != task["gold_action_errors"]:
            problems.append(f"errors {errors} != {task['gold_action_errors']}")
        if problems:
            mismatches[task["task_id"]] = problems
    assert mismatches == {}
    assert (
        sum(bool(t["gold_action_errors"]) for t in reference_tasks) == imported[0]["tasks_with_gold_action_errors"] > 0
    )


def test_import_is_deterministic(imported, world_dir, tmp_path):
    summary = import_tasks(world_dir / "tasks_train.jsonl", world_dir, tmp_path)
    assert Path(summary["out_file"]).read_bytes() == Path(imported[0]["out_file"]).read_bytes()


@pytest.mark.parametrize(
    "instruction, persona",
    [
        ("Your name is A B and your zip code is 12345. You are patient, busy, rigid. Cancel #W1.", "terse"),
        ("Your name is A B and your zip code is 12345. You are happy, cautious. Cancel #W1.", "plays_dumb"),
        ("Your name is A B and your zip code is 12345. You are messy, direct. Cancel #W1.", "confused"),
        ("Your name is A B and your zip code is 12345. You are logical, polite. Cancel #W1.", "polite"),
        ("Your name is A B and your zip code is 12345. Cancel #W1.", "polite"),
    ],
)
def test_persona_comes_from_the_first_telling_adjective(instruction, persona):
    assert persona_of(instruction) == persona


def test_known_info_and_intent_extraction():
    text = (
        "Your name is Yusuf Hernandez and your zip code is 80265. You are confident. For #W2466703, change "
        "address to {'zip': '80265'} (same as #W2166301). For #W7739115, exchange Makeup Kit."
    )
    assert known_info_of(text) == {
        "first_name": "Yusuf",
        "last_name": "Hernandez",
        "zip": "80265",
        "order_ids": ["#W2466703", "#W2166301", "#W7739115"],
    }
    assert intent_of([{"name": "get_order_details", "arguments": {}}]) == "order_status"
    assert intent_of([{"name": "transfer_to_human_agents", "arguments": {}}]) == "other"
    assert intent_of([{"name": "modify_user_address", "arguments": {}}]) == "modify_user_address"


def test_bad_inputs_raise_task_import_errors(tmp_path, world_dir, reference_tasks):
    with pytest.raises(TaskImportError, match="does not exist"):
        import_tasks(tmp_path / "missing.jsonl", world_dir, tmp_path / "out")
    good = tmp_path / "tasks.jsonl"
    good.write_text(json.dumps(reference_tasks[0]) + "\n")
    with pytest.raises(TaskImportError, match="world folder"):
        import_tasks(good, tmp_path / "no-world", tmp_path / "out")
    broken = tmp_path / "broken.jsonl"
    broken.write_text(json.dumps(reference_tasks[0]) + "\n{not json\n")
    with pytest.raises(TaskImportError, match="broken.jsonl:2"):
        import_tasks(broken, world_dir, tmp_path / "out")
    stranger = tmp_path / "stranger.jsonl"
    stranger.write_text(json.dumps({**reference_tasks[0], "user_id": "nobody_0000"}) + "\n")
    with pytest.raises(TaskImportError, match="not in the world"):
        import_tasks(stranger, world_dir, tmp_path / "out")
    twice = tmp_path / "twice.jsonl"
    twice.write_text((json.dumps(reference_tasks[0]) + "\n") * 2)
    with pytest.raises(TaskImportError, match="duplicate task_id"):
        import_tasks(twice, world_dir, tmp_path / "out")
    assert not (tmp_path / "out").exists()
