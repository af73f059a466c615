"""The warm start's cache: one folder per recipe, reused only for the same recipe."""

from __future__ import annotations

from pathlib import Path

from training.sft import SFTSettings
from training.sft_cache import cached_warm_start, recipe_dir


def test_the_folder_names_the_recipe_and_a_cached_one_is_reused_without_building_demonstrations(tmp_path):
    base, settings = Path("models/retail-agent-tiny"), SFTSettings()
    warm = recipe_dir(tmp_path, base, settings, 1)
    assert warm.parent == tmp_path and warm.name.startswith("retail-agent-tiny-sft-")
    assert warm == recipe_dir(tmp_path, base, SFTSettings(), 1)  # the same recipe, the same folder
    others = {recipe_dir(tmp_path, base, settings, 2), recipe_dir(tmp_path, Path("other/base"), settings, 1)}
    others.add(recipe_dir(tmp_path, base, SFTSettings(steps=settings.steps + 1), 1))
    assert warm not in others and len(others) == 3

    warm.mkdir()
    (warm / "config.json").write_text("{}")

    def unused():
        raise AssertionError("a cached recipe builds no demonstrations")

    assert cached_warm_start(tmp_path, base, settings, 1, unused) == (warm, None)
