"""Outcome shaping: how the conversation ended (the operators' playbook).

Each term returns an indicator or a measure; its magnitude (+10 completed, -5 failed, ...) is the
term's weight in `RewardWeights`, so operators retune the playbook in configuration, not code.
"""

from __future__ import annotations

from typing import Literal

from training.rewards.core import verified_success
from training.sandbox.episode import Episode

Outcome = Literal["completed", "failed", "escalated"]


def outcome_of(episode: Episode) -> Outcome:
    """Completed means verified success; otherwise a transfer is an escalation, else a failure.

    Verified success wins over a transfer: the work was done and checked, whatever came after.

    >>> from training.sandbox.episode import Episode
    >>> outcome_of(Episode({}, {}, [], gold=None))
    'failed'
    """
    if verified_success(episode):
        return "completed"
    return "escalated" if episode.transferred else "failed"


def completed(episode: Episode) -> float:
    """1.0 when the episode is a verified success, else 0.0 (default weight +10).

    >>> from training.sandbox.episode import Episode
    >>> completed(Episode({}, {}, [], gold=None))
    0.0
    """
    return 1.0 if outcome_of(episode) == "completed" else 0.0


def failed(episode: Episode) -> float:
    """1.0 when the episode neither succeeded nor was escalated (default weight -5).

    >>> from training.sandbox.episode import Episode
    >>> failed(Episode({}, {}, [], gold=None))
    1.0
    """
    return 1.0 if outcome_of(episode) == "failed" else 0.0


def _escalated(episode: Episode) -> bool:
    return outcome_of(episode) == "escalated"


def escalated_necessary(episode: Episode) -> float:
    """1.0 for an escalation the record marks as necessary (default weight +2).

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> handoff = AuditEntry("hand_over", {"summary": "x"}, "Transfer successful", False, False, "hand_over")
    >>> escalated_necessary(Episode({}, {}, [handoff], escalation_was_necessary=True))
    1.0
    """
    return 1.0 if _escalated(episode) and episode.escalation_was_necessary is True else 0.0


def escalated_unnecessary(episode: Episode) -> float:
    """1.0 for an escalation not known to be necessary (unknown counts as unnecessary; weight -1).

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> handoff = AuditEntry("hand_over", {"summary": "x"}, "Transfer successful", False, False, "hand_over")
    >>> escalated_unnecessary(Episode({}, {}, [handoff], escalation_was_necessary=None))
    1.0
    """
    return 1.0 if _escalated(episode) and episode.escalation_was_necessary is not True else 0.0


# The playbook's bar for "the customer left happier": a mood change above it earns the bonus.
SENTIMENT_THRESHOLD = 0.2


def sentiment(episode: Episode) -> float:
    """1.0 for a verified success that left the customer happier by more than 0.2 (weight +0.5).

    The operators' playbook pays a fixed bonus, so a policy gains nothing by chasing mood beyond
    the bar; a mood change that is not a success earns nothing, and a negative one is not punished
    here (the outcome terms already price failure; a success with a grumpy customer is a success).

    >>> from training.sandbox.episode import Episode
    >>> sentiment(Episode({}, {}, [], gold=None, sentiment_delta=0.8))
    0.0
    """
    if outcome_of(episode) != "completed":
        return 0.0
    return 1.0 if float(episode.sentiment_delta) > SENTIMENT_THRESHOLD else 0.0


def sentiment_shaped(episode: Episode) -> float:
    """The shaped variant: the positive mood change itself (0 to 1), on verified success only.

    Off by default (weight 0); an operator who wants a graded signal sets its weight and zeroes
    `sentiment`'s in the run's `reward_weights`.

    >>> from training.sandbox.episode import Episode
    >>> sentiment_shaped(Episode({}, {}, [], gold=None, sentiment_delta=0.8))
    0.0
    """
    if outcome_of(episode) != "completed":
        return 0.0
    return max(0.0, min(1.0, float(episode.sentiment_delta)))
