"""Finding domains by name: the `agent_retrain.domains` entry-point group.

A package registers a domain by declaring, in its pyproject.toml,

    [project.entry-points."agent_retrain.domains"]
    telecom = "telecom_agent.domain:domain"

where the object named is a `domains.api.Domain` instance (or a class or factory that returns one).
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import entry_points
from typing import Any

from domains.api import ENTRY_POINT_GROUP, Domain

DEFAULT_DOMAIN = "retail"


def agent_name(domain: str) -> str:
    """The name a domain's agent goes by: its registered model (`<domain>-agent`, one champion per
    domain) and the label of the traffic a version of it serves (`<domain>-agent/<version>`)."""
    return f"{domain}-agent"


class DomainNotFoundError(LookupError):
    """No installed domain has that name."""


class DomainError(TypeError):
    """An entry point that does not load a usable domain."""


def installed() -> dict[str, Any]:
    """name -> entry point, for every installed domain (the first of a repeated name wins)."""
    found: dict[str, Any] = {}
    for point in entry_points(group=ENTRY_POINT_GROUP):
        found.setdefault(point.name, point)
    return found


def domain_names() -> list[str]:
    return sorted(installed())


@cache
def load_domain(name: str = DEFAULT_DOMAIN) -> Domain:
    """The domain registered under `name`; DomainNotFoundError lists what is installed."""
    points = installed()
    if name not in points:
        raise DomainNotFoundError(f"no domain named {name!r}; installed domains: {sorted(points) or 'none'}")
    target = points[name].load()
    domain = target() if callable(target) and not isinstance(target, Domain) else target
    for attribute in ("name", "tool_specs", "policy", "tables", "intents", "make_environment"):
        if not hasattr(domain, attribute):
            raise DomainError(f"entry point {name!r} loads {type(domain).__name__}, which has no {attribute!r}")
    if domain.name != name:
        raise DomainError(f"entry point {name!r} loads a domain named {domain.name!r}")
    return domain


def clear_cache() -> None:
    """Forget loaded domains (after installing one at run time, as the plug-in test does)."""
    load_domain.cache_clear()
