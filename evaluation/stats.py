"""Paired statistics for comparing two policies on the same conversations, and reward alignment.

Candidate and champion meet the same customers (same records, same simulator seeds), so their
outcomes pair up per conversation. Paired tests use that: McNemar looks only at the conversations
where the two disagree, and the paired bootstrap resamples conversations, not outcomes, so the
correlation between the two arms is kept.

Conversations are not independent, though: an evaluation set holds several tasks of one customer,
each tried k times, and a policy that fails one customer's order tends to fail that customer's
other trials too. 120 calibration trials may come from 25 customers, and treating them as 120
independent pairs makes every interval too narrow and every p-value too small. The gates therefore
use the customer-clustered versions (`clustered_comparison`): a paired bootstrap that resamples
customers, and a sign test over per-customer differences. With one trial per cluster both reduce
exactly to the per-conversation ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import binomtest, bootstrap, mannwhitneyu

_MAX_BATCH_INDICES = 2_000_000


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


def mcnemar_exact(a: Sequence[bool], b: Sequence[bool]) -> McNemarResult:
    """Exact McNemar test on paired success flags (two-sided).

    >>> mcnemar_exact([True, True, True, False], [False, False, False, False]).p_value
    0.25
    """
    xa, xb = _paired(a, b)
    only_a = int(np.sum((xa > 0) & (xb <= 0)))
    only_b = int(np.sum((xa <= 0) & (xb > 0)))
    discordant = only_a + only_b
    # Without a discordant pair there is no evidence either way (binomtest needs n >= 1).
    p_value = 1.0 if discordant == 0 else float(binomtest(only_a, discordant, 0.5, alternative="two-sided").pvalue)
    return McNemarResult(only_a, only_b, p_value)


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
    if len(diffs) == 1:
        # Every resample of a single pair is that pair (scipy's bootstrap wants two or more).
        point = float(diffs[0])
        return BootstrapCI(point, point, point, confidence, n_resamples, seed)
    result = bootstrap(
        (diffs,),
        np.mean,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        # Batches of at most ~2M drawn indices, so 5,000 pairs x 10,000 resamples never needs a
        # 400 MB index matrix.
        batch=max(1, _MAX_BATCH_INDICES // len(diffs)),
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return BootstrapCI(float(diffs.mean()), float(low), float(high), confidence, n_resamples, seed)


@dataclass(frozen=True)
class ClusterSignTest:
    """Exact sign test over clusters: per cluster, the mean of a minus the mean of b.

    `won` counts clusters where a did better on average, `lost` where b did, `tied` the rest; the
    p-value is the two-sided exact binomial test of `won` against Binomial(won + lost, 1/2).
    """

    won: int
    lost: int
    tied: int
    p_value: float


@dataclass(frozen=True)
class ClusteredComparison:
    """mean(a) - mean(b) over paired trials, with inference over independent clusters (customers).

    `ci` is the cluster bootstrap interval of the difference (its `difference` is over all trials),
    `sign` the sign test over clusters; `trials` and `clusters` say how much evidence there was.
    """

    ci: BootstrapCI
    sign: ClusterSignTest
    trials: int
    clusters: int


def _cluster_sums(
    a: Sequence[bool | float], b: Sequence[bool | float], clusters: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Per cluster, in order of first appearance: the summed difference a - b and the number of pairs."""
    xa, xb = _paired(a, b)
    if len(clusters) != len(xa):
        raise PairingError(f"{len(clusters)} cluster keys for {len(xa)} pairs")
    first: dict[str, int] = {}
    index = np.asarray([first.setdefault(str(c), len(first)) for c in clusters])
    return np.bincount(index, weights=xa - xb), np.bincount(index).astype(float)


def _ratio(diffs: np.ndarray, sizes: np.ndarray, axis: int = -1) -> np.ndarray:
    # The success-rate difference of a resample: its clusters' summed differences over their trials.
    return diffs.sum(axis=axis) / sizes.sum(axis=axis)


def cluster_bootstrap_ci(
    a: Sequence[bool | float],
    b: Sequence[bool | float],
    clusters: Sequence[str],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> BootstrapCI:
    """Percentile bootstrap interval of mean(a) - mean(b), resampling clusters with replacement.

    `clusters[i]` names the independent unit pair i belongs to (a customer). Each resample draws as
    many clusters as there are, with replacement, keeps every pair of each drawn cluster, and
    measures the difference of success rates over the pairs it holds (clusters of different sizes
    weigh by their pairs, as the point estimate does). Within-customer correlation is so carried
    into the interval instead of being averaged away. Deterministic for a seed; with one pair per
    cluster it is exactly `paired_bootstrap_ci` (same draws, same interval).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if n_resamples < 1:
        raise ValueError(f"n_resamples must be positive, got {n_resamples}")
    diffs, sizes = _cluster_sums(a, b, clusters)
    point = float(diffs.sum() / sizes.sum())
    if len(diffs) == 1:
        # Every resample of a single cluster is that cluster (scipy's bootstrap wants two or more).
        return BootstrapCI(point, point, point, confidence, n_resamples, seed)
    result = bootstrap(
        (diffs, sizes),
        _ratio,
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        batch=max(1, _MAX_BATCH_INDICES // len(diffs)),
        rng=np.random.default_rng(seed),
    )
    low, high = result.confidence_interval
    return BootstrapCI(point, float(low), float(high), confidence, n_resamples, seed)


def cluster_sign_test(a: Sequence[bool | float], b: Sequence[bool | float], clusters: Sequence[str]) -> ClusterSignTest:
    """McNemar's idea one level up: which arm did better on each customer, and is that lopsided.

    Per cluster, the mean of a minus the mean of b decides won (> 0), lost (< 0) or tied; ties carry
    no evidence either way and are left out, as McNemar leaves out concordant pairs. The clusters
    are independent, so under "no difference" each untied one is a fair coin: exact two-sided
    binomial p. With one pair per cluster this is McNemar's exact test.
    """
    diffs, _sizes = _cluster_sums(a, b, clusters)
    won, lost = int(np.sum(diffs > 0)), int(np.sum(diffs < 0))
    untied = won + lost
    p_value = 1.0 if untied == 0 else float(binomtest(won, untied, 0.5, alternative="two-sided").pvalue)
    return ClusterSignTest(won, lost, len(diffs) - untied, p_value)


def clustered_comparison(
    a: Sequence[bool | float],
    b: Sequence[bool | float],
    clusters: Sequence[str],
    n_resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
) -> ClusteredComparison:
    """The cluster bootstrap CI and the cluster sign test of a - b, with the evidence's size."""
    ci = cluster_bootstrap_ci(a, b, clusters, n_resamples=n_resamples, confidence=confidence, seed=seed)
    return ClusteredComparison(ci, cluster_sign_test(a, b, clusters), len(a), len(set(map(str, clusters))))


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
    # U counts the (positive, negative) pairs ordered right, ties one half: exactly the AUC's
    # numerator. Only the statistic is read, so the cheap asymptotic p-value path is asked for.
    u = mannwhitneyu(pos, neg, alternative="two-sided", method="asymptotic").statistic
    return float(u / (len(pos) * len(neg)))


def agreement_rate(predicted: Sequence[bool], actual: Sequence[bool]) -> float:
    """Fraction of items where two binary judgements agree (e.g. proxy success vs human label)."""
    xp, xa = _paired(predicted, actual)
    return float(np.mean((xp > 0) == (xa > 0)))
