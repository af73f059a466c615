"""The record contract as JSON Schema, per domain: what `retrain schema [--domain D]` prints.

Pydantic generates the schema from the contract's types (`dataplane.record_model`); the parts a
domain decides are then filled in from the domain: `intent` becomes the enum of its intents,
`initial_state` its `initial_state_schema()`, and `domain` the constant of its name (required for
any domain but the default, since a record without `domain` is read as the default's).
docs/record.schema.json holds the default domain's text.
"""

from __future__ import annotations

import json

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.record_model import RECORD_ADAPTER, SCHEMA_VERSION
from domains.registry import load_domain


def record_json_schema(domain: str = DEFAULT_DOMAIN) -> dict:
    """The record contract of `domain` as JSON Schema (draft 2020-12).

    Raises `domains.registry.DomainNotFoundError` for a domain that is not installed.
    """
    loaded = load_domain(domain)
    schema = RECORD_ADAPTER.json_schema(mode="validation")
    properties = schema["properties"]
    properties["intent"] = {"enum": list(loaded.intents), "title": "Intent", "type": "string"}
    properties["domain"] = {"const": loaded.name, "title": "Domain", "type": "string"}
    schema.setdefault("$defs", {})["InitialState"] = {"title": "InitialState", **loaded.initial_state_schema()}
    properties["initial_state"] = {"$ref": "#/$defs/InitialState"}
    if domain != DEFAULT_DOMAIN:
        schema["required"] = [*schema["required"], "domain"]
    suffix = "" if domain == DEFAULT_DOMAIN else f"/{domain}"
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"agent-retrain/interaction-record/v{SCHEMA_VERSION}{suffix}",
        **schema,
    }


def record_schema_text(domain: str = DEFAULT_DOMAIN) -> str:
    """`record_json_schema` as the text `retrain schema` prints and docs/record.schema.json holds."""
    return json.dumps(record_json_schema(domain), indent=2, sort_keys=True) + "\n"
