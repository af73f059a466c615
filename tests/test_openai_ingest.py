"""Production logs in the OpenAI chat shape: `retrain ingest --format openai` maps each conversation
onto the interaction record through its domain, with the quarantine, dedup, idempotency and PII
masking of native records.

tests/data/openai/conversations.jsonl holds 8 retail conversations on reference-world customers,
their tool results produced by the retail domain's own world (lookups, a cancellation without the
`user` field, a return, an address change, an unanswered transfer, one that never read its
customer, a refused write with PII in a content-parts message).
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.contract import ContractError
from dataplane.landing import ingest_landed
from dataplane.openai_chat import openai_record
from dataplane.store import load_records, open_store
from domains.registry import load_domain
from tests.conftest import REPO_ROOT
from tests.test_contract_domains import servicedesk  # noqa: F401  (the fixture the mapping tests use)

FIXTURE = REPO_ROOT / "tests" / "data" / "openai" / "conversations.jsonl"
CONVERSATIONS = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
EXPECTED = {  # id -> (intent, outcome, actions_taken, replayable)
    "chatcmpl-conv-001": ("order_status", "failed", 3, True),
    "chatcmpl-conv-002": ("cancel_order", "completed", 4, True),
    "chatcmpl-conv-003": ("cancel_order", "completed", 4, True),
    "chatcmpl-conv-004": ("return_items", "completed", 4, True),
    "chatcmpl-conv-005": ("modify_user_address", "completed", 3, True),
    "chatcmpl-conv-006": ("other", "escalated", 3, True),
    "chatcmpl-conv-007": ("cancel_order", "completed", 3, False),
    "chatcmpl-conv-008": ("cancel_order", "failed", 4, True),
}


def retrain(home: Path, *args: str) -> dict:
    """`retrain ingest ... --json` through the real CLI, in its own process, on `home`."""
    env = {**os.environ, "RETRAIN_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "ingest", *args, "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def stored(home: Path) -> dict[str, tuple]:
    with open_store(home / "interactions.duckdb", read_only=True) as con:
        rows = con.execute(
            "SELECT interaction_id, intent, outcome, actions_taken, replayable, domain, policy_version, record "
            "FROM interactions"
        ).fetchall()
    return {r[0]: r[1:] for r in rows}


def test_the_fixture_ingests_through_the_cli_and_again_changes_nothing(tmp_path):
    home = tmp_path / "home"
    first = retrain(home, "--format", "openai", str(FIXTURE))
    assert (first["read"], first["accepted"], first["quarantined"]) == (8, 8, 0)
    rows = stored(home)
    assert {rid: row[:4] for rid, row in rows.items()} == EXPECTED
    assert {row[4:6] for row in rows.values()} == {("retail", "retail-agent/7")}
    # The same file again is skipped; the same lines in another file are counted duplicates.
    assert retrain(home, "--format", "openai", str(FIXTURE))["files_skipped"] == 1
    copy_path = tmp_path / "copy.jsonl"
    copy_path.write_text(FIXTURE.read_text())
    again = retrain(home, "--format", "openai", str(copy_path))
    assert (again["accepted"], again["duplicates"], again["quarantined"]) == (0, 8, 0)
    assert stored(home) == rows


def test_pii_is_masked_as_for_native_records(tmp_path):
    home = tmp_path / "home"
    retrain(home, "--format", "openai", str(FIXTURE))
    text = stored(home)["chatcmpl-conv-008"][-1]
    assert "415-555-0100" not in text and "4111 1111 1111 1111" not in text
    assert "[PHONE]" in text and "[CARD]" in text
    assert "#W7303089" in text and "credit_card_" in text  # the world's own keys survive


def _bad_lines() -> list[str]:
    bad_arguments = copy.deepcopy(CONVERSATIONS[1])
    bad_arguments["id"] = "bad-arguments"
    bad_arguments["messages"][-3]["tool_calls"][0]["function"]["arguments"] = '{"order_id": "#W2974929",'
    unknown_call = copy.deepcopy(CONVERSATIONS[2])
    unknown_call["id"] = "unknown-call"
    unknown_call["messages"][3]["tool_call_id"] = "call_nobody_made"
    bad_time = {**CONVERSATIONS[3], "id": "bad-time", "created_at": "2026-11-16 10:00"}
    alien = {**CONVERSATIONS[4], "id": "alien", "domain": "telecom"}
    return [json.dumps(c) for c in (CONVERSATIONS[0], bad_arguments, unknown_call, bad_time, alien, CONVERSATIONS[5])]


def test_bad_lines_are_quarantined_with_their_rule_and_line_and_the_good_kept(tmp_path):
    home = tmp_path / "home"
    path = tmp_path / "mixed.jsonl"  # a plain name: --format says what it holds
    path.write_text("\n".join(_bad_lines()) + "\n")
    summary = retrain(home, "--format", "openai", str(path))
    assert (summary["read"], summary["accepted"], summary["quarantined"]) == (6, 2, 4)
    assert set(stored(home)) == {"chatcmpl-conv-001", "chatcmpl-conv-006"}
    with open_store(home / "interactions.duckdb", read_only=True) as con:
        rows = con.execute(
            "SELECT line_no, rule, interaction_id, detail FROM quarantine WHERE source_file = ? ORDER BY line_no",
            [str(path.resolve())],
        ).fetchall()
    assert [r[:3] for r in rows] == [
        (2, "bad_tool_arguments", "bad-arguments"),
        (3, "unknown_tool_call_id", "unknown-call"),
        (4, "bad_timestamp", "bad-time"),
        (5, "unknown_domain", "alien"),
    ]
    details = [r[3] for r in rows]
    assert "call_2_4" in details[0] and "cancel_pending_order" in details[0]
    assert "call_nobody_made" in details[1] and "created_at" in details[2] and "telecom" in details[3]


def _as_json(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def test_a_replay_of_the_rebuilt_state_gives_the_logged_results(tmp_path):
    """The state rebuilt from what the reads returned reproduces every logged tool result."""
    home = tmp_path / "home"
    retrain(home, "--format", "openai", str(FIXTURE))
    retail = load_domain("retail")
    with open_store(home / "interactions.duckdb", read_only=True) as con:
        records = {r["interaction_id"]: r for r in load_records(con, list(EXPECTED))}
    for rid, record in records.items():
        calls = [c for m in record["messages"] for c in m.get("tool_calls") or ()]
        logged = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        if not EXPECTED[rid][3]:
            assert record["customer_id"] not in record["initial_state"]["users"]
            continue
        _final, errors = retail.replay(record["initial_state"], calls)
        assert errors == [r for r in logged if r.startswith("Error")], rid
        world = retail.make_environment()
        world.reset(initial_state=record["initial_state"])
        replayed = [world.call(c["name"], c["arguments"]) for c in calls][: len(logged)]
        # Reads after the writes included: the same world. (Records are stored with sorted keys, so a
        # record rendered from the stored state is compared as JSON.)
        assert list(map(_as_json, replayed)) == list(map(_as_json, logged)), rid


def test_the_landing_folder_tells_the_formats_apart_by_name(tmp_path, world, reference_tasks):
    from tests.helpers_data import record_from_task, write_jsonl

    landing = tmp_path / "landing"
    (landing / "openai").mkdir(parents=True)
    (landing / "openai" / "agent-1.openai.jsonl").write_text(FIXTURE.read_text())
    write_jsonl(landing / "native.jsonl", [record_from_task(world, reference_tasks[0], 0)])
    batch = ingest_landed(tmp_path / "db.duckdb", landing)
    assert (batch.summary.accepted, batch.summary.quarantined) == (9, 0)
    assert batch.days == {"2024-06-03": 1, "2026-11-16": 8}


# ---- the mapping, on the throwaway servicedesk domain ----


def servicedesk_conversation(*messages: dict, **fields) -> dict:
    return {
        "id": "hd-chat-1",
        "domain": "servicedesk",
        "created_at": "2024-06-04T09:00:00Z",
        "ended_at": "2024-06-04T09:03:00Z",
        "model": "servicedesk-agent/2",
        "user": "acct_1",
        "messages": [{"role": "user", "content": "close T1 please"}, *messages],
        **fields,
    }


def ask(*calls: tuple[str, str, dict]) -> dict:
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ],
    }


def answer(call_id: str, content: str) -> dict:
    return {"role": "tool", "tool_call_id": call_id, "content": content}


ACCOUNT = json.dumps({"email": "acct_1@example.com"})
OPEN, CLOSED = json.dumps({"status": "open"}), json.dumps({"status": "closed"})


@pytest.mark.usefixtures("servicedesk")
def test_the_mapping_of_a_servicedesk_conversation():
    conversation = servicedesk_conversation(
        ask(("c1", "get_account", {"account_id": "acct_1"}), ("c2", "get_ticket", {"ticket_id": "T1"})),
        answer("c2", OPEN),  # answered out of order: paired by id
        answer("c1", ACCOUNT),
        ask(("c3", "note", {"thought": "it is open"})),
        answer("c3", "ok"),
        ask(("c4", "close_ticket", {"ticket_id": "T1"})),
        answer("c4", CLOSED),
        ask(("c5", "get_ticket", {"ticket_id": "T1"})),
        answer("c5", CLOSED),  # after the write: not the initial state
        {"role": "assistant", "content": [{"type": "text", "text": "Closed."}]},
    )
    record, replayable = openai_record(conversation)
    assert replayable
    assert record["initial_state"] == {
        "accounts": {"acct_1": json.loads(ACCOUNT)},
        "tickets": {"T1": {"status": "open"}},
    }
    assert (record["intent"], record["outcome"], record["actions_taken"]) == ("close_ticket", "completed", 4)
    # Named from their calls, and put in the calls' order: a native transcript pairs them by position.
    assert [m.get("name") for m in record["messages"] if m["role"] == "tool"] == [
        "get_account",
        "get_ticket",
        "note",
        "close_ticket",
        "get_ticket",
    ]
    assert record["messages"][-1]["content"] == "Closed."
    assert record["user_scenario"] == {"instruction": "close T1 please", "known_info": {}, "persona": "unknown"}
    assert (record["gold"], record["escalation_was_necessary"], record["policy_version"]) == (
        None,
        None,
        "servicedesk-agent/2",
    )


@pytest.mark.usefixtures("servicedesk")
def test_what_keeps_a_conversation_from_replaying_without_refusing_it():
    read_ticket = (ask(("c1", "get_ticket", {"ticket_id": "T1"})), answer("c1", OPEN))
    close = ask(("c2", "close_ticket", {"ticket_id": "T1"}))
    # The customer's record was never read: stored, not replayable.
    record, replayable = openai_record(servicedesk_conversation(*read_ticket, close, answer("c2", CLOSED)))
    assert not replayable and record["outcome"] == "completed"
    # A write never answered: kept, counts as not succeeded, not replayable.
    account = (ask(("c0", "get_account", {"account_id": "acct_1"})), answer("c0", ACCOUNT))
    record, replayable = openai_record(servicedesk_conversation(*account, *read_ticket, close))
    assert not replayable and record["outcome"] == "failed"
    # A write the log says succeeded but the rebuilt world refuses: not replayable.
    closed = (ask(("c1", "get_ticket", {"ticket_id": "T1"})), answer("c1", CLOSED))
    _record, replayable = openai_record(servicedesk_conversation(*account, *closed, close, answer("c2", CLOSED)))
    assert not replayable
    # A hand-over never answered ended the log: escalated; one that failed is not.
    hand = ask(("c9", "escalate", {"summary": "angry"}))
    assert openai_record(servicedesk_conversation(*account, hand))[0]["outcome"] == "escalated"
    failed = answer("c9", "Error: nobody on duty")
    assert openai_record(servicedesk_conversation(*account, hand, failed))[0]["outcome"] == "failed"


@pytest.mark.usefixtures("servicedesk")
def test_a_question_answered_from_reads_completes_and_a_failed_read_does_not():
    read_ticket = (ask(("c1", "get_ticket", {"ticket_id": "T1"})), answer("c1", OPEN))
    reply = {"role": "assistant", "content": "T1 is still open."}
    assert openai_record(servicedesk_conversation(*read_ticket, reply))[0]["outcome"] == "completed"
    # The log ends on the tool's answer, not the agent's: nobody told the customer.
    assert openai_record(servicedesk_conversation(*read_ticket))[0]["outcome"] == "failed"
    broken = (ask(("c1", "get_ticket", {"ticket_id": "T9"})), answer("c1", "Error: ticket not found"))
    assert openai_record(servicedesk_conversation(*broken, reply))[0]["outcome"] == "failed"


@pytest.mark.parametrize(
    ("change", "rule", "named"),
    [
        (lambda c: c.pop("user"), "missing_field", "user"),
        (lambda c: c.update(extra=1), "unknown_field", "extra"),
        (lambda c: c.update(ended_at="soon"), "bad_timestamp", "ended_at"),
        (lambda c: c["messages"].append(answer("c1", "again")), "tool_call_answered_twice", "c1"),
        (lambda c: c["messages"].append(ask(("c1", "get_account", {}))), "duplicate_tool_call_id", "c1"),
        (lambda c: c["messages"].append({"role": "robot", "content": ""}), "unknown_role", "robot"),
        (lambda c: c["messages"][1]["tool_calls"][0]["function"].update(arguments="[1]"), "bad_tool_arguments", "c1"),
        (lambda c: c.update(id="has space"), "bad_interaction_id", "id"),
    ],
)
@pytest.mark.usefixtures("servicedesk")
def test_each_broken_conversation_names_its_rule(change, rule, named):
    conversation = servicedesk_conversation(ask(("c1", "get_account", {"account_id": "acct_1"})), answer("c1", ACCOUNT))
    change(conversation)
    with pytest.raises(ContractError) as info:
        openai_record(conversation)
    assert info.value.rule == rule
    assert named in info.value.detail


@pytest.mark.usefixtures("servicedesk")
def test_without_user_the_identify_call_names_the_customer():
    conversation = servicedesk_conversation(
        ask(("c1", "find_account", {"email": "acct_1@example.com"})), answer("c1", "acct_1")
    )
    del conversation["user"]
    record, _ = openai_record(conversation)
    assert record["customer_id"] == "acct_1"
    assert record["user_scenario"]["known_info"] == {"email": "acct_1@example.com"}
