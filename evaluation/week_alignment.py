"""The week's reward alignment: the proxy reward against the verdicts people gave that week's traffic.

The labels are those of the interactions served in the week (`dataplane.labels.week_labels`: the
review table and the records' own `human_label` alike, training split or not, since the review
samples all of a week's traffic). So each week is measured on fresh verdicts, never on the same
frozen calibration labels again. An interaction whose raters disagree has no verdict: it is left out
of the score and counted in `disagreements`. The proxy reward is priced with the run's reward
weights, the ones the candidate trained with.

Reading (`read_week_labels`, under the store's connection) is apart from measuring
(`measure_alignment`, which replays every labelled conversation), so the store is not held while
conversations replay.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import duckdb

from dataplane.labels import LabelTally, records_with_verdicts, tally, week_labels
from evaluation.replay import AlignmentEvidence, alignment_evidence
from training.rewards import RewardWeights

# The alignment numbers charted week after week (MLflow metrics `alignment/<name>`, stepped by week).
SERIES = ("auc", "agreement", "n", "positives", "labels", "raters", "disagreements")


@dataclass(frozen=True)
class WeekLabels:
    """The week's labels as read from the store: the tally and the records that have a verdict."""

    week: str
    tally: LabelTally
    records: list[dict[str, Any]]


@dataclass(frozen=True)
class WeekAlignment:
    """The week's labels and the alignment evidence they give (`proxy_rewards[i]` and
    `human_success[i]` belong to the same labelled interaction)."""

    week: str
    tally: LabelTally
    evidence: AlignmentEvidence

    @property
    def proxy_rewards(self) -> list[float]:
        return self.evidence.rewards

    @property
    def human_success(self) -> list[bool]:
        return self.evidence.human

    def summary(self) -> dict[str, Any]:
        """Which week's labels, how many, by how many raters, where they disagree, and the score."""
        return {
            "labels_week": self.week,
            **self.tally.counts(),
            **self.evidence.summary,
            "skipped": len(self.evidence.skipped),
        }


def read_week_labels(con: duckdb.DuckDBPyConnection, week: str, start: datetime, end: datetime) -> WeekLabels:
    """The labels of the interactions that ended in [start, end), and those records with their verdict."""
    counted = tally(week_labels(con, start, end))
    return WeekLabels(week, counted, records_with_verdicts(con, counted.agreed))


def measure_alignment(labels: WeekLabels, reward_weights: Mapping[str, float]) -> WeekAlignment:
    """Replay every labelled conversation and score the proxy reward (the run's weights) against the verdicts."""
    evidence = alignment_evidence(labels.records, RewardWeights.from_dict(dict(reward_weights)))
    return WeekAlignment(labels.week, labels.tally, evidence)


def alignment_series(summary: Mapping[str, Any]) -> dict[str, float]:
    """The charted numbers of an alignment summary; an undefined one (no AUC yet) is left out."""
    return {name: float(summary[name]) for name in SERIES if summary.get(name) is not None}
