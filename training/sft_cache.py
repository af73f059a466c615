"""A warm start reused across weeks: one SFT folder per recipe, trained once.

The folder is named after what it warm-starts and how (the base folder, the SFT settings, the
curriculum level and the trajectory format), so another base, other settings, another level or a
new trajectory format get a folder of their own, and a cached warm start is reused only when it is
the one this configuration would train.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from training.sft import TRAJECTORY_FORMAT, SFTSettings, warm_start


def recipe_dir(models: Path, base: Path, settings: SFTSettings, level: int) -> Path:
    """`<models>/<base name>-sft-<recipe>`: the recipe is 10 hex digits of sha256 over the recipe."""
    recipe = hashlib.sha256(repr((str(base), settings, level, TRAJECTORY_FORMAT)).encode()).hexdigest()[:10]
    return models / f"{base.name}-sft-{recipe}"


def cached_warm_start(
    models: Path,
    base: Path,
    settings: SFTSettings,
    level: int,
    demonstrations: Callable[[], Sequence[Mapping[str, Any]]],
    log: Callable[[str], None] = print,
) -> tuple[Path, dict[str, Any] | None]:
    """The warm-started folder of this recipe and the SFT summary when it was trained now (None:
    reused). `demonstrations` is called only when training, so a cached recipe builds none."""
    warm = recipe_dir(models, base, settings, level)
    if (warm / "config.json").exists():
        return warm, None
    demos = demonstrations()
    log(
        f"SFT warm start of {base} on {len(demos)} train-split trajectories "
        f"(level {level}, {settings.steps} steps, relabel {settings.relabel})"
    )
    return warm, warm_start(base, demos, warm, settings)
