"""Settings declared once: the launchpad's defaults are the data plane's own declarations."""

from __future__ import annotations

from assets.data import SplitConfig, WindowConfig
from dataplane import splits, window


def _default(config_class, field: str):
    return config_class.model_fields[field].default


def test_the_window_size_in_the_launchpad_is_the_data_planes():
    assert _default(WindowConfig, "size") == window.DEFAULT_SIZE == 10_000


def test_the_split_fractions_in_the_launchpad_are_the_data_planes():
    fractions = tuple(_default(SplitConfig, name) for name in ("train", "calibration", "shadow"))
    assert fractions == splits.DEFAULT_FRACTIONS


def test_served_conversations_get_the_turn_cap_they_are_evaluated_with():
    """Serving (the demo's traffic) and evaluation cut an unfinished conversation at the same turn."""
    import inspect

    from assets.evaluation import EvalConfig
    from domains.retail.traffic.serving import serve
    from evaluation.reports import evaluate_pair
    from training.sandbox.rollout import SERVING_MAX_TURNS

    assert _default(EvalConfig, "max_turns") == SERVING_MAX_TURNS
    for function in (serve, evaluate_pair):
        assert inspect.signature(function).parameters["max_turns"].default == SERVING_MAX_TURNS, function
