"""The rollouts' reward and verified success per intent and per persona, logged as GRPO trains.

TRL logs each reward term's batch mean and the total's; a week's task mix holds several intents
(`training.curriculum.week_mix`), and a mean over all of them hides one intent getting worse while
another gets better. Measured on a whole-shop agent: 20 steps left the step's mean reward about
level while served cancellations fell from 23 to 11 of 200 conversations and status answers held.

`RewardTally` rides in the trainer as one more reward function that scores nothing: it returns
None for every rollout, which TRL reads as "not applicable" and leaves out of the sum, and hands
TRL's `log_metric` the batch's mean total reward and success per group. TRL averages those over
each logging step, and the reporting callback forwards them to the reporter and to MLflow with
the trainer's own metrics (`by_intent/<intent>/reward`, `by_intent/<intent>/success`,
`by_persona/<persona>/...`).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from training.rewards.core import verified_success
from training.rewards.terms import TrlRewardFunction

# The dataset columns (`training.curriculum.task_row`) the tally groups by, and their metric prefix.
GROUPS = (("intent", "by_intent"), ("persona", "by_persona"))


# An intent or persona comes from the records (an imported log's may be any text), and MLflow
# refuses a metric name with other characters, an empty path part or a dot-only one.
_UNSAFE = re.compile(r"[^\w\-. :]")


def metric_label(label: Any) -> str:
    """`label` as one part of a metric name MLflow takes: other characters become "_", and an empty
    or dot-only label is "none"."""
    text = _UNSAFE.sub("_", str(label)).strip()
    return text if text.strip(".") else "none"


def group_means(
    totals: Sequence[float], successes: Sequence[bool], labels: Sequence[Any]
) -> dict[str, tuple[float, float, int]]:
    """Per label (as `metric_label` writes it): (mean total reward, verified-success share, rollouts)."""
    grouped: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for total, success, label in zip(totals, successes, labels, strict=True):
        grouped[metric_label(label)].append((total, success))
    return {
        label: (sum(t for t, _ in rows) / len(rows), sum(s for _, s in rows) / len(rows), len(rows))
        for label, rows in sorted(grouped.items())
    }


class RewardTally:
    """A TRL reward function that scores nothing and logs the trained reward per group (see the
    module docstring). `functions`: the reward functions the trainer sums, so the logged total is
    the one GRPO's advantages are computed from."""

    __name__ = "tally"

    def __init__(self, functions: Sequence[TrlRewardFunction]) -> None:
        self.functions = tuple(functions)

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[None]:
        environments = kwargs.get("environments")
        log_metric = kwargs.get("log_metric")
        if environments is None or log_metric is None:
            raise ValueError(
                "tally needs kwargs['environments'] and kwargs['log_metric'] (TRL's GRPOTrainer built with "
                "environment_factory passes both)"
            )
        if len(environments) != len(completions):
            raise ValueError(f"tally: {len(environments)} environments for {len(completions)} completions")
        episodes = [env.episode for env in environments]
        totals = [sum(f.weight * f.term(episode) for f in self.functions) for episode in episodes]
        successes = [verified_success(episode) for episode in episodes]
        for column, prefix in GROUPS:
            labels = kwargs.get(column)
            if labels is None:
                continue  # a dataset without the column: nothing to group by
            for label, (reward, success, rollouts) in group_means(totals, successes, labels).items():
                log_metric(f"{prefix}/{label}/reward", reward)
                log_metric(f"{prefix}/{label}/success", success)
                log_metric(f"{prefix}/{label}/rollouts", float(rollouts))
        return [None] * len(completions)

    def __repr__(self) -> str:
        return f"RewardTally({[f.__name__ for f in self.functions]})"
