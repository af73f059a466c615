"""The reward terms by name, their weights from configuration, and the TRL adapters.

A term maps an `Episode` to a raw measure (an indicator or a count); its weight carries the
magnitude and sign from the operators' playbook. `score_episode` keeps the weighted terms apart so each
is logged on its own; `trl_reward_functions` gives TRL one function per term for the same reason.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from training.rewards.efficiency import quick_completion, too_many_actions
from training.rewards.outcome import (
    completed,
    escalated_necessary,
    escalated_unnecessary,
    failed,
    sentiment,
    sentiment_shaped,
)
from training.rewards.process import looping, skipped_verification, step_order, unauthenticated_reads
from training.sandbox.episode import Episode

Term = Callable[[Episode], float]

REWARD_TERMS: dict[str, Term] = {
    "completed": completed,
    "failed": failed,
    "escalated_necessary": escalated_necessary,
    "escalated_unnecessary": escalated_unnecessary,
    "too_many_actions": too_many_actions,
    "quick_completion": quick_completion,
    "sentiment": sentiment,
    "sentiment_shaped": sentiment_shaped,
    "step_order": step_order,
    "skipped_verification": skipped_verification,
    "unauthenticated_reads": unauthenticated_reads,
    "looping": looping,
}


class RewardConfigError(ValueError):
    """A reward configuration names an unknown term or gives a non-numeric weight."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail


@dataclass(frozen=True)
class RewardWeights:
    """Multiplier per term; the defaults are the operators' playbook.

    Process penalties are per violation. `skipped_verification` outweighs the quick-completion
    bonus so that dropping authentication to finish in fewer steps never pays; reading a customer's
    records unauthenticated costs less (nothing changed) but still more than nothing.
    """

    completed: float = 10.0
    failed: float = -5.0
    escalated_necessary: float = 2.0
    escalated_unnecessary: float = -1.0
    too_many_actions: float = -0.5
    quick_completion: float = 1.0
    sentiment: float = 0.5
    sentiment_shaped: float = 0.0  # the graded variant, off unless an operator prefers it
    step_order: float = -1.0
    skipped_verification: float = -2.0
    unauthenticated_reads: float = -0.5
    looping: float = -1.0

    @classmethod
    def from_dict(cls, config: Mapping[str, Any] | None) -> RewardWeights:
        """Defaults overridden by `config`; an unknown name or a non-finite number is an error.

        >>> RewardWeights.from_dict({"looping": -2}).looping
        -2.0
        """
        valid = [f.name for f in fields(cls)]
        config = dict(config or {})
        unknown = sorted(set(config) - set(valid))
        if unknown:
            raise RewardConfigError("unknown_reward_term", f"{unknown} not among the valid terms {valid}")
        values: dict[str, float] = {}
        for name, value in config.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise RewardConfigError("bad_reward_weight", f"weight {name}={value!r} is not a finite number")
            values[name] = float(value)
        return cls(**values)

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def success_worth(self) -> float:
        """What turning a failure into a verified success adds to the reward: `completed - failed`.

        >>> RewardWeights().success_worth()
        15.0
        """
        return self.completed - self.failed


def _resolve(weights: RewardWeights | Mapping[str, Any] | None) -> RewardWeights:
    return weights if isinstance(weights, RewardWeights) else RewardWeights.from_dict(weights)


def _check_names(names: Iterable[str]) -> list[str]:
    names = list(names)
    unknown = [n for n in names if n not in REWARD_TERMS]
    if unknown:
        raise RewardConfigError("unknown_reward_term", f"{unknown} not among the valid terms {list(REWARD_TERMS)}")
    return names


def score_episode(episode: Episode, weights: RewardWeights | Mapping[str, Any] | None = None) -> dict[str, float]:
    """Each term's weighted value, by name (every term, zeros included, so logs line up)."""
    resolved = _resolve(weights)
    return {name: getattr(resolved, name) * term(episode) for name, term in REWARD_TERMS.items()}


def total_reward(episode: Episode, weights: RewardWeights | Mapping[str, Any] | None = None) -> float:
    """The sum of `score_episode`: the scalar a trainer optimises."""
    return sum(score_episode(episode, weights).values())


class TrlRewardFunction:
    """One weighted term as a TRL reward function `(completions, **kwargs) -> list[float]`.

    TRL 1.16's GRPOTrainer passes the per-rollout environment instances as
    `kwargs["environments"]` (one per completion, aligned with `completions`) when it was built with
    `environment_factory`. The completion text itself is ignored: the reward reads only what the
    environment recorded. A class rather than a closure so it pickles; TRL logs it by `__name__`.
    """

    def __init__(self, name: str, weight: float) -> None:
        self.term = REWARD_TERMS[_check_names([name])[0]]
        self.weight = float(weight)
        self.__name__ = f"reward_{name}"

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float]:
        environments = kwargs.get("environments")
        if environments is None:
            raise ValueError(
                f"{self.__name__} needs kwargs['environments']: build GRPOTrainer with "
                "environment_factory=RetailEnvironment so each completion has its environment"
            )
        if len(environments) != len(completions):
            raise ValueError(f"{self.__name__}: {len(environments)} environments for {len(completions)} completions")
        return [self.weight * self.term(env.episode) for env in environments]

    def __repr__(self) -> str:
        return f"TrlRewardFunction({self.__name__!r}, weight={self.weight})"


def trl_reward_functions(
    names: Iterable[str] | None = None, weights: RewardWeights | Mapping[str, Any] | None = None
) -> list[TrlRewardFunction]:
    """TRL reward functions for `names` (all terms when None), each weighted, distinct `__name__`s.

    Pass them as `reward_funcs` and leave `GRPOConfig.reward_weights` unset: the weights are
    already applied, and TRL sums the functions' outputs.

    >>> [f.__name__ for f in trl_reward_functions(["completed", "looping"])]
    ['reward_completed', 'reward_looping']
    """
    resolved = _resolve(weights)
    chosen = _check_names(REWARD_TERMS if names is None else names)
    if len(set(chosen)) != len(chosen):
        raise RewardConfigError("duplicate_reward_term", f"{chosen} names a term twice")
    return [TrlRewardFunction(name, getattr(resolved, name)) for name in chosen]
