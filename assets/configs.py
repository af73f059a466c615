"""Dagster config classes generated from the plain settings dataclasses they feed.

A setting's name, type, default and help are declared once, on the dataclass in `training/`;
the Dagster `Config` (what the launchpad and a run config show) is built from those fields, so a
new setting or a changed default reaches the UI without a second declaration. Only what is
Dagster-specific (a knob of the asset itself, not of the plain code) is declared on a base class.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from typing import Any

import dagster as dg
import pydantic


def setting_field(source: type, name: str, default: Any = dataclasses.MISSING) -> Any:
    """A pydantic field carrying the default and help of `source`'s dataclass field `name`
    (`default` replaces the dataclass default where an asset deliberately differs)."""
    spec = {f.name: f for f in dataclasses.fields(source)}[name]
    description = spec.metadata.get("help")
    if default is not dataclasses.MISSING:
        return pydantic.Field(default=default, description=description)
    if spec.default is not dataclasses.MISSING:
        return pydantic.Field(default=spec.default, description=description)
    if spec.default_factory is not dataclasses.MISSING:
        return pydantic.Field(default_factory=spec.default_factory, description=description)
    return pydantic.Field(description=description)  # required: the run config must give it


def config_from_dataclass(
    source: type,
    name: str,
    *,
    base: type[dg.Config] = dg.Config,
    exclude: Iterable[str] = (),
    prefix: str = "",
    defaults: Mapping[str, Any] | None = None,
    module: str | None = None,
    doc: str | None = None,
) -> type[dg.Config]:
    """A Dagster `Config` subclass of `base` with a field `prefix + f.name` per field `f` of the
    dataclass `source` (minus `exclude`, which the asset supplies itself): same type, default
    (unless `defaults` names it) and help. `module` names where the class lives, for Dagster's
    and pickle's references to it; `doc` is its docstring (default: `base`'s, else `source`'s)."""
    defaults = dict(defaults or {})
    hints = typing.get_type_hints(source)
    excluded = set(exclude)
    known = {f.name for f in dataclasses.fields(source)}
    stray = (excluded | set(defaults)) - known
    if stray:
        raise TypeError(f"{name}: {sorted(stray)} are not fields of {source.__name__}")
    fields: dict[str, Any] = {}
    for spec in dataclasses.fields(source):
        if spec.name in excluded:
            continue
        default = defaults.get(spec.name, dataclasses.MISSING)
        fields[prefix + spec.name] = (hints[spec.name], setting_field(source, spec.name, default))
    clash = set(fields) & set(base.model_fields)
    if clash:
        raise TypeError(f"{name}: {sorted(clash)} are declared both on {base.__name__} and {source.__name__}")
    doc = doc or (base.__doc__ if base is not dg.Config else source.__doc__)
    return pydantic.create_model(name, __base__=base, __doc__=doc, __module__=module or __name__, **fields)


def dataclass_kwargs(config: dg.Config, source: type, prefix: str = "") -> dict[str, Any]:
    """The values of `config`'s fields that came from `source`, by `source`'s field names."""
    names = {f.name for f in dataclasses.fields(source)}
    values = config.model_dump()
    return {
        key[len(prefix) :]: value
        for key, value in values.items()
        if key.startswith(prefix) and key[len(prefix) :] in names
    }
