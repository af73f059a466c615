"""A recorded conversation judged like a rollout: its replayed episode, proxy reward and, when it
carries gold, the `Trial` that failure modes and metrics read.

The review export and the daily watch both judge served traffic this way, so a conversation gets
the same reward and failure mode wherever it is looked at.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from evaluation.replay import recorded_episode
from evaluation.rollout import Trial
from training.rewards import score_episode, verified_success
from training.sandbox.episode import Episode


@dataclass(frozen=True)
class JudgedRecord:
    """`trial` is None when the record carries no gold: verified success, and so a failure mode,
    is undefined there (not False)."""

    interaction_id: str
    episode: Episode
    reward_terms: dict[str, float]
    trial: Trial | None

    @property
    def reward(self) -> float:
        return float(sum(self.reward_terms.values()))

    @property
    def success(self) -> bool | None:
        return None if self.trial is None else self.trial.success


def judge_record(record: Mapping[str, Any], weights: Any = None) -> JudgedRecord:
    """Replay `record` and score it under `weights` (None: the playbook).

    Raises `evaluation.replay.ReplayError` or `training.rewards.GoldError` when it cannot be judged.
    """
    episode = recorded_episode(record)
    terms = dict(score_episode(episode, weights))
    interaction_id = str(record["interaction_id"])
    trial = None
    if episode.gold is not None:
        messages = list(record.get("messages") or [])
        trial = Trial(
            record_id=interaction_id,
            trial=0,
            seed=0,
            episode=episode,
            success=bool(verified_success(episode)),
            messages=messages,
            turns=sum(m.get("role") == "assistant" for m in messages),
            tool_calls=len(episode.audit_log),
            tool_errors=sum(bool(e.error) for e in episode.audit_log),
            ended_by="done" if episode.transferred else "answer",
            reward=sum(terms.values()),
            reward_terms=terms,
            intent=record.get("intent"),
        )
    return JudgedRecord(interaction_id, episode, terms, trial)
