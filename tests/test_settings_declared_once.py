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
