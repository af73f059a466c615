"""Where a week's promotion decision lives in Dagster: the `promotion_gate` materialization.

The promotion asset records its `PromotionDecision` as JSON metadata; everything that needs the
decision later (the next week's failure-mode comparison, `retrain approve`, `retrain run`, the
demo) reads it back from the instance's event log, so there is one record of it, not a side file.
"""

from __future__ import annotations

from datetime import date, timedelta

import dagster as dg

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


def latest_decision(instance: dg.DagsterInstance, week: str) -> PromotionDecision | None:
    """The most recent promotion decision recorded for `week`, or None when the week has none."""
    result = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=PROMOTION_ASSET, asset_partitions=[week]), limit=1
    )
    if not result.records:
        return None
    record = result.records[0]
    return decision_from_metadata(record.asset_materialization.metadata, week, record.run_id)


def run_decision(result: dg.ExecuteInProcessResult, week: str) -> PromotionDecision | None:
    """The decision a finished in-process run recorded, or None when it did not reach the gate."""
    for event in result.get_asset_materialization_events():
        if event.asset_key == PROMOTION_ASSET:
            return decision_from_metadata(event.materialization.metadata, week, result.run_id)
    return None


def previous_week(week: str) -> str:
    """The weekly partition before `week` (keys are the Mondays, YYYY-MM-DD)."""
    return (date.fromisoformat(week) - timedelta(days=7)).isoformat()
