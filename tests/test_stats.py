"""Paired statistics against hand-computed values and scipy."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import binomtest

from evaluation.metrics import distribution, total_variation
from evaluation.stats import (
    PairingError,
    agreement_rate,
    cluster_bootstrap_ci,
    cluster_sign_test,
    clustered_comparison,
    mcnemar_exact,
    paired_bootstrap_ci,
    roc_auc,
)


def _pairs(only_a: int, only_b: int, both: int = 0, neither: int = 0) -> tuple[list[bool], list[bool]]:
    a = [True] * only_a + [False] * only_b + [True] * both + [False] * neither
    b = [False] * only_a + [True] * only_b + [True] * both + [False] * neither
    return a, b


@pytest.mark.parametrize(
    ("only_a", "only_b", "expected"),
    [
        (3, 0, 0.25),  # 2 * (1/2)^3
        (0, 0, 1.0),  # no discordant pairs: no evidence either way
        (1, 1, 1.0),
        (5, 1, 14 / 64),  # 2 * (C(6,0) + C(6,1)) / 2^6
        (0, 6, 2 / 64),
    ],
)
def test_mcnemar_exact_matches_hand_computed(only_a, only_b, expected):
    a, b = _pairs(only_a, only_b, both=4, neither=2)
    result = mcnemar_exact(a, b)
    assert (result.only_a, result.only_b) == (only_a, only_b)
    assert result.p_value == pytest.approx(expected)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 40), st.integers(0, 40), st.integers(1, 10))
def test_mcnemar_exact_matches_scipy_binomtest(only_a, only_b, concordant):
    a, b = _pairs(only_a, only_b, both=concordant, neither=concordant)
    n = only_a + only_b
    expected = 1.0 if n == 0 else binomtest(only_a, n, 0.5, alternative="two-sided").pvalue
    assert mcnemar_exact(a, b).p_value == pytest.approx(expected, rel=1e-9, abs=1e-12)


def test_mcnemar_is_symmetric_and_ignores_concordant_pairs():
    a, b = _pairs(7, 2, both=50, neither=50)
    a2, b2 = _pairs(7, 2)
    assert mcnemar_exact(a, b).p_value == mcnemar_exact(b, a).p_value == mcnemar_exact(a2, b2).p_value


def test_unpaired_inputs_are_refused():
    with pytest.raises(PairingError):
        mcnemar_exact([True], [True, False])
    with pytest.raises(PairingError):
        paired_bootstrap_ci([], [])


def test_bootstrap_ci_contains_true_difference_and_is_reproducible():
    rng = np.random.default_rng(7)
    n = 2000
    latent = rng.random(n)
    # Correlated arms, as candidate and champion are on the same conversations: true difference 0.1.
    champion = latent < 0.5
    candidate = latent < 0.6
    ci = paired_bootstrap_ci(candidate, champion, n_resamples=1000, seed=3)
    assert ci.low <= 0.1 <= ci.high
    assert ci.difference == pytest.approx(candidate.mean() - champion.mean())
    assert ci.low < ci.difference < ci.high
    again = paired_bootstrap_ci(candidate, champion, n_resamples=1000, seed=3)
    assert again == ci
    other = paired_bootstrap_ci(candidate, champion, n_resamples=1000, seed=4)
    assert (other.low, other.high) != (ci.low, ci.high)


def test_bootstrap_ci_of_identical_arms_is_a_point():
    outcomes = [True, False, True, True, False] * 20
    ci = paired_bootstrap_ci(outcomes, outcomes, n_resamples=200, seed=0)
    assert ci.difference == ci.low == ci.high == 0.0


def test_bootstrap_ci_narrows_with_more_pairs():
    rng = np.random.default_rng(1)
    widths = []
    for n in (100, 3000):
        latent = rng.random(n)
        ci = paired_bootstrap_ci(latent < 0.6, latent < 0.5, n_resamples=500, seed=0)
        widths.append(ci.high - ci.low)
    assert widths[1] < widths[0] / 3


def test_roc_auc_hand_computed_with_ties():
    # Positives: 0.8, 0.4, 0.4; negatives: 0.4, 0.1.
    # Pairs (pos, neg): (0.8,0.4)=1 (0.8,0.1)=1 (0.4,0.4)=.5 (0.4,0.1)=1 (0.4,0.4)=.5 (0.4,0.1)=1 -> 5/6
    scores = [0.8, 0.4, 0.4, 0.4, 0.1]
    labels = [True, True, True, False, False]
    assert roc_auc(scores, labels) == pytest.approx(5 / 6)


def test_roc_auc_extremes():
    assert roc_auc([1, 2, 3, 4], [0, 0, 1, 1]) == 1.0
    assert roc_auc([4, 3, 2, 1], [0, 0, 1, 1]) == 0.0
    assert roc_auc([5, 5, 5, 5], [0, 1, 0, 1]) == 0.5
    with pytest.raises(ValueError, match="both classes"):
        roc_auc([1, 2], [True, True])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=30))
def test_roc_auc_equals_pairwise_definition(items):
    scores = [s for s, _ in items]
    labels = [y for _, y in items]
    pos = [s for s, y in items if y]
    neg = [s for s, y in items if not y]
    if not pos or not neg:
        return
    brute = sum(1.0 if p > q else 0.5 if p == q else 0.0 for p in pos for q in neg) / (len(pos) * len(neg))
    assert roc_auc(scores, labels) == pytest.approx(brute)


def test_agreement_rate():
    assert agreement_rate([True, False, True, False], [True, True, True, False]) == 0.75


def test_total_variation():
    assert total_variation({"a": 0.5, "b": 0.5}, {"a": 0.5, "b": 0.5}) == 0.0
    assert total_variation({"a": 1.0}, {"b": 1.0}) == 1.0
    assert total_variation({"a": 0.7, "b": 0.3}, {"a": 0.4, "b": 0.4, "c": 0.2}) == pytest.approx(0.3)
    assert total_variation({}, {}) == 0.0
    assert total_variation({}, {"a": 1.0}) == 1.0
    with pytest.raises(ValueError, match="sum to"):
        total_variation({"a": 0.5}, {"a": 1.0})


def test_distribution_counts_shares():
    assert distribution(["x", "y", "x", "x"]) == {"x": 0.75, "y": 0.25}
    assert distribution([]) == {}


# Values the hand-written versions (an explicit binomial tail sum, a numpy resampling loop and a
# rank-sum AUC) gave on these inputs before scipy.stats replaced them.
def test_bootstrap_ci_pinned_to_the_hand_written_resampling():
    latent = np.random.default_rng(7).random(2000)
    ci = paired_bootstrap_ci(latent < 0.6, latent < 0.5, n_resamples=1000, seed=3)
    assert (ci.difference, ci.low, ci.high) == pytest.approx((0.095, 0.0819875, 0.1080125), rel=1e-12)
    a = [1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 0, 1]
    b = [0, 0, 1, 0, 0, 1, 1, 0, 1, 0, 0, 1]
    small = paired_bootstrap_ci(a, b, n_resamples=500, seed=0)
    assert (small.difference, small.low, small.high) == pytest.approx((0.25, -1 / 12, 7 / 12), rel=1e-12)


def test_bootstrap_ci_pinned_when_resamples_come_in_batches():
    # 5,000 pairs: 400 resamples per batch, so 1,000 resamples are drawn in three batches.
    latent = np.random.default_rng(11).random(5000)
    ci = paired_bootstrap_ci(latent < 0.55, latent < 0.5, n_resamples=1000, seed=5)
    assert (ci.difference, ci.low, ci.high) == pytest.approx((0.0448, 0.039195, 0.0504), rel=1e-12)


def test_bootstrap_ci_of_one_pair_is_that_pair():
    ci = paired_bootstrap_ci([1.0], [0.0], n_resamples=10, seed=0)
    assert (ci.difference, ci.low, ci.high) == (1.0, 1.0, 1.0)


def test_mcnemar_pinned_to_the_hand_written_tail_sum():
    a, b = _pairs(17, 5, both=3)
    assert mcnemar_exact(a, b).p_value == pytest.approx(0.01690053939819336, rel=1e-12)


def test_roc_auc_pinned_to_the_hand_written_rank_sum():
    rng = np.random.default_rng(2)
    scores = np.round(rng.random(40), 1)  # rounded: many ties
    labels = rng.random(40) < 0.4
    assert roc_auc(list(scores), list(labels)) == pytest.approx(0.40773809523809523, rel=1e-12)


# ---- customer-clustered statistics ---------------------------------------------------------------


def _customers(kinds: list[str], trials: int) -> tuple[list[bool], list[bool], list[str]]:
    """Paired trials of customers whose every trial goes one way: "won" (candidate succeeds, baseline
    fails), "lost" (the reverse), "both" or "neither" succeed: trials of a customer agree entirely."""
    outcome = {"won": (True, False), "lost": (False, True), "both": (True, True), "neither": (False, False)}
    a, b, clusters = [], [], []
    for i, kind in enumerate(kinds):
        for _ in range(trials):
            a.append(outcome[kind][0])
            b.append(outcome[kind][1])
            clusters.append(f"customer-{i}")
    return a, b, clusters


def test_cluster_bootstrap_is_wider_than_the_naive_one_when_a_customers_trials_agree():
    # 25 customers x 6 trials: each customer's six trials are one outcome six times over, so there
    # are 25 independent observations, not 150; the interval must be about sqrt(6) times wider.
    kinds = np.random.default_rng(4).choice(["won", "lost", "both", "neither"], size=25, p=[0.3, 0.1, 0.3, 0.3])
    a, b, clusters = _customers(list(kinds), trials=6)
    naive = paired_bootstrap_ci(a, b, n_resamples=2000, seed=0)
    clustered = cluster_bootstrap_ci(a, b, clusters, n_resamples=2000, seed=0)
    assert clustered.difference == naive.difference == pytest.approx(np.mean(a) - np.mean(b))
    assert (clustered.high - clustered.low) > 1.8 * (naive.high - naive.low)
    assert clustered.low < naive.low and clustered.high > naive.high


def test_cluster_bootstrap_is_as_wide_as_the_naive_one_when_trials_are_independent():
    # 100 customers x 6 trials, every trial drawn on its own: grouping them by customer changes
    # nothing real, so the widths agree up to resampling noise (0.88-1.11 over seeds 0-7).
    rng = np.random.default_rng(3)
    a, b = rng.random(600) < 0.6, rng.random(600) < 0.45
    clusters = [f"customer-{i // 6}" for i in range(600)]
    naive = paired_bootstrap_ci(a, b, n_resamples=2000, seed=0)
    clustered = cluster_bootstrap_ci(a, b, clusters, n_resamples=2000, seed=0)
    assert 0.8 < (clustered.high - clustered.low) / (naive.high - naive.low) < 1.25


def test_one_trial_per_customer_is_exactly_the_per_conversation_statistics():
    rng = np.random.default_rng(1)
    for n in (3, 50, 317):
        a, b = rng.random(n) < 0.6, rng.random(n) < 0.4
        clusters = [f"c{i}" for i in range(n)]
        assert cluster_bootstrap_ci(a, b, clusters, seed=3) == paired_bootstrap_ci(a, b, seed=3)
        sign, naive = cluster_sign_test(a, b, clusters), mcnemar_exact(a, b)
        assert (sign.won, sign.lost, sign.p_value) == (naive.only_a, naive.only_b, naive.p_value)


def test_cluster_bootstrap_pinned_to_a_hand_written_customer_resampling():
    """Customers of 1-6 trials: each resample draws as many customers as there are, with
    replacement, and takes the success difference over all the trials it holds."""
    rng = np.random.default_rng(5)
    sizes = rng.integers(1, 7, 30)
    clusters = [f"cust-{c}" for c in range(30) for _ in range(sizes[c])]
    a, b = rng.random(len(clusters)) < 0.6, rng.random(len(clusters)) < 0.45
    ci = cluster_bootstrap_ci(a, b, clusters, n_resamples=1000, seed=9)
    diffs = np.array(
        [sum(int(a[i]) - int(b[i]) for i, k in enumerate(clusters) if k == f"cust-{c}") for c in range(30)]
    )
    draws = np.random.default_rng(9).integers(0, 30, (1000, 30))
    stats = diffs[draws].sum(axis=1) / sizes[draws].sum(axis=1)
    assert ci.difference == pytest.approx(diffs.sum() / sizes.sum(), rel=1e-12)
    assert (ci.low, ci.high) == pytest.approx(tuple(np.percentile(stats, [2.5, 97.5])), rel=1e-12)
    assert cluster_bootstrap_ci(a, b, clusters, n_resamples=1000, seed=9) == ci


def test_cluster_sign_test_counts_customers_not_trials():
    a = [1, 1, 1] + [1, 0, 0] + [1, 1] + [1, 1, 0, 0]
    b = [0, 0, 0] + [1, 1, 0] + [1, 1] + [1, 0, 0, 0]
    clusters = ["A"] * 3 + ["B"] * 3 + ["C"] * 2 + ["D"] * 4
    test = cluster_sign_test(a, b, clusters)
    assert (test.won, test.lost, test.tied) == (2, 1, 1)  # A and D won, B lost, C tied
    assert test.p_value == pytest.approx(binomtest(2, 3, 0.5).pvalue)
    # 30 trials won on 5 customers and none lost: McNemar sees 30 discordant pairs, the sign test 5.
    a, b, clusters = _customers(["won"] * 5 + ["both"] * 5, trials=6)
    assert cluster_sign_test(a, b, clusters).p_value == pytest.approx(2 * 0.5**5)
    assert mcnemar_exact(a, b).p_value == pytest.approx(2 * 0.5**30)


def test_clustered_comparison_counts_the_evidence_and_refuses_bad_clusters():
    a, b, clusters = _customers(["won", "lost", "both"], trials=4)
    cmp = clustered_comparison(a, b, clusters, n_resamples=200, seed=0)
    assert (cmp.trials, cmp.clusters, cmp.sign.won, cmp.sign.lost, cmp.sign.tied) == (12, 3, 1, 1, 1)
    one = cluster_bootstrap_ci([1, 1, 0], [0, 1, 0], ["only"] * 3, n_resamples=10)
    assert (one.difference, one.low, one.high) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    with pytest.raises(PairingError, match="cluster keys"):
        cluster_bootstrap_ci([1, 0], [0, 0], ["x"])
