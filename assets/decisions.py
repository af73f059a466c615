"""Where a week's promotion decision lives in Dagster: the `promotion_gate` materialization.

The promotion asset records its `PromotionDecision` as JSON metadata; everything that needs the
decision later (the next week's failure-mode comparison, `retrain approve`, `retrain run`, the
demo) reads it back from the instance's event log, so there is one record of it, not a side file.
"""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg

from domains.registry import DEFAULT_DOMAIN
from evaluation.decision import PromotionDecision

PROMOTION_ASSET = dg.AssetKey("promotion_gate")
DECISION_METADATA = "promotion"


class DecisionRecordError(ValueError):
    """A promotion_gate materialization without a readable decision; names the week and run."""


def decision_metadata(decision: PromotionDecision) -> dict[str, dg.MetadataValue]:
    return {DECISION_METADATA: dg.MetadataValue.json(decision.to_dict())}


def decision_from_metadata(metadata: dict, week: str, run_id: str | None = None) -> PromotionDecision:
    entry = metadata.get(DECISION_METADATA)
    if entry is None:
        raise DecisionRecordError(
            f"promotion_gate for week {week} (run {run_id}) carries no {DECISION_METADATA!r} metadata"
        )
    return PromotionDecision.from_dict(entry.value)


# Decisions of one week of every domain share the asset's partition; how far back to look for the
# newest of one domain (a week is re-run a handful of times at most).
_DECISIONS_SCANNED = 50


def decision_domain(metadata: dict) -> str:
    """The domain a promotion_gate materialisation decided for (before domains: the default)."""
    entry = metadata.get("domain")
    return str(entry.value) if entry is not None else DEFAULT_DOMAIN


def latest_decision(instance: dg.DagsterInstance, week: str, domain: str = DEFAULT_DOMAIN) -> PromotionDecision | None:
    """The most recent promotion decision recorded for `week` of `domain`, or None when it has none."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=PROMOTION_ASSET, asset_partitions=[week]), limit=_DECISIONS_SCANNED
    )
    for record in result.records:
        metadata = record.asset_materialization.metadata
        if decision_domain(metadata) == domain:
            return decision_from_metadata(metadata, week, record.run_id)
    return None


def run_decision(result: dg.ExecuteInProcessResult, week: str) -> PromotionDecision | None:
    """The decision a finished in-process run recorded, or None when it did not reach the gate."""
    for event in result.get_asset_materialization_events():
        if event.asset_key == PROMOTION_ASSET:
            return decision_from_metadata(event.materialization.metadata, week, result.run_id)
    return None


def previous_week(week: str) -> str:
    """The weekly partition before `week` (keys are the Mondays, YYYY-MM-DD)."""
    return (date.fromisoformat(week) - timedelta(days=7)).isoformat()
