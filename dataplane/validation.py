"""The Great Expectations 1.x gate over a window DataFrame (see `window.records_frame`).

A file-backed GX context lives under `home.gx_root`, so every run leaves its results JSON and Data
Docs HTML there. Each expectation carries `meta["name"]`, the stable name the Dagster checks
report. The escalation rule (the outcome reward pays "escalated +2 if necessary else -1") reads
`escalation_was_necessary` only for escalated outcomes, so a flag on any other outcome is
inconsistent data: the flag must be null unless the outcome is `escalated`.
The PII rule counts with the window's domain's scanner (`pii_records.domain_scanner`), the very
detector ingestion masks with, on normalised text and keeping the domain's world keys (a plain
regex could not apply the Luhn or IBAN checks), so results never echo the PII itself, over the frame's `text`:
every place of the whole stored record (`window.records_frame`), not only the fields the
scrubber cleans, so a record that reached the store any other way is caught too. A window is one
domain's, and its intents are checked against that domain's set.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from dataplane.contract import OUTCOMES, RFC3339_RE
from dataplane.domain_rules import DEFAULT_DOMAIN, domain_rules
from dataplane.home import Home
from dataplane.pii_records import domain_scanner
from dataplane.window import WindowSettings

if TYPE_CHECKING:
    import great_expectations as gx

SUITE_NAME = "interaction_window"
ESCALATION_PAIRS = [
    ("completed", "null"),
    ("failed", "null"),
    ("escalated", "null"),
    ("escalated", "true"),
    ("escalated", "false"),
]
SAMPLE_IDS = 5


@dataclass
class ValidationReport:
    success: bool
    results: list[dict[str, Any]]
    results_path: str | None = None
    docs_path: str | None = None
    failed: list[str] = field(default_factory=list)

    def result(self, name: str) -> dict[str, Any]:
        return next(r for r in self.results if r["expectation"] == name)

    def to_dict(self) -> dict:
        return asdict(self)


def _gx():
    """Great Expectations, imported on first use.

    Importing it takes about 7 s; a module-level import would make every Dagster code-location
    load and every CLI call pay that, though only the window validation uses it.
    """
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "false")
    import great_expectations as gx  # heavy third-party import, deferred (see above)

    return gx


def build_suite(min_gold_share: float, min_rows: int, intents: frozenset[str] | None = None) -> gx.ExpectationSuite:
    """The window suite; every expectation named through `meta["name"]`. `intents`: the window's
    domain's (default: the default domain's)."""
    intents = domain_rules(DEFAULT_DOMAIN).intents if intents is None else intents
    gx = _gx()
    gxe = gx.expectations
    rfc3339 = "^" + RFC3339_RE.pattern + "$"
    named = [
        ("min_rows", gxe.ExpectTableRowCountToBeBetween(min_value=min_rows)),
        ("interaction_id_not_null", gxe.ExpectColumnValuesToNotBeNull(column="interaction_id")),
        ("interaction_id_unique", gxe.ExpectColumnValuesToBeUnique(column="interaction_id")),
        ("started_at_rfc3339", gxe.ExpectColumnValuesToMatchRegex(column="started_at_text", regex=rfc3339)),
        ("ended_at_rfc3339", gxe.ExpectColumnValuesToMatchRegex(column="ended_at_text", regex=rfc3339)),
        ("started_at_parseable", gxe.ExpectColumnValuesToNotBeNull(column="started_at")),
        ("ended_at_parseable", gxe.ExpectColumnValuesToNotBeNull(column="ended_at")),
        (
            "started_not_after_ended",
            gxe.ExpectColumnPairValuesAToBeGreaterThanB(column_A="ended_at", column_B="started_at", or_equal=True),
        ),
        ("outcome_in_set", gxe.ExpectColumnValuesToBeInSet(column="outcome", value_set=sorted(OUTCOMES))),
        ("intent_in_set", gxe.ExpectColumnValuesToBeInSet(column="intent", value_set=sorted(intents))),
        (
            "sentiment_in_range",
            gxe.ExpectColumnValuesToBeBetween(column="customer_sentiment_delta", min_value=-1.0, max_value=1.0),
        ),
        ("actions_non_negative", gxe.ExpectColumnValuesToBeBetween(column="actions_taken", min_value=0)),
        (
            "escalation_consistent_with_outcome",
            gxe.ExpectColumnPairValuesToBeInSet(
                column_A="outcome", column_B="escalation_flag", value_pairs_set=ESCALATION_PAIRS
            ),
        ),
        ("min_gold_share", gxe.ExpectColumnMeanToBeBetween(column="has_gold", min_value=min_gold_share)),
        ("no_pii", gxe.ExpectColumnValuesToBeBetween(column="pii_matches", min_value=0, max_value=0)),
    ]
    suite = gx.ExpectationSuite(name=SUITE_NAME)
    for name, expectation in named:
        expectation.meta = {"name": name}
        suite.add_expectation(expectation)
    return suite


def _context(home: Home):
    gx = _gx()
    home.gx_root.mkdir(parents=True, exist_ok=True)
    context = gx.get_context(mode="file", project_root_dir=str(home.gx_root))
    context.variables.progress_bars = {"globally": False}
    return context


def _batch_definition(context):
    source = context.data_sources.add_or_update_pandas("window")
    try:
        asset = source.get_asset("frame")
    except LookupError:
        asset = source.add_dataframe_asset("frame")
    try:
        return asset.get_batch_definition("whole_frame")
    except KeyError:
        return asset.add_batch_definition_whole_dataframe("whole_frame")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def _summarise(result) -> dict[str, Any]:
    body = result.result or {}
    samples = []
    for entry in body.get("partial_unexpected_index_list") or []:
        rid = entry.get("interaction_id") if isinstance(entry, dict) else None
        if isinstance(rid, str) and rid not in samples:
            samples.append(rid)
    observed = body.get("observed_value", body.get("unexpected_percent"))
    return {
        "expectation": result.expectation_config.meta["name"],
        "success": bool(result.success),
        "observed": _jsonable(observed),
        "unexpected_count": int(body.get("unexpected_count") or 0),
        "sample_ids": samples[:SAMPLE_IDS],
    }


def validate_window(
    frame: pd.DataFrame,
    home: Home,
    min_gold_share: float = WindowSettings.min_gold_share,
    min_rows: int = 1,  # a bare suite checks content, not volume: the weekly run passes WindowSettings'
    name: str = "window",
    domain: str = DEFAULT_DOMAIN,
) -> ValidationReport:
    """Run the suite on `frame`, a window of `domain`; save results JSON and rebuild Data Docs
    under `home.gx_root`.

    `name` (e.g. the week id) names the saved results file `results/<name>.json`.
    """
    intents = domain_rules(domain).intents  # an unknown domain raises ContractError before any work
    if re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name) is None:
        raise ValueError(f"validation name {name!r} must be 1-64 of [A-Za-z0-9_.-]")
    gx = _gx()
    data = frame.drop(columns=["text"]).copy()
    scanner = domain_scanner(domain)
    data["pii_matches"] = [len(scanner.find(text)) for text in frame["text"]]
    context = _context(home)
    suite = context.suites.add_or_update(build_suite(min_gold_share, min_rows, intents))
    definition = context.validation_definitions.add_or_update(
        gx.ValidationDefinition(name=f"{SUITE_NAME}_validation", data=_batch_definition(context), suite=suite)
    )
    checkpoint = context.checkpoints.add_or_update(
        gx.Checkpoint(
            name=f"{SUITE_NAME}_checkpoint",
            validation_definitions=[definition],
            actions=[gx.checkpoint.UpdateDataDocsAction(name="data_docs")],
            result_format={
                "result_format": "COMPLETE",
                "unexpected_index_column_names": ["interaction_id"],
                "partial_unexpected_count": SAMPLE_IDS,
            },
        )
    )
    run = checkpoint.run(batch_parameters={"dataframe": data})
    outcome = next(iter(run.run_results.values()))
    order = {n: i for i, n in enumerate(e.meta["name"] for e in suite.expectations)}
    results = sorted((_summarise(r) for r in outcome.results), key=lambda r: order[r["expectation"]])
    report = ValidationReport(
        success=bool(outcome.success), results=results, failed=[r["expectation"] for r in results if not r["success"]]
    )
    target = home.gx_root / "results" / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    report.results_path = str(target)
    sites = context.get_docs_sites_urls()
    report.docs_path = sites[0]["site_url"] if sites else None
    target.write_text(json.dumps({"report": report.to_dict(), "gx": outcome.to_json_dict()}, indent=1, default=str))
    return report


def docs_index(home: Home) -> Path:
    """Where the Data Docs index page lives for this home."""
    return home.gx_root / "gx" / "uncommitted" / "data_docs" / "local_site" / "index.html"
