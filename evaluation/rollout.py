"""Run a policy over tasks in the retail environment, k trials each, batched across conversations.

Each (record, trial) gets its own `RetailEnvironment`, reset from the record with a simulator seed
derived from (seed, record id, trial) only. So a candidate and a champion evaluated with the same
`seed` meet the same customers and their trials pair up per conversation.

Every round, the next assistant turn of every live conversation comes from ONE `policy.act` call
(one batched generation for a model). With `max_live`, at most that many conversations are live
at once and a finished one makes room for the next (continuous batching). Tool calls are executed
through the environment's allow-list and their results appended as tool messages. A conversation ends on a text answer without tool
calls, when the environment is done (transfer to a human, or the customer left), or at `max_turns`
assistant turns.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from evaluation.policy import Conversation, Message, Policy
from training.rewards import score_episode, verified_success
from training.sandbox.environment import call_tool, environment_class
from training.sandbox.episode import Episode
from training.sandbox.prompting import initial_messages

DEFAULT_MAX_TURNS = 30
ENDINGS = ("answer", "done", "max_turns", "context_full")


class RolloutError(ValueError):
    """A record that cannot be rolled out (no id, no initial state), or a policy breaking the seam."""

    def __init__(self, rule: str, detail: str, record_id: str | None = None) -> None:
        super().__init__(f"{rule}: {detail}" + (f" (record {record_id})" if record_id else ""))
        self.rule = rule
        self.detail = detail
        self.record_id = record_id


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


def trial_seed(seed: int, record_id: str, trial: int) -> int:
    """The simulator seed of one trial: a function of (seed, record id, trial) and nothing else."""
    digest = hashlib.sha256(f"{seed}:{record_id}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31 - 1)


def _loads(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


@dataclass
class _Live:
    """Book-keeping of one conversation in flight."""

    record_id: str
    trial: int
    seed: int
    env: Any
    conversation: Conversation
    intent: str | None
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    ended_by: str | None = None


def _start(
    record: Mapping[str, Any], trial: int, seed: int, compact: bool, tools: tuple[str, ...] | None = None
) -> _Live:
    record_id = record_id_of(record)
    if record.get("initial_state") in (None, "", {}):
        raise RolloutError("missing_initial_state", "record has no initial_state", record_id)
    run_seed = trial_seed(seed, record_id, trial)
    env = environment_class(tools)()
    env.reset(
        initial_state=record["initial_state"],
        user_scenario=_loads(record.get("user_scenario")) or {},
        gold=_loads(record.get("gold")),
        seed=run_seed,
        escalation_was_necessary=record.get("escalation_was_necessary"),
        compact=compact,
    )
    opening = initial_messages(dict(record), seed=run_seed)
    return _Live(
        record_id,
        trial,
        run_seed,
        env,
        Conversation(opening, task_id=record_id, trial=trial),
        intent=record.get("intent"),
    )


def _step(live: _Live, message: Message, max_turns: int) -> None:
    """Apply one assistant message: record it, run its tool calls, decide whether it ended."""
    if not isinstance(message, Mapping) or message.get("role", "assistant") != "assistant":
        raise RolloutError("bad_policy_message", f"policy returned {message!r:.200}", live.record_id)
    calls = list(message.get("tool_calls") or ())
    live.conversation.append(
        {
            "role": "assistant",
            "content": str(message.get("content") or ""),
            "tool_calls": [{"name": c["name"], "arguments": c.get("arguments") or {}} for c in calls],
        }
    )
    live.turns += 1
    if message.get("stop_reason") == "context_full":
        live.ended_by = "context_full"
        return
    if not calls:
        live.ended_by = "answer"
        return
    for call in calls:
        result = call_tool(live.env, call["name"], call.get("arguments") or {})
        live.tool_calls += 1
        live.tool_errors += str(result).startswith("Error")
        live.conversation.append({"role": "tool", "name": call["name"], "content": str(result)})
        if live.env.done:
            # Calls after a transfer (or the customer leaving) would act on a closed conversation.
            live.ended_by = "done"
            return
    if live.turns >= max_turns:
        live.ended_by = "max_turns"


def _finish(live: _Live, reward_weights: Any) -> Trial:
    episode = live.env.episode
    terms = score_episode(episode, reward_weights)
    return Trial(
        record_id=live.record_id,
        trial=live.trial,
        seed=live.seed,
        episode=episode,
        success=bool(verified_success(episode)),
        messages=list(live.conversation),
        turns=live.turns,
        tool_calls=live.tool_calls,
        tool_errors=live.tool_errors,
        ended_by=live.ended_by or "max_turns",
        reward=float(sum(terms.values())),
        reward_terms=dict(terms),
        intent=live.intent,
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
    `max_live` caps the conversations in flight (default: the policy's own `max_live` hint, else
    all): when one ends, the next waiting one starts, so every round still asks for the next turn
    of every live conversation in one call, while a model keeps its batch full and the caches of
    only that many conversations in memory. Conversations are independent, so this changes the
    order work is done in, never a transcript.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    lives = [_start(record, trial, seed, compact, tools) for record in records for trial in range(k)]
    seen: set[tuple[str, int]] = set()
    for live in lives:
        if (live.record_id, live.trial) in seen:
            raise RolloutError("duplicate_record_id", "two records share one id", live.record_id)
        seen.add((live.record_id, live.trial))
    for live in lives:
        if live.env.done:
            live.ended_by = "done"
    waiting = deque(live for live in lives if live.ended_by is None)
    limit = _live_limit(policy, max_live, len(waiting))
    active: list[_Live] = []
    while active or waiting:
        while waiting and len(active) < limit:
            active.append(waiting.popleft())
        replies = policy.act([live.conversation for live in active])
        if len(replies) != len(active):
            raise RolloutError(
                "bad_policy_batch",
                f"policy {getattr(policy, 'name', policy)!r} returned {len(replies)} "
                f"messages for {len(active)} conversations",
            )
        for live, message in zip(active, replies):
            _step(live, message, max_turns)
        active = [live for live in active if live.ended_by is None]
    return [_finish(live, reward_weights) for live in lives]


def _live_limit(policy: Policy, max_live: int | None, waiting: int) -> int:
    limit = max_live if max_live is not None else getattr(policy, "max_live", None)
    if limit is not None and limit < 1:
        raise ValueError(f"max_live must be >= 1, got {limit}")
    return limit or max(waiting, 1)
