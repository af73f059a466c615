"""A week whose window holds many contract-valid but hostile records still ends in a decision.

Each shape below once stopped `retrain run` at the defaults before any decision (a KeyError in the
level-1 task set, a world the supervised step or GRPO's sandbox refused, a persona too long for an
MLflow metric name, a flag the window suite refused), or was accepted by the contract only for the
window to fail on it. The records are simulated traffic, then changed so the record contract
accepts them (or, for the escalation flag, so ingestion quarantines them with their rule)."""

from __future__ import annotations

import copy
import json
import random

import duckdb
import pytest

from dataplane.contract import validate_record
from dataplane.errors import ContractError
from tests.helpers_traffic import NOW, read_records, retrain

WEEK = "2026-11-16"


def _hostile(record: dict, shape: int) -> dict:
    out = copy.deepcopy(record)
    out["interaction_id"] = f"hostile-{shape}-{record['interaction_id']}"
    scenario = out["user_scenario"]
    if shape == 0:  # facts of the wrong type: level 1 used to index them
        scenario["known_info"] = {**scenario.get("known_info", {}), "order_ids": {"k": [None]}, "email": 7}
    elif shape == 1:  # a world record the retail schema refuses: the sandbox cannot start it
        for user in out["initial_state"]["users"].values():
            user["name"] = 7
    elif shape == 2:  # the order the customer names is not in the world
        out["initial_state"]["orders"] = {}
    elif shape == 3:  # a persona far longer than an MLflow metric name
        scenario["persona"] = "angry " * 70
    elif shape == 4 and out.get("gold"):  # a gold cancellation whose reason is not text
        out["gold"]["actions"] = [
            {**a, "arguments": {**a["arguments"], "reason": 5}} if a["name"] == "cancel_pending_order" else a
            for a in out["gold"]["actions"]
        ]
    elif shape == 5:  # a flag on a conversation that did not escalate: quarantined at ingestion
        out["outcome"], out["escalation_was_necessary"] = "completed", False
    return out


@pytest.mark.slow
def test_a_week_of_hostile_records_ends_in_a_decision(tmp_path):
    home = tmp_path / "home"
    simulated = retrain(
        "simulate", "--days", "7", "--per-day", "40", "--start", WEEK, "--out", str(home / "landing"), home=home
    )
    assert simulated.returncode == 0, simulated.stderr[-3000:]
    records = read_records(tuple(sorted((home / "landing").rglob("*.jsonl"))))
    rng = random.Random(0)
    hostile = [_hostile(record, i % 6) for i, record in enumerate(rng.sample(records, 90))]
    for record in hostile:
        if record["interaction_id"].startswith("hostile-5-"):
            with pytest.raises(ContractError, match="escalation_flag_without_escalation"):
                validate_record(copy.deepcopy(record), now=NOW)
        else:
            validate_record(copy.deepcopy(record), now=NOW)  # every other shape passes the contract
    landing = home / "landing" / "hostile" / "records.jsonl"
    landing.parent.mkdir(parents=True)
    landing.write_text("".join(json.dumps(r) + "\n" for r in hostile))

    run = retrain("run", "--week", WEEK, home=home)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "(retail): succeeded" in run.stdout and "decision: " in run.stdout

    with duckdb.connect(str(home / "interactions.duckdb"), read_only=True) as con:
        rules = dict(con.execute("SELECT rule, count(*) FROM quarantine GROUP BY rule").fetchall())
        stored = con.execute("SELECT count(*) FROM interactions WHERE interaction_id LIKE 'hostile-%'").fetchone()[0]
    assert rules == {"escalation_flag_without_escalation": 15}
    assert stored == 75  # every other hostile record is in the store, and in the week's window
