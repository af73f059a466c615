"""A simulated conversation's tool results read the same when the loop replays it from the store.

The store keeps a record as canonical JSON (sorted keys); a full tool result is the JSON of a world
record in the state's key order. The simulated world is held in the store's layout
(`dataplane.rowtext.stored_form`), so what a model serves on and what training and evaluation
replay from the stored record are the same text."""

from __future__ import annotations

import pytest

from dataplane.ingest import ingest_paths
from dataplane.store import load_records, open_store
from training.curriculum import task_row
from training.grpo import training_environment_class
from training.sandbox.environment import call_tool
from training.sandbox.rollout import start_conversation
from training.traffic.simulate import simulate

SAID = "send_message_to_customer"  # the customer's reply is the simulator's, not the world's


def _stored_day(domain: str, tmp_path):
    summary = simulate(domain=domain, days=1, per_day=12, seed=3, out_dir=str(tmp_path / "landing"))
    db = tmp_path / "store.duckdb"
    ingest_paths(db, [tmp_path / "landing"])
    with open_store(db) as con:
        ids = [r[0] for r in con.execute("SELECT interaction_id FROM interactions ORDER BY 1").fetchall()]
        return summary, load_records(con, ids)


def _calls_and_results(record):
    messages = record["messages"]
    out = []
    for i, message in enumerate(messages):
        for call in message.get("tool_calls") or ():
            result = next((m for m in messages[i + 1 :] if m.get("role") == "tool"), None)
            # A call whose arguments nest objects writes them as the agent ordered them, and the
            # store sorts the recorded call's keys too: its replay differs by the arguments, not the world.
            nested = any(isinstance(v, (dict, list)) for v in (call.get("arguments") or {}).values())
            if call["name"] != SAID and result is not None and not nested:
                out.append((call["name"], call.get("arguments") or {}, result["content"]))
    return out


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_full_tool_results_replay_from_the_store_as_they_were_served(domain, tmp_path):
    _, records = _stored_day(domain, tmp_path)
    env_class = training_environment_class(None, domain)
    compared = 0
    for record in records:
        calls = _calls_and_results(record)
        if not calls or len(calls) > 6:
            continue
        evaluated = start_conversation(record, 0, compact=False).env  # evaluation's and the SFT step's start
        trained = env_class()  # GRPO's: the dataset row at level 4 (recorded conversations, full results)
        trained.reset(**task_row(record, level=4, seed=0))
        for name, arguments, served in calls:
            assert call_tool(evaluated, name, arguments) == served, (record["interaction_id"], name)
            assert call_tool(trained, name, arguments) == served, (record["interaction_id"], name)
            compared += served.startswith("{")
    assert compared >= 3  # full JSON results were among them
