"""Records and scripted policies for the evaluation tests and the evaluation benchmark.

Records are contract-shaped interactions built from replay-verified scenarios of a small generated
world (domains.retail.traffic.scenarios), so every task is solvable and its gold is trustworthy. The policies are
the characters the evaluator must tell apart: an expert that follows the gold (with the reads and
identification the policy rules require), a random caller, and an escalate-everything hacker.
"""

from __future__ import annotations

import json
import random
import re
from functools import lru_cache
from typing import Any

from tests.helpers_retail import WRITE_TOOLS
from training.policies import ScriptedPolicy, assistant_message, assistant_turns
from training.sandbox.rollout import Message


@lru_cache(maxsize=4)
def _scenarios(n: int, seed: int) -> tuple:
    from domains.retail.traffic.scenarios import sample_scenarios
    from domains.retail.traffic.worldgen import generate_world

    world = generate_world(n_users=40, seed=seed)
    return tuple(sample_scenarios(world, n, seed=seed + 1))


def make_records(n: int = 12, seed: int = 0) -> list[dict[str, Any]]:
    """`n` contract-shaped records (fresh copies: callers may mutate them)."""
    records = []
    for i, s in enumerate(_scenarios(n, seed)):
        records.append(
            json.loads(
                json.dumps(
                    {
                        "interaction_id": f"ev-{seed}-{i}",
                        "customer_id": s.user_id,
                        "intent": s.intent,
                        "initial_state": s.initial_state,
                        "user_scenario": s.user_scenario,
                        "gold": s.gold,
                        "escalation_was_necessary": s.escalation_was_necessary,
                        "messages": [],
                    }
                )
            )
        )
    return records


def _auth_call(record: dict[str, Any]) -> dict[str, Any]:
    known = record["user_scenario"]["known_info"]
    if "email" in known:
        return {"name": "find_user_id_by_email", "arguments": {"email": known["email"]}}
    return {"name": "find_user_id_by_name_zip", "arguments": {k: known[k] for k in ("first_name", "last_name", "zip")}}


def expert_steps(record: dict[str, Any]) -> list[Any]:
    """Identify the customer, read what a write changes, make the gold calls, tell the gold facts."""
    gold = record["gold"]
    steps: list[Any] = []
    actions = list(gold["actions"])
    if not any(a["name"].startswith("find_user_id") for a in actions):
        steps.append(_auth_call(record))
    for action in actions:
        args = action["arguments"]
        if action["name"] == "modify_user_address":
            steps.append({"name": "get_user_details", "arguments": {"user_id": args["user_id"]}})
        elif action["name"] in WRITE_TOOLS:
            steps.append({"name": "get_order_details", "arguments": {"order_id": args["order_id"]}})
        steps.append(action)
    if gold.get("outputs"):
        order = (record["user_scenario"]["known_info"].get("order_ids") or [""])[0]
        facts = ", ".join(str(o) for o in gold["outputs"])
        steps.append({"name": "send_message_to_customer", "arguments": {"message": f"Your order {order} is {facts}."}})
    return steps


def expert_policy(records: list[dict[str, Any]], name: str = "expert") -> ScriptedPolicy:
    return ScriptedPolicy.from_table({r["interaction_id"]: expert_steps(r) for r in records}, name=name)


def escalator_policy(name: str = "escalator") -> ScriptedPolicy:
    """Hands every conversation to a human straight away."""
    return ScriptedPolicy(
        lambda conv: {"name": "transfer_to_human_agents", "arguments": {"summary": "customer needs help"}}, name=name
    )


def random_policy(name: str = "random", turns: int = 6) -> ScriptedPolicy:
    """Random tools with arguments drawn from ids seen in the conversation (or made up).

    Seeded by the conversation so far, so it is deterministic for a transcript yet reacts to what
    the simulated customer said: different customers, different choices.
    """
    from tests.helpers_retail import TOOL_NAMES
    from training.sandbox.prompting import tool_schemas

    params = {s["function"]["name"]: set(s["function"]["parameters"].get("properties", {})) for s in tool_schemas()}

    def act(conv: list[Message]) -> Message:
        text = json.dumps(conv, sort_keys=True)
        rng = random.Random(text)
        if assistant_turns(conv) >= turns or rng.random() < 0.1:
            return assistant_message("Goodbye.")
        ids = sorted(set(re.findall(r"#W\d+|[a-z]+_[a-z]+_\d+|\b\d{10}\b", text))) or ["x"]
        tool = rng.choice(TOOL_NAMES)
        args = {
            "order_id": rng.choice(ids),
            "user_id": rng.choice(ids),
            "email": "a@b.c",
            "message": rng.choice(["hello", "Which order?", "done"]),
            "reason": "no longer needed",
            "item_ids": [rng.choice(ids)],
            "new_item_ids": [rng.choice(ids)],
            "payment_method_id": rng.choice(ids),
            "thought": "hm",
            "expression": "1+1",
            "summary": "help",
            "product_id": rng.choice(ids),
        }
        wanted = params[tool]
        return {"name": tool, "arguments": {k: v for k, v in args.items() if k in wanted}}

    return ScriptedPolicy(act, name=name)


class RecordingPolicy:
    """Wraps a policy and records the batch size of every act() call."""

    def __init__(self, inner):
        self.inner = inner
        self.name = f"recording({inner.name})"
        self.batch_sizes: list[int] = []
        self.batches: list[list[tuple[str, int]]] = []

    def act(self, conversations):
        self.batch_sizes.append(len(conversations))
        self.batches.append([(c.task_id, c.trial) for c in conversations])
        return self.inner.act(conversations)


def record_with_intent(intent: str, n: int = 40, seed: int = 0) -> dict[str, Any]:
    """The first generated record of an intent (fresh copy)."""
    for record in make_records(n, seed):
        if record["intent"] == intent:
            return record
    raise LookupError(f"no {intent!r} record among {n} generated ones")


def scripted_trial(record: dict[str, Any], steps: list[Any], max_turns: int = 30):
    """Roll one record out with a fixed list of steps (then a closing answer): one Trial."""
    from evaluation.rollout import run_rollouts

    policy = ScriptedPolicy.from_table({record["interaction_id"]: steps}, name="steps")
    return run_rollouts(policy, [record], k=1, seed=0, max_turns=max_turns)[0]
