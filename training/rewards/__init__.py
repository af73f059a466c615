"""Rewards: pure functions of an `Episode` (state and audit log), one module per family.

`core` is the verifiable check, `outcome`, `efficiency` and `process` the shaping from the
operators' playbook, `terms` the table of names, weights and TRL adapters.
"""

from training.rewards.core import GoldError, verified_success
from training.rewards.outcome import outcome_of
from training.rewards.terms import (
    REWARD_TERMS,
    RewardConfigError,
    RewardWeights,
    TrlRewardFunction,
    score_episode,
    total_reward,
    trl_reward_functions,
)

__all__ = [
    "REWARD_TERMS",
    "GoldError",
    "RewardConfigError",
    "RewardWeights",
    "TrlRewardFunction",
    "outcome_of",
    "score_episode",
    "total_reward",
    "trl_reward_functions",
    "verified_success",
]
