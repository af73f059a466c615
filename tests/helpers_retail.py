"""The retail domain under the names the tests use: its sandbox class, tool names and tool groups.

The engine speaks of tool kinds; the retail tests speak of retail tools, so they read them here,
from the retail domain's own specs.
"""

from domains.api import ToolKind
from domains.registry import load_domain
from domains.retail.policy import POLICY as SYSTEM_POLICY
from domains.retail.tools import replay_actions
from training.sandbox.environment import call_tool, environment_class, tool_names

RETAIL = load_domain("retail")
RetailEnvironment = environment_class("retail")
TOOL_NAMES = tool_names("retail")
WRITE_TOOLS = frozenset(RETAIL.tool_names(ToolKind.WRITE))
AUTH_TOOLS = frozenset(RETAIL.tool_names(ToolKind.IDENTIFY))
ESCALATION_TOOL = RETAIL.tool_names(ToolKind.HAND_OVER)[0]


def retail_environment_class(tools=None):
    return environment_class("retail", tools)


__all__ = [
    "AUTH_TOOLS",
    "ESCALATION_TOOL",
    "RETAIL",
    "SYSTEM_POLICY",
    "TOOL_NAMES",
    "WRITE_TOOLS",
    "RetailEnvironment",
    "call_tool",
    "environment_class",
    "replay_actions",
    "retail_environment_class",
]
