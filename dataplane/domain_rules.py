"""What the record contract needs from a domain, looked up once per name.

A record names its domain (`domain`, absent: `retail`); its intent must be one of that domain's,
its `initial_state` must pass the domain's own model, and its customer must be a key of the
domain's customer table. The data plane reaches domains only through `domains.registry` and
`domains.api`: it never imports a domain package itself.

Ingestion validates hundreds of thousands of records a file, so a lookup must cost a dict access:
`DomainLookup` (one per ingest pass) remembers each name it resolved, and the names it did not,
and `rules_for` builds a domain's derived sets once per loaded domain object.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dataplane.errors import ContractError
from domains.api import Domain, ToolKind, ToolSpec
from domains.registry import DEFAULT_DOMAIN, DomainNotFoundError, domain_names, load_domain

__all__ = ["DEFAULT_DOMAIN", "DomainLookup", "DomainRules", "domain_listing", "domain_rules", "rules_for"]


@dataclass(frozen=True)
class DomainRules:
    """A loaded domain and what the contract reads of it, computed once."""

    name: str
    domain: Domain
    intents: frozenset[str]
    customer_table: str
    validate_state: Callable[[Any], Any]
    specs: Mapping[str, ToolSpec] = field(default_factory=dict)  # tool name -> spec

    def kind(self, tool: str) -> ToolKind | None:
        spec = self.specs.get(tool)
        return None if spec is None else spec.kind


# Keyed by the domain object's id, holding the object too (so the id is never reused while the
# entry lives): `load_domain` returns one object per name until `registry.clear_cache`, after
# which the new object gets its own entry.
_DERIVED: dict[int, DomainRules] = {}


def rules_for(domain: Domain) -> DomainRules:
    rules = _DERIVED.get(id(domain))
    if rules is None or rules.domain is not domain:
        rules = DomainRules(
            name=str(domain.name),
            domain=domain,
            intents=frozenset(domain.intents),
            customer_table=str(domain.customer_table),
            validate_state=domain.validate_initial_state,
            specs={spec.name: spec for spec in domain.tool_specs},
        )
        _DERIVED[id(domain)] = rules
    return rules


def _unknown(name: Any, installed: list[str]) -> ContractError:
    return ContractError("unknown_domain", f"domain={repr(name)[:100]} is not installed; installed: {installed}")


def domain_rules(name: str) -> DomainRules:
    """The rules of domain `name`; ContractError `unknown_domain` when none is installed by that name.

    A domain that is installed but fails to load (an import error, a broken entry point) raises
    its own error: that is a broken installation, not a bad record, and must stop the ingest rather
    than quarantine every record of the domain.
    """
    try:
        return rules_for(load_domain(name))
    except DomainNotFoundError:
        raise _unknown(name, domain_names()) from None


class DomainLookup:
    """`domain_rules` remembered by name for one ingest pass (a domain installed meanwhile is seen
    by the next pass). Unknown names are answered from the installed names read once, so a file of
    records naming random domains costs one entry-point scan, not one per record."""

    _MAX_UNKNOWN = 1024  # a hostile file can name any number of domains; remember only so many

    def __init__(self) -> None:
        self._rules: dict[str, DomainRules] = {}
        self._installed: list[str] | None = None
        self._unknown: set[str] = set()

    def __call__(self, name: str) -> DomainRules:
        rules = self._rules.get(name)
        if rules is not None:
            return rules
        if self._installed is None:
            self._installed = domain_names()
        if name in self._unknown or name not in self._installed:
            if len(self._unknown) < self._MAX_UNKNOWN:
                self._unknown.add(name)
            raise _unknown(name, self._installed)
        rules = self._rules[name] = rules_for(load_domain(name))
        return rules


def domain_listing() -> list[dict[str, Any]]:
    """Every installed domain: name, tool count, intent count, tables (what `retrain domains` prints).

    A domain that fails to load is listed with its error instead, so one broken package does not
    hide the others.
    """
    out: list[dict[str, Any]] = []
    for name in domain_names():
        try:
            domain = load_domain(name)
        except Exception as err:  # any failure of third-party code is reported, not raised
            out.append({"name": name, "error": f"{type(err).__name__}: {err}"})
            continue
        out.append(
            {
                "name": name,
                "tools": len(domain.tool_specs),
                "intents": len(domain.intents),
                "tables": list(domain.tables),
                "customer_table": domain.customer_table,
            }
        )
    return out
