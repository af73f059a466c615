"""`weights_changed`: unchanged weights stop the week unless the run had no learning signal at all."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.training import weights_changed_check
from training.grpo import _mean_logged


def test_changed_weights_pass():
    result = weights_changed_check(True, 1.0, "base", "cand")
    assert result.passed and result.severity == dg.AssetCheckSeverity.ERROR


@pytest.mark.parametrize("zero_std_fraction", [0.0, 0.5, 0.99, None])
def test_unchanged_weights_despite_a_signal_are_a_blocking_failure(zero_std_fraction):
    # Some group saw different rewards (or the trainer did not say): a gradient existed, so
    # weights that did not move mean broken wiring, and the week must stop.
    result = weights_changed_check(False, zero_std_fraction, "base", "cand")
    assert not result.passed and result.severity == dg.AssetCheckSeverity.ERROR


def test_unchanged_weights_without_any_signal_are_a_warning():
    result = weights_changed_check(False, 1.0, "base", "cand")
    assert not result.passed and result.severity == dg.AssetCheckSeverity.WARN
    assert "no learning signal" in result.description
    assert result.metadata["zero_std_fraction"].value == 1.0


def test_the_zero_spread_share_is_averaged_over_the_logged_steps():
    history = [{"frac_reward_zero_std": 1.0}, {"loss": 0.1}, {"frac_reward_zero_std": 0.5}]
    assert _mean_logged(history, "frac_reward_zero_std") == pytest.approx(0.75)
    assert _mean_logged([{"loss": 0.1}], "frac_reward_zero_std") is None
