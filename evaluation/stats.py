"""Paired statistics for comparing two policies on the same conversations, and reward alignment.

Candidate and champion meet the same customers (same records, same simulator seeds), so their
outcomes pair up per conversation. Paired tests use that: McNemar looks only at the conversations
where the two disagree, and the paired bootstrap resamples conversations, not outcomes, so the
correlation between the two arms is kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


class PairingError(ValueError):
    """Two outcome sequences that cannot be paired (different lengths, or empty)."""


@dataclass(frozen=True)
class McNemarResult:
    """Exact McNemar test on paired binary outcomes.

    `only_a` counts pairs where A succeeded and B failed; `only_b` the reverse. The p-value is the
    two-sided exact binomial test of `only_a` against Binomial(only_a + only_b, 1/2).
    """

    only_a: int
    only_b: int
    p_value: float

    @property
    def discordant(self) -> int:
        return self.only_a + self.only_b


@dataclass(frozen=True)
class BootstrapCI:
    """Point estimate and percentile interval of mean(a) - mean(b) over paired samples."""

    difference: float
    low: float
    high: float
    confidence: float
    n_resamples: int
    seed: int


def _paired(a: Sequence[bool | int | float], b: Sequence[bool | int | float]) -> tuple[np.ndarray, np.ndarray]:
    if len(a) != len(b):
        raise PairingError(f"paired samples differ in length: {len(a)} vs {len(b)}")
    if len(a) == 0:
        raise PairingError("paired samples are empty")
    return np.asarray(a, dtype=float), np.asarray(b, dtype=float)


def _binomial_two_sided(k: int, n: int) -> float:
    """Exact two-sided p-value of k successes in n fair coin flips.

    With p = 1/2 the distribution is symmetric, so "as or less likely than k" is the two tails
    beyond min(k, n - k); doubling the lower tail is exact here (the midpoint, when n is even,
    is the mode and is never in a tail unless k is the midpoint, where the p-value is 1).
    """
    if n == 0:
        return 1.0
    low = min(k, n - k)
    tail = sum(math.comb(n, i) for i in range(low + 1)) / 2**n
    return min(1.0, 2.0 * tail)


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemarResult:
    """Exact McNemar test on paired success flags (two-sided).

    >>> mcnemar_exact([True, True, True, False], [False, False, False, False]).p_value
    0.25
    """
    xa, xb = _paired(a, b)
    only_a = int(np.sum((xa > 0) & (xb <= 0)))
    only_b = int(np.sum((xa <= 0) & (xb > 0)))
    return McNemarResult(only_a, only_b, _binomial_two_sided(only_a, only_a + only_b))


def paired_bootstrap_ci(
    a: Sequence[bool | float],
    b: Sequence[bool | float],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapCI:
    """Percentile bootstrap interval of mean(a) - mean(b), resampling pairs with replacement.

    Deterministic for a seed. The gate reads `.low`: "candidate not worse than champion" means the
    lower bound of (candidate - champion) is above a small negative margin.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    xa, xb = _paired(a, b)
    diffs = xa - xb
    rng = np.random.default_rng(seed)
    n = len(diffs)
    # Chunked so that 5,000 pairs x 10,000 resamples never needs a 400 MB index matrix.
    means = np.empty(n_resamples)
    chunk = max(1, 2_000_000 // n)
    for start in range(0, n_resamples, chunk):
        stop = min(n_resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diffs[idx].mean(axis=1)
    alpha = (1.0 - confidence) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    return BootstrapCI(float(diffs.mean()), float(low), float(high), confidence, n_resamples, seed)


def roc_auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """Area under the ROC curve: P(score of a random positive > that of a random negative).

    Ties count one half (the Mann-Whitney form), so a constant score gives exactly 0.5.
    Raises ValueError when either class is missing, where the AUC is undefined.

    >>> roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True])
    0.75
    """
    s, y = _paired(scores, labels)
    pos, neg = s[y > 0], s[y <= 0]
    if len(pos) == 0 or len(neg) == 0:
        raise ValueError(f"AUC needs both classes: {len(pos)} positive, {len(neg)} negative labels")
    # Rank-based (average ranks for ties) keeps this O(n log n) for large calibration sets.
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    i = 0
    while i < len(s):
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    rank_sum = ranks[y > 0].sum()
    n_pos, n_neg = len(pos), len(neg)
    return float((rank_sum - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def agreement_rate(predicted: Sequence[bool], actual: Sequence[bool]) -> float:
    """Fraction of items where two binary judgements agree (e.g. proxy success vs human label)."""
    xp, xa = _paired(predicted, actual)
    return float(np.mean((xp > 0) == (xa > 0)))
