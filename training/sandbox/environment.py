"""The sandbox as TRL's GRPOTrainer sees it (`environment_factory`): the retail tools plus `get_reward`.

Public methods are exactly the agent's tools plus `reset` and `get_reward`, because TRL turns every
other public function of the class into a tool. `environment_class(tools)` offers a subset.

    >>> env = RetailEnvironment()
    >>> env.reset(initial_state={"users": {}, "orders": {}, "products": {}})
    >>> call_tool(env, "rm_rf", {})
    "Error: unknown tool 'rm_rf'"
    >>> env.get_reward()
    -5.0
"""

from __future__ import annotations

from collections.abc import Iterable

from training.rewards import total_reward
from training.sandbox.core import EnvironmentSetupError
from training.sandbox.tools import TOOL_NAMES, RetailTools, call_tool, check_tool_names, replay_actions

__all__ = [
    "RetailEnvironment",
    "TOOL_NAMES",
    "call_tool",
    "check_tool_names",
    "environment_class",
    "replay_actions",
    "EnvironmentSetupError",
]


class RetailEnvironment(RetailTools):
    """The retail world behind the agent's tools; `reset(**row)` starts a conversation."""

    def get_reward(self) -> float:
        """The episode's total reward (training.rewards), read from state and audit log only."""
        return float(total_reward(self.episode))


_SUBSETS: dict[tuple[str, ...], type[RetailEnvironment]] = {}


def environment_class(tools: Iterable[str] | None = None) -> type[RetailEnvironment]:
    """RetailEnvironment offering only `tools` (None: every tool).

    A curriculum level that needs five tools should not make a tiny policy read fifteen schemas
    every turn (the schemas are most of its prompt). TRL lists a class's tools by its public
    functions, so a withheld tool is shadowed by None (neither listed nor callable), and the
    allow-list shrinks with it: a call to a withheld tool gets "Error: unknown tool", exactly as
    a made-up name would.
    """
    if tools is None:
        return RetailEnvironment
    offered = check_tool_names(tools)
    if set(offered) == set(TOOL_NAMES):
        return RetailEnvironment
    if offered not in _SUBSETS:
        withheld = {name: None for name in TOOL_NAMES if name not in offered}
        subset = type(
            "RetailEnvironment",
            (RetailEnvironment,),
            {
                **withheld,
                "_TOOLS": {name: RetailEnvironment._TOOLS[name] for name in offered},
                "__doc__": f"RetailEnvironment offering only {', '.join(offered)}.",
            },
        )
        _SUBSETS[offered] = subset
    return _SUBSETS[offered]
