"""How a setting is declared, in every room: `setting(default, help, **extra)` on a dataclass field.

A concern's settings are one dataclass owned by the room that uses them (the window's in
`dataplane.window`, GRPO's in `training.grpo_config`, the gates' in `evaluation.gates`, ...).
Each field carries its default and its help text here, so the Dagster config built from the
dataclass (`assets.configs.config_from_dataclass`), `retrain config show` and the tests all read
one declaration. It lives in the data plane, the lowest room, so every room above may import it.

    >>> from dataclasses import dataclass, fields
    >>> @dataclass(frozen=True)
    ... class Knobs:
    ...     size: int = setting(10, "how many")
    >>> fields(Knobs)[0].metadata["help"]
    'how many'
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


def setting(
    default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | None = None, **extra: Any
) -> Any:
    """A dataclass field with `default` (or `factory`, for a mutable default; neither: required)
    and `help` in its metadata, beside any `extra` metadata a room reads (GRPO's `trl=`, the
    gates' `tightens=`). An empty help is refused: a setting nobody can read is not declared."""
    if not help.strip():
        raise ValueError("a setting needs a help text")
    metadata = {"help": help, **extra}
    if factory is not None:
        if default is not dataclasses.MISSING:
            raise ValueError("a setting takes a default or a factory, not both")
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def help_of(source: type, name: str) -> str:
    """The help text of `source`'s setting `name`."""
    return {f.name: f for f in dataclasses.fields(source)}[name].metadata["help"]


def default_of(source: type, name: str) -> Any:
    """The declared default of `source`'s setting `name` (a factory's value; MISSING when required)."""
    spec = {f.name: f for f in dataclasses.fields(source)}[name]
    if spec.default is not dataclasses.MISSING:
        return spec.default
    if spec.default_factory is not dataclasses.MISSING:
        return spec.default_factory()
    return dataclasses.MISSING
