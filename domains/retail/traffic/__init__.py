"""Simulated retail production traffic: world generator, scenarios, the scripted agent, the days."""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any, ClassVar


class RetailTraffic:
    """The retail domain's `TrafficGenerator`, plus its own full-featured `simulate` (mistake
    rates, drift presets, the level-1 shop), which `retrain simulate` uses for this domain."""

    intent_mix: ClassVar[Mapping[str, float]]

    def __init__(self) -> None:
        from domains.retail.traffic.scenarios import DEFAULT_INTENT_MIX

        self.intent_mix = dict(DEFAULT_INTENT_MIX)

    def generate_world(self, n_customers: int, seed: int) -> dict[str, Any]:
        from domains.retail.traffic.worldgen import generate_world

        return generate_world(n_users=n_customers, seed=seed)

    def sample(self, world: Mapping[str, Any], intent: str, rng: random.Random) -> dict[str, Any] | None:
        from domains.retail.traffic.agents import scenario_row
        from domains.retail.traffic.scenarios import ScenarioError, sample_scenario

        try:
            scenario = sample_scenario(dict(world), intent, rng)
        except ScenarioError:
            return None
        return {"customer_id": scenario.user_id, **scenario_row(scenario)}

    def simulate(self, **options: Any) -> dict[str, Any]:
        from domains.retail.traffic.simulate import simulate

        return simulate(**options)
