"""Evaluate a policy: roll it out over records, k trials each, and score every conversation.

Each (record, trial) gets its own environment, reset from the record with a simulator seed derived
from (seed, record id, trial) only (`trial_seed`). So a candidate and a champion evaluated with the
same `seed` meet the same customers and their trials pair up per conversation. The conversations
run through the sandbox's one rollout loop (`training.sandbox.rollout`), batched across
conversations; each finished one becomes a `Trial` with its verified success and reward terms.

A trial that raises (its environment cannot be reset from the record, the customer simulator or a
tool breaks, the policy fails on it, its reward cannot be computed) fails alone: it comes back
with `error` ("ValueError: ...") and `ended_by="error"`, and every other trial is scored as usual.
The one place that catches is `training.sandbox.rollout.contained_trial`. What is wrong with the
set as a whole (a record without an id, two records with one id, a policy breaking the batch
seam) still raises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from training.rewards import score_episode, verified_success
from training.sandbox.episode import Episode
from training.sandbox.prompting import domain_of
from training.sandbox.rollout import (
    DEFAULT_MAX_TURNS,
    Conversation,
    Message,
    Policy,
    RolloutError,
    contained_trial,
    roll_out,
    start_conversation,
    trial_seed,
)

# The cluster of a trial whose record names no customer: its task (`Trial.cluster`).
TASK_CLUSTER_PREFIX = "task:"


@dataclass
class Trial:
    """One conversation of one policy on one task: everything metrics and failure modes read.

    `ended_by` is how it stopped: "answer" (a text reply without tool calls), "done" (the
    environment finished: a transfer, or the customer left), "max_turns", or "context_full"
    (the prompt outgrew the model), or "error". `reward` and `reward_terms` are the training
    reward of the episode (training.rewards), kept for reward-alignment and reward-hacking checks.

    An errored trial (`error` = "Class: message" of what it raised) is a failure that was not
    judged: `success` False, an empty episode (what it did before it broke is not evidence of a
    finished conversation), no reward terms and a NaN reward, so a statistic that forgets to
    leave it out shows NaN instead of a made-up score. Its transcript is kept for debugging.
    `customer_id` is the record's customer (None when the record names none): trials of one
    customer are not independent, and the clustered statistics group them by it.
    """

    record_id: str
    trial: int
    seed: int
    episode: Episode
    success: bool
    messages: list[Message]
    turns: int
    tool_calls: int
    tool_errors: int
    ended_by: str
    reward: float
    reward_terms: dict[str, float] = field(default_factory=dict)
    intent: str | None = None
    error: str | None = None
    customer_id: str | None = None

    @property
    def errored(self) -> bool:
        return self.error is not None

    @property
    def cluster(self) -> str:
        """The independent unit this trial belongs to: its customer, else (no customer id on the
        record) its task, prefixed `task:` so the statistics' detail can say how many were."""
        return self.customer_id if self.customer_id is not None else f"{TASK_CLUSTER_PREFIX}{self.record_id}"

    @property
    def error_class(self) -> str | None:
        """The class name of what the trial raised ("ValueError"), None when it did not."""
        return None if self.error is None else self.error.split(":", 1)[0]

    @property
    def key(self) -> tuple[str, int]:
        """The pairing key: the same (record, trial) under two policies met the same customer."""
        return (self.record_id, self.trial)


def record_id_of(record: Mapping[str, Any]) -> str:
    """A record's stable id: `interaction_id` (contract records) or `task_id` (task files)."""
    for key in ("interaction_id", "task_id"):
        value = record.get(key)
        if value not in (None, ""):
            return str(value)
    raise RolloutError("missing_record_id", "record has neither interaction_id nor task_id")


def customer_of(record: Mapping[str, Any]) -> str | None:
    """The customer a record is about: `customer_id` (contract records) or `user_id` (task files)."""
    for key in ("customer_id", "user_id"):
        value = record.get(key)
        if isinstance(value, str) and value:
            return value
    return None


def _start(
    record: Mapping[str, Any], record_id: str, trial: int, seed: int, compact: bool, tools: tuple[str, ...] | None
) -> Conversation:
    """The trial's conversation; if it cannot start, a bare one that carries the error."""
    shell = Conversation(task_id=record_id, trial=trial, seed=seed, intent=record.get("intent"))
    started = contained_trial(
        shell, start_conversation, record, seed, task_id=record_id, trial=trial, compact=compact, tools=tools
    )
    return shell if started is None else started


def _finish(conversation: Conversation, reward_weights: Any, customer_id: str | None, domain: str) -> Trial:
    if conversation.error is None:
        scored = contained_trial(conversation, _scored, conversation, reward_weights, customer_id)
        if scored is not None:
            return scored
    return Trial(
        record_id=str(conversation.task_id),
        trial=conversation.trial,
        seed=conversation.seed,
        episode=Episode(initial_state={}, final_state={}, audit_log=[], domain=domain),
        success=False,
        messages=conversation.messages,
        turns=conversation.turns,
        tool_calls=conversation.tool_calls,
        tool_errors=conversation.tool_errors,
        ended_by="error",
        reward=float("nan"),
        intent=conversation.intent,
        error=conversation.error,
        customer_id=customer_id,
    )


def _scored(conversation: Conversation, reward_weights: Any, customer_id: str | None) -> Trial:
    episode = conversation.episode
    terms = score_episode(episode, reward_weights)
    return Trial(
        record_id=str(conversation.task_id),
        trial=conversation.trial,
        seed=conversation.seed,
        episode=episode,
        success=bool(verified_success(episode)),
        messages=conversation.messages,
        turns=conversation.turns,
        tool_calls=conversation.tool_calls,
        tool_errors=conversation.tool_errors,
        ended_by=conversation.ended_by or "max_turns",
        reward=float(sum(terms.values())),
        reward_terms=dict(terms),
        intent=conversation.intent,
        customer_id=customer_id,
    )


def run_rollouts(
    policy: Policy,
    records: Iterable[Mapping[str, Any]],
    k: int = 1,
    seed: int = 0,
    max_turns: int = DEFAULT_MAX_TURNS,
    compact: bool = False,
    reward_weights: Any = None,
    max_live: int | None = None,
    tools: tuple[str, ...] | None = None,
) -> list[Trial]:
    """Roll `policy` out on every record `k` times; trials come back in (record, trial) order.

    `reward_weights` (a `training.rewards.RewardWeights` or mapping, default the playbook) prices
    each episode's reward terms; `compact` asks the environment for short tool results; `tools`
    limits the environment to those tools (None: all), as offered to a policy trained on them.
    `max_live`: see `training.sandbox.rollout.roll_out`. A trial that raises comes back errored
    (see the module's docstring) and the others are scored.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    conversations: list[tuple[Conversation, str | None, str]] = []
    seen: set[tuple[str, int]] = set()
    for record in records:
        record_id = record_id_of(record)
        for trial in range(k):
            if (record_id, trial) in seen:
                raise RolloutError("duplicate_record_id", "two records share one id", record_id)
            seen.add((record_id, trial))
            started = _start(record, record_id, trial, trial_seed(seed, record_id, trial), compact, tools)
            conversations.append((started, customer_of(record), domain_of(dict(record))))
    roll_out(policy, [c for c, _, _ in conversations], max_turns, max_live, contain=True)
    return [_finish(c, reward_weights, customer, domain) for c, customer, domain in conversations]
