"""What a finished GRPO run reports: one typed summary, sent through the run's reporter.

`training.grpo.run` returns it and reports it as the `final` event (`to_dict`, JSON-safe: a NaN
loss travels as the string "nan"); the launcher rebuilds it from that event (`from_dict`). Under
Dagster the event arrives as a Pipes custom message, which is where `grpo_candidate` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from training.reporting import json_safe

FINAL_EVENT = "final"


@dataclass(frozen=True)
class GRPOResult:
    """`model_path`: the saved model (`<output_dir>/final`); `resumed_from` the checkpoint the run
    resumed from (None: trained from step 0); `metrics` the last value TRL logged of each metric;
    `reward_curve` the mean reward of every logged step, resumed steps included (what the
    reward-hacking gate reads); `zero_std_fraction` the share of generation groups whose rewards
    were all equal (1.0: no learning signal at all; None: never logged)."""

    final_step: int
    model_path: str
    train_loss: float
    world_size: int = 1
    resumed_from: str | None = None
    resumed_from_step: int = 0
    seconds: float = 0.0
    reward_curve: tuple[float, ...] = ()
    zero_std_fraction: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    level_mix: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe (non-finite floats as strings), as the reporter sends it."""
        return json_safe({**asdict(self), "reward_curve": list(self.reward_curve)})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> GRPOResult:
        """Rebuild one sent with `to_dict`; a missing required field is a KeyError naming it,
        other keys (a launcher's own, like the event's `kind`) are ignored."""
        zero_std = data.get("zero_std_fraction")
        return cls(
            final_step=int(data["final_step"]),
            model_path=str(data["model_path"]),
            train_loss=float(data["train_loss"]),  # float("nan") reads the string json_safe wrote
            world_size=int(data.get("world_size", 1)),
            resumed_from=data.get("resumed_from"),
            resumed_from_step=int(data.get("resumed_from_step", 0)),
            seconds=float(data.get("seconds", 0.0)),
            reward_curve=tuple(float(r) for r in data.get("reward_curve", ())),
            zero_std_fraction=None if zero_std is None else float(zero_std),
            metrics={str(k): float(v) for k, v in (data.get("metrics") or {}).items()},
            level_mix=dict(data.get("level_mix") or {}),
        )
