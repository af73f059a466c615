"""The sandbox as TRL's GRPOTrainer sees it (`environment_factory`): a domain's tools plus `get_reward`.

Public methods are exactly the agent's tools plus `reset` and `get_reward`, because TRL turns every
other public function of the class into a tool. `environment_class(domain, tools)` builds that
class for a domain from its tool specs (one method per tool, whose signature and docstring say
what the tool's JSON schema says), plus the engine's own `send_message_to_customer`, and can
offer a subset of the tools.

    >>> env = environment_class("retail")()
    >>> env.reset(initial_state={table: {} for table in load_domain("retail").tables})
    >>> call_tool(env, "rm_rf", {})
    "Error: unknown tool 'rm_rf'"
    >>> env.get_reward()
    -5.0
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping
from typing import Any

from domains.registry import DEFAULT_DOMAIN, load_domain
from training.rewards import total_reward
from training.sandbox.core import EnvironmentCore, EnvironmentSetupError, ToolInfo
from training.sandbox.episode import MESSAGE_KIND, MESSAGE_TOOL
from training.sandbox.tool_args import ParamSpec

__all__ = [
    "SandboxEnvironment",
    "call_tool",
    "take_over",
    "check_tool_names",
    "environment_class",
    "tool_names",
    "EnvironmentSetupError",
]

MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": MESSAGE_TOOL,
        "description": "Send a message to the customer and get their reply.",
        "parameters": {
            "type": "object",
            "properties": {"message": {"type": "string", "description": "What to say to the customer."}},
            "required": ["message"],
        },
    },
}
_PYTHON_TYPES: dict[str, Any] = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


class SandboxEnvironment(EnvironmentCore):
    """A domain's world behind the agent's tools; `reset(**row)` starts a conversation."""

    def get_reward(self) -> float:
        """The episode's total reward (training.rewards), read from state and audit log only."""
        return float(total_reward(self.episode))


def _hint(prop: Mapping[str, Any]) -> Any:
    kind = prop.get("type")
    if kind == "array":
        items = prop.get("items") or {}
        inner = _PYTHON_TYPES.get(items.get("type")) if isinstance(items, Mapping) else None
        return list[inner] if inner is not None else list
    return _PYTHON_TYPES.get(kind, str)


def _docstring(function: Mapping[str, Any]) -> str:
    """The Google-style docstring from which `transformers.utils.get_json_schema` reads the
    schema back: the description, then one `name: description` line per parameter, with the
    parameter's enum as `(choices: [...])`."""
    lines = [str(function.get("description") or function["name"]).strip()]
    props = (function.get("parameters") or {}).get("properties") or {}
    if props:
        lines += ["", "Args:"]
        for name, prop in props.items():
            text = " ".join(str(prop.get("description") or name).split())
            if prop.get("enum"):
                text += f" (choices: {list(prop['enum'])!r})".replace("'", '"')
            lines.append(f"    {name}: {text}")
    return "\n".join(lines)


def _param_kind(prop: Mapping[str, Any]) -> str:
    kind = prop.get("type", "string")
    if kind == "array":
        items = prop.get("items") or {}
        inner = items.get("type") if isinstance(items, Mapping) else None
        return f"list[{inner}]" if inner else "list"
    return str(kind)


def param_spec_of(schema: Mapping[str, Any]) -> ParamSpec:
    """The argument checker's view of a tool schema: name -> JSON type, and which are required."""
    function = schema["function"]
    parameters = function.get("parameters") or {}
    props = parameters.get("properties") or {}
    required = tuple(parameters.get("required", list(props)))
    return ParamSpec(function["name"], {n: _param_kind(p) for n, p in props.items()}, required)


def _method(schema: Mapping[str, Any]) -> Any:
    """A tool method for `schema`: named, typed and documented as the schema says."""
    function = schema["function"]
    name = function["name"]
    spec = param_spec_of(schema)
    props = (function.get("parameters") or {}).get("properties") or {}

    def method(self: EnvironmentCore, *args: Any, **kwargs: Any) -> str:
        if args:  # positional use from Python code: name them, refuse what does not fit
            if len(args) > len(spec.names) or any(n in kwargs for n in spec.names[: len(args)]):
                return self._refuse(
                    name, {"args": list(args)[:20], **kwargs}, f"Error: positional arguments do not fit tool {name}"
                )
            kwargs = {**dict(zip(spec.names, args)), **kwargs}
        return self._invoke(name, kwargs)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for pname, prop in props.items():
        default = inspect.Parameter.empty if pname in spec.required else None
        params.append(
            inspect.Parameter(pname, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=default, annotation=_hint(prop))
        )
    method.__name__ = method.__qualname__ = name
    method.__doc__ = _docstring(function)
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    method.__annotations__ = {pname: _hint(prop) for pname, prop in props.items()} | {"return": str}
    return method


def tool_names(domain: str = DEFAULT_DOMAIN) -> tuple[str, ...]:
    """Every tool a sandbox of `domain` can offer: the domain's and the engine's message tool."""
    return (*load_domain(domain).tool_names(), MESSAGE_TOOL)


def check_tool_names(tools: Iterable[str], domain: str = DEFAULT_DOMAIN) -> tuple[str, ...]:
    """`tools` sorted by name, the order TRL lists an environment's tools in (it reads them with
    `inspect.getmembers`), so every prompt shows them in that one order; a name that is no tool
    raises ValueError."""
    wanted = set(tools)
    known = tool_names(domain)
    unknown = sorted(wanted - set(known))
    if unknown:
        raise ValueError(f"unknown tool names {unknown}; the tools of {domain!r} are {list(known)}")
    if not wanted:
        raise ValueError("a tool set needs at least one tool")
    return tuple(sorted(wanted))


_CLASSES: dict[tuple[str, tuple[str, ...]], type[SandboxEnvironment]] = {}


def environment_class(domain: str = DEFAULT_DOMAIN, tools: Iterable[str] | None = None) -> type[SandboxEnvironment]:
    """The sandbox class of `domain` offering only `tools` (None: every tool).

    A curriculum level that needs five tools should not make a tiny policy read fifteen schemas
    every turn (the schemas are most of its prompt). TRL lists a class's tools by its public
    functions, so a withheld tool is simply not defined, and the allow-list shrinks with it: a
    call to a withheld tool gets "Error: unknown tool", exactly as a made-up name would.
    """
    offered = check_tool_names(tool_names(domain) if tools is None else tools, domain)
    key = (domain, offered)
    if key not in _CLASSES:
        loaded = load_domain(domain)
        schemas = {spec.name: spec.schema for spec in loaded.tool_specs} | {MESSAGE_TOOL: MESSAGE_SCHEMA}
        infos: dict[str, ToolInfo] = {}
        for name in offered:
            found = loaded.spec(name)
            kind = MESSAGE_KIND if found is None else found.kind.value
            infos[name] = ToolInfo(param_spec_of(schemas[name]), kind, None if found is None else found.record)
        title = "".join(part.capitalize() for part in domain.replace("-", "_").split("_")) + "Environment"
        _CLASSES[key] = type(
            title,
            (SandboxEnvironment,),
            {
                "_DOMAIN": domain,
                "_TOOLS": infos,
                "__doc__": f"The {domain} sandbox offering {', '.join(offered)}.",
                **{name: _method(schemas[name]) for name in offered},
            },
        )
    return _CLASSES[key]


def call_tool(env: EnvironmentCore, name: Any, arguments: Any, fault: bool = False) -> str:
    """Run one parsed tool call through the allow-list; always a string, never an exception.

    `fault`: a call that reaches the back-end system fails with the retryable error, as it did in
    the conversation being replayed (`evaluation.replay`)."""
    return env._invoke(name, arguments, fault)


def take_over(env: EnvironmentCore) -> None:
    """Reopen a handed-over conversation for the person who takes it (`training.traffic.handoff`):
    the world stays as the agent left it, and the agent's hand-over stays in the audit log."""
    env._take_over()
