"""Builders of contract-valid interaction records from the reference retail world (tests only)."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from dataplane import rowtext
from dataplane.parquet_rows import JSON_TEXT_FIELDS

BASE_TIME = datetime(2024, 6, 3, 9, 0, tzinfo=UTC)  # a Monday
NOW = datetime(2024, 7, 1, tzinfo=UTC)  # the `now` tests pass to the contract

_INTENT_BY_TOOL = {
    "cancel_pending_order": "cancel_order",
    "return_delivered_order_items": "return_items",
    "exchange_delivered_order_items": "exchange_items",
    "modify_pending_order_items": "modify_order_items",
    "modify_pending_order_address": "modify_order_address",
    "modify_pending_order_payment": "modify_order_payment",
    "modify_user_address": "modify_user_address",
}


def initial_state_for(world: dict, user_id: str, actions: list[dict]) -> dict:
    """The user, their orders and every product those orders or the actions touch."""
    user = world["users"][user_id]
    orders = {oid: world["orders"][oid] for oid in user["orders"] if oid in world["orders"]}
    item_to_product = {item: pid for pid, p in world["products"].items() for item in p["variants"]}
    product_ids = {it["product_id"] for o in orders.values() for it in o["items"]}
    for action in actions:
        for key in ("new_item_ids", "item_ids"):
            product_ids |= {item_to_product[i] for i in action["arguments"].get(key, []) if i in item_to_product}
    return copy.deepcopy(
        {
            "users": {user_id: user},
            "orders": orders,
            "products": {pid: world["products"][pid] for pid in sorted(product_ids)},
        }
    )


def record_from_task(
    world: dict,
    task: dict,
    index: int,
    ended_at: datetime | None = None,
    with_gold: bool = True,
    outcome: str = "completed",
) -> dict:
    """A valid schema_version 1 record for reference task `task`, ending at `ended_at`."""
    ended = ended_at or BASE_TIME + timedelta(minutes=17 * index)
    started = ended - timedelta(minutes=4)
    actions = task["actions"]
    user = world["users"][task["user_id"]]
    writes = [a for a in actions if a["name"] in _INTENT_BY_TOOL]
    messages = [
        {"role": "system", "content": "You are a retail customer-service agent."},
        {"role": "user", "content": task["instruction"][:200]},
    ]
    for n, action in enumerate(actions):
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": action["name"], "arguments": action["arguments"]}],
            }
        )
        messages.append({"role": "tool", "name": action["name"], "content": f"ok {n}"})
    messages.append({"role": "assistant", "content": "Done. Anything else?"})
    return {
        "interaction_id": f"int-{index:06d}",
        "started_at": started.isoformat(),
        "ended_at": ended.isoformat().replace("+00:00", "Z"),
        "policy_version": "retail-agent/1",
        "customer_id": task["user_id"],
        "intent": _INTENT_BY_TOOL[writes[0]["name"]] if writes else "order_status",
        "initial_state": initial_state_for(world, task["user_id"], actions),
        "user_scenario": {
            "instruction": task["instruction"],
            "persona": "terse",
            "known_info": {"email": user["email"], "order_ids": user["orders"][:2]},
        },
        "messages": messages,
        "outcome": outcome,
        "escalation_was_necessary": None,
        "actions_taken": len(actions),
        "customer_sentiment_delta": 0.25,
        "gold": {"actions": actions, "outputs": task["outputs"]} if with_gold else None,
        "human_label": {"task_success": True, "rater": "ops-1", "labeled_at": (ended + timedelta(hours=1)).isoformat()},
        "schema_version": 1,
    }


def build_records(world: dict, tasks: list[dict], count: int, start: int = 0) -> list[dict]:
    """`count` valid records cycling through the tasks; every third one without gold."""
    return [
        record_from_task(world, tasks[i % len(tasks)], i, with_gold=i % 3 != 2) for i in range(start, start + count)
    ]


def write_jsonl(path: Path, records: list, raw_lines: list[str] | None = None) -> Path:
    """Write records (dicts are JSON-encoded, str written as is) plus optional raw lines."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in records] + list(raw_lines or [])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def write_parquet(path: Path, records: list[dict], schema_for=None) -> Path:
    """Records as one Parquet file, their free-form fields as JSON text; `schema_for` may change
    the Arrow table first (a column's type or encoding)."""
    columns = {key: [r.get(key) for r in records] for key in records[0]}
    for key in JSON_TEXT_FIELDS:
        columns[key] = [None if v is None else json.dumps(v) for v in columns[key]]
    table = pa.table(columns)
    if schema_for:
        table = schema_for(table)
    pq.write_table(table, path)
    return path


def count_slow_encodes(monkeypatch) -> list[int]:
    """Count calls of the json module's writer of stored records (`rowtext._encode`) from now on."""
    calls = [0]
    real = rowtext._encode

    def counted(value):
        calls[0] += 1
        return real(value)

    monkeypatch.setattr(rowtext, "_encode", counted)
    return calls
