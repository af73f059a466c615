"""Checking a tool call's arguments against the tool's signature, before anything runs.

The policy is a language model: it will send lists where strings belong, invent arguments,
forget some, and (under reward pressure) try megabyte strings and deeply nested junk. Every
such call must become an `Error:` result with no state change, so arguments are checked here
against the declared parameters, with hard size limits, and only a clean copy reaches a tool.
"""

from __future__ import annotations

import copy
import inspect
import itertools
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MAX_STRING_CHARS = 10_000  # one argument string; an address line or a message is far shorter
MAX_LIST_ITEMS = 100  # item id lists; the largest reference order has a handful of items
MAX_DEPTH = 4  # arguments dict -> list -> string is depth 2; more is junk
MAX_NODES = 2_000  # containers and scalars walked before the arguments are called too large
_PREVIEW_CHARS = 200


class ArgumentError(ValueError):
    """A tool call whose arguments do not fit the tool; the message becomes the Error result."""


@dataclass(frozen=True)
class ParamSpec:
    """The declared parameters of one tool, in order: name -> a JSON type ('string', 'integer',
    'number', 'boolean', 'object', 'list', or 'list[<type>]'); `required` None means all."""

    tool: str
    kinds: dict[str, str]
    required: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.kinds)

    def is_required(self, name: str) -> bool:
        return self.required is None or name in self.required


_SCALARS: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
}
_ARTICLE = {
    "string": "a string",
    "integer": "an integer",
    "number": "a number",
    "boolean": "a boolean",
    "object": "an object",
}


def _fits(value: Any, kind: str) -> bool:
    allowed = _SCALARS.get(kind)
    if allowed is None:
        return True
    if type(value) is bool and kind != "boolean":  # True is no count and no price
        return False
    return type(value) in allowed


def param_spec(fn: Callable[..., Any]) -> ParamSpec:
    """Read a tool method's parameters from its type hints (the same hints the JSON schema uses)."""
    hints = typing.get_type_hints(fn)
    kinds: dict[str, str] = {}
    for name in list(inspect.signature(fn).parameters)[1:]:  # skip self
        hint = hints.get(name)
        if hint is str:
            kinds[name] = "string"
        elif hint == list[str]:
            kinds[name] = "list[string]"
        else:
            raise TypeError(f"tool {fn.__name__}: parameter {name} has unsupported type {hint!r}")
    return ParamSpec(fn.__name__, kinds)


def _check_size(arguments: dict[Any, Any]) -> None:
    """Bound depth, node count and string length without recursion (junk can be deep)."""
    stack: list[tuple[Any, int]] = [(arguments, 1)]
    nodes = 0
    while stack:
        value, depth = stack.pop()
        nodes += 1
        if nodes > MAX_NODES:
            raise ArgumentError(f"arguments too large (more than {MAX_NODES} values)")
        if isinstance(value, str):
            if len(value) > MAX_STRING_CHARS:
                raise ArgumentError(f"argument string longer than {MAX_STRING_CHARS} characters")
        elif isinstance(value, (dict, list, tuple, set)):
            if depth > MAX_DEPTH:
                raise ArgumentError(f"arguments nested deeper than {MAX_DEPTH} levels")
            children = itertools.chain(value.keys(), value.values()) if isinstance(value, dict) else value
            for count, child in enumerate(children):
                if count + nodes > MAX_NODES:
                    raise ArgumentError(f"arguments too large (more than {MAX_NODES} values)")
                stack.append((child, depth + 1))


def _short(value: Any) -> str:
    """A short quoted form of a name; non-strings by type only (repr of junk can recurse deeply)."""
    if not isinstance(value, str):
        return f"<{type(value).__name__}>"
    text = repr(value[:60])
    return text if len(value) <= 57 else text[:-1] + "...'"


def check_arguments(spec: ParamSpec, arguments: Any) -> dict[str, Any]:
    """Return a clean copy of `arguments` for `spec`, or raise ArgumentError saying what is wrong."""
    if not isinstance(arguments, dict):
        raise ArgumentError(f"arguments of {spec.tool} must be a JSON object, got {type(arguments).__name__}")
    _check_size(arguments)
    for key in arguments:
        if key not in spec.kinds:
            raise ArgumentError(f"unexpected argument {_short(key)} for tool {spec.tool}")
    clean: dict[str, Any] = {}
    for name, kind in spec.kinds.items():
        if name not in arguments:
            if spec.is_required(name):
                raise ArgumentError(f"missing argument '{name}' for tool {spec.tool}")
            continue
        value = arguments[name]
        if kind.startswith("list"):
            inner = kind[5:-1] if kind.startswith("list[") else ""
            if type(value) is not list or any(not _fits(item, inner) for item in value):
                wanted = f"a list of {inner}s" if inner in _SCALARS else "a list"
                raise ArgumentError(f"argument '{name}' of {spec.tool} must be {wanted}")
            if len(value) > MAX_LIST_ITEMS:
                raise ArgumentError(f"argument '{name}' of {spec.tool} has more than {MAX_LIST_ITEMS} items")
            clean[name] = copy.deepcopy(value)
        else:
            if not _fits(value, kind):
                raise ArgumentError(
                    f"argument '{name}' of {spec.tool} must be {_ARTICLE.get(kind, kind)}, got {type(value).__name__}"
                )
            clean[name] = copy.deepcopy(value) if isinstance(value, dict) else value
    return clean


def preview(value: Any, depth: int = 0) -> Any:
    """A small JSON-safe stand-in for rejected arguments, so the audit log stays bounded."""
    if isinstance(value, str):
        return value if len(value) <= _PREVIEW_CHARS else value[:_PREVIEW_CHARS] + f"...<{len(value)} chars>"
    if value is None or isinstance(value, (bool, int, float)):
        return value
    if depth >= 2:
        return f"<{type(value).__name__}>"
    if isinstance(value, dict):
        shown = {
            _short(k) if not isinstance(k, str) else preview(k, 2): preview(v, depth + 1)
            for k, v in itertools.islice(value.items(), 20)
        }
        if len(value) > 20:
            shown["..."] = f"<{len(value)} keys>"
        return shown
    if isinstance(value, (list, tuple, set)):
        shown_list = [preview(v, depth + 1) for v in itertools.islice(value, 20)]
        if len(value) > 20:
            shown_list.append(f"<{len(value)} items>")
        return shown_list
    return f"<{type(value).__name__}>"
