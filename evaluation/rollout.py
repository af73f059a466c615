"""Evaluate a policy: roll it out over records, k trials each, and score every conversation.

Each (record, trial) gets its own environment, reset from the record with a simulator seed derived
from (seed, record id, trial) only (`trial_seed`). So a candidate and a champion evaluated with the
same `seed` meet the same customers and their trials pair up per conversation. The conversations
run through the sandbox's one rollout loop (`training.sandbox.rollout`), batched across
conversations; each finished one becomes a `Trial` with its verified success and reward terms.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from training.rewards import score_episode, verified_success
from training.sandbox.episode import Episode
from training.sandbox.rollout import (
    DEFAULT_MAX_TURNS,
    Conversation,
    Message,
    Policy,
    RolloutError,
    roll_out,
    start_conversation,
    trial_seed,
)


@dataclass
class Trial:
    """One conversation of one policy on one task: everything metrics and failure modes read.

    `ended_by` is how it stopped: "answer" (a text reply without tool calls), "done" (the
    environment finished: a transfer, or the customer left), "max_turns", or "context_full"
    (the prompt outgrew the model). `reward` and `reward_terms` are the training reward of the
    episode (training.rewards), kept for reward-alignment and reward-hacking checks.
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


def _finish(conversation: Conversation, reward_weights: Any) -> Trial:
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
    `max_live`: see `training.sandbox.rollout.roll_out`.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    conversations: list[Conversation] = []
    seen: set[tuple[str, int]] = set()
    for record in records:
        record_id = record_id_of(record)
        for trial in range(k):
            if (record_id, trial) in seen:
                raise RolloutError("duplicate_record_id", "two records share one id", record_id)
            seen.add((record_id, trial))
            conversations.append(
                start_conversation(
                    record,
                    trial_seed(seed, record_id, trial),
                    task_id=record_id,
                    trial=trial,
                    compact=compact,
                    tools=tools,
                )
            )
    roll_out(policy, conversations, max_turns, max_live)
    return [_finish(conversation, reward_weights) for conversation in conversations]
