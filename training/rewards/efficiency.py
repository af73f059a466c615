"""Efficiency shaping: long conversations cost, short verified ones earn (the operators' playbook).

Actions are `Episode.actions`: every tool call except talking to the customer and thinking.
"""

from __future__ import annotations

from training.rewards.core import verified_success
from training.sandbox.episode import Episode

MAX_ACTIONS = 10  # more than this many actions is penalised
QUICK_ACTIONS = 3  # a verified success in fewer than this many actions is rewarded


def too_many_actions(episode: Episode) -> float:
    """1.0 when the agent took more than 10 actions (default weight -0.5).

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> reads = [AuditEntry("get", {"id": f"{i}"}, "{}", False, False, "read") for i in range(11)]
    >>> too_many_actions(Episode({}, {}, reads))
    1.0
    """
    return 1.0 if len(episode.actions) > MAX_ACTIONS else 0.0


def quick_completion(episode: Episode) -> float:
    """1.0 for a verified success in fewer than 3 actions (default weight +1).

    >>> from training.sandbox.episode import Episode
    >>> quick_completion(Episode({}, {}, [], gold=None))
    0.0
    """
    return 1.0 if len(episode.actions) < QUICK_ACTIONS and verified_success(episode) else 0.0
