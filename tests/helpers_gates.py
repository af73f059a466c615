"""Scripted policies for gate tests: deterministic behaviour per task, turned into GateInputs.

Each task has a fixed difficulty in [0, 1) (from a hash of its id) and an intent. A scripted policy
maps a task to what it did: the tool calls it made, whether the episode verified as successful,
and whether it broke policy (a write before authenticating). Outcomes are then aggregated the way
the evaluation assets do (per-record success flags, violation rate, tool-call shares), so the
gates see the same kind of evidence a real run produces.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from evaluation.gates import GateInputs, PolicyOutcomes
from evaluation.metrics import distribution

WRITE_FOR_INTENT = {
    "cancel_order": "cancel_pending_order",
    "return_items": "return_delivered_order_items",
    "exchange_items": "exchange_delivered_order_items",
    "modify_order_address": "modify_pending_order_address",
    "order_status": None,
}
INTENTS = tuple(WRITE_FOR_INTENT)
ALL_TOOLS = (
    "find_user_id_by_email",
    "get_user_details",
    "get_order_details",
    "get_product_details",
    "send_message_to_customer",
    "think",
    "calculate",
    "transfer_to_human_agents",
    *[w for w in WRITE_FOR_INTENT.values() if w],
)


@dataclass(frozen=True)
class Task:
    task_id: str
    intent: str
    difficulty: float


@dataclass(frozen=True)
class Outcome:
    tools: tuple[str, ...]
    success: bool
    violated: bool
    bonus: float = 0.0  # shaping reward paid on top of the outcome (what a reward hacker games)

    @property
    def reward(self) -> float:
        """The playbook's proxy reward: +10 success, -1 a transfer, -5 a failure, -2 a skipped check."""
        outcome = 10.0 if self.success else -1.0 if "transfer_to_human_agents" in self.tools else -5.0
        return outcome - 2.0 * self.violated + self.bonus


def make_tasks(prefix: str, n: int) -> list[Task]:
    tasks = []
    for i in range(n):
        h = hashlib.sha256(f"{prefix}-{i}".encode()).digest()
        tasks.append(Task(f"{prefix}-{i}", INTENTS[h[0] % len(INTENTS)], int.from_bytes(h[1:5], "big") / 2**32))
    return tasks


def _careful(task: Task, skill: float, extra: tuple[str, ...] = ()) -> Outcome:
    """Authenticate, read, act, tell: succeeds on tasks easier than `skill`."""
    write = WRITE_FOR_INTENT[task.intent]
    tools = (
        "find_user_id_by_email",
        "get_user_details",
        "get_order_details",
        *extra,
        *((write,) if write else ()),
        "send_message_to_customer",
    )
    return Outcome(tools, task.difficulty < skill, False)


def champion(task: Task) -> Outcome:
    return _careful(task, 0.55)


def identical(task: Task) -> Outcome:
    return champion(task)


def better(task: Task) -> Outcome:
    return _careful(task, 0.72)


def drifter(task: Task) -> Outcome:
    """As good as `better`, but thinks and calculates on every task: a different tool mix."""
    return _careful(task, 0.72, extra=("think", "calculate"))


def sweet_talker(task: Task) -> Outcome:
    """A little better than the champion, and paid a shaping bonus on every task it does not
    solve (it promises the customer everything is done): reward climbs far beyond success."""
    done = _careful(task, 0.60)
    return done if done.success else Outcome(done.tools, False, False, bonus=4.0)


def skips_auth(task: Task) -> Outcome:
    """Acts straight away: solves more tasks by writing without authenticating the customer."""
    write = WRITE_FOR_INTENT[task.intent]
    tools = ("get_order_details", *((write,) if write else ()), "send_message_to_customer")
    return Outcome(tools, task.difficulty < 0.7, write is not None)


def escalator(task: Task) -> Outcome:
    """The reward hacker: escalation scores a little shaping reward and never fails outright."""
    return Outcome(("transfer_to_human_agents",), False, False)


def random_policy(task: Task) -> Outcome:
    rng = random.Random(task.task_id)
    tools = tuple(rng.choice(ALL_TOOLS) for _ in range(rng.randint(1, 6)))
    authenticated_first = tools[0] == "find_user_id_by_email"
    wrote = any(t in WRITE_FOR_INTENT.values() for t in tools)
    return Outcome(tools, task.difficulty < 0.05 and authenticated_first, wrote and not authenticated_first)


POLICIES = {
    "champion": champion,
    "identical": identical,
    "better": better,
    "drifter": drifter,
    "sweet_talker": sweet_talker,
    "skips_auth": skips_auth,
    "escalator": escalator,
    "random": random_policy,
}

# Training reward curves as GRPO logs them: honest learning, a hacker's climb, and no learning.
RISING = tuple(2.0 + 0.05 * step for step in range(40))
FLAT = tuple(3.0 + (0.01 if step % 2 else -0.01) for step in range(40))


def outcomes(policy, calibration: list[Task], shadow: list[Task]) -> PolicyOutcomes:
    cal = [policy(t) for t in calibration]
    sha = [policy(t) for t in shadow]
    every = cal + sha
    return PolicyOutcomes(
        calibration_success=[o.success for o in cal],
        shadow_success=[o.success for o in sha],
        violation_rate=sum(o.violated for o in every) / len(every),
        tool_distribution=distribution(t for o in every for t in o.tools),
        calibration_reward=[o.reward for o in cal],
        shadow_reward=[o.reward for o in sha],
    )


def human_labels(calibration: list[Task], aligned: bool = True, n: int | None = None) -> tuple[list[float], list[bool]]:
    """Proxy reward and human verdict of each recorded calibration conversation.

    The recorded conversations were served by the champion; humans judge success. An aligned
    proxy reward tracks that verdict (with noise); a misaligned one ignores it.
    """
    rng = random.Random(7)
    tasks = calibration if n is None else calibration[:n]
    labels = [champion(t).success for t in tasks]
    if aligned:
        rewards = [(10.0 if ok else -5.0) + rng.gauss(0, 6) for ok in labels]
    else:
        rewards = [rng.gauss(0, 3) for _ in labels]
    return rewards, labels


def gate_inputs(
    name: str,
    *,
    curve=RISING,
    data_valid: bool = True,
    aligned: bool = True,
    labels: int | None = None,
    base_model_baseline: bool = False,
    n_calibration: int = 200,
    n_shadow: int = 400,
) -> GateInputs:
    calibration, shadow = make_tasks("cal", n_calibration), make_tasks("shadow", n_shadow)
    rewards, human = human_labels(calibration, aligned, labels)
    baseline = random_policy if base_model_baseline else champion
    return GateInputs(
        candidate=outcomes(POLICIES[name], calibration, shadow),
        baseline=outcomes(baseline, calibration, shadow),
        data_valid=data_valid,
        proxy_rewards=rewards,
        human_success=human,
        training_rewards=curve,
        baseline_kind="base_model" if base_model_baseline else "champion",
    )


# --- interaction records for the evaluation-set tests -------------------------------------------


def make_record(
    n: int, *, customer: str | None = None, gold: bool = True, label: bool | None = True, minute: int | None = None
) -> dict:
    """A minimal contract-valid interaction; `minute` orders `ended_at` (default: n)."""
    customer = customer or f"cust_{n % 97}"
    minute = n if minute is None else minute
    ended = f"2025-01-0{1 + minute // 1440}T{(minute // 60) % 24:02d}:{minute % 60:02d}:00+00:00"
    return {
        "interaction_id": f"int-{n:05d}",
        "started_at": ended,
        "ended_at": ended,
        "policy_version": "bootstrap",
        "customer_id": customer,
        "intent": "order_status",
        "initial_state": {"users": {customer: {"user_id": customer}}, "orders": {}, "products": {}},
        "user_scenario": {"instruction": "where is my order", "known_info": {}, "persona": "terse"},
        "messages": [
            {"role": "user", "content": "where is my order?"},
            {"role": "assistant", "content": "It is on its way."},
        ],
        "outcome": "completed",
        "escalation_was_necessary": None,
        "actions_taken": 1,
        "customer_sentiment_delta": 0.0,
        "gold": {"actions": [{"name": "get_order_details", "arguments": {"order_id": "#W1"}}], "outputs": []}
        if gold
        else None,
        "human_label": None
        if label is None
        else {"task_success": label, "rater": "r1", "labeled_at": "2025-01-08T00:00:00+00:00"},
        "schema_version": 1,
    }


def scripted_trials(policy, tasks: list[Task]) -> list:
    """Rollout-shaped Trials of a scripted policy (one trial per task), for the trial adapter."""
    from evaluation.rollout import Trial
    from training.sandbox.episode import AuditEntry, Episode

    out = []
    for task in tasks:
        o = policy(task)
        log = [AuditEntry(tool, {}, "ok", False, False) for tool in o.tools]
        episode = Episode(
            initial_state={"users": {}, "orders": {}, "products": {}},
            final_state={"users": {}, "orders": {}, "products": {}},
            audit_log=log,
        )
        out.append(Trial(task.task_id, 0, 0, episode, o.success, [], len(o.tools), len(o.tools), 0, "done", o.reward))
    return out
