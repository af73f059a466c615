"""The weekly job over every asset, and its schedule (Mondays 03:00 UTC, the week that just ended)."""

from __future__ import annotations

import dagster as dg

from assets.partitions import weekly_partitions
from orchestration.run_config import scheduled_run_config
from orchestration.switches import SCHEDULE_SWITCH, switched_on

# One retrain at a time: every run of this job carries this tag, and the instance's run queue
# (dagster.yaml written by orchestration.instance) limits the tag to one run in progress.
RETRAIN_TAG = {"agent-retrain/pipeline": "weekly"}


def build_weekly_retrain(run_config: dict | None = None) -> dg.UnresolvedAssetJobDefinition:
    """The weekly job; `run_config` (a preset) becomes its default run config."""
    return dg.define_asset_job(
        "weekly_retrain",
        selection=dg.AssetSelection.all(),
        partitions_def=weekly_partitions,
        tags=RETRAIN_TAG,
        config=run_config,
        description="Ingest, window, validate, split, train, evaluate, gate and register one week.",
    )


weekly_retrain = build_weekly_retrain(scheduled_run_config())

weekly_retrain_schedule = dg.build_schedule_from_partitioned_job(
    weekly_retrain,
    name="weekly_retrain_schedule",
    hour_of_day=3,
    minute_of_hour=0,
    day_of_week=1,
    default_status=dg.DefaultScheduleStatus.RUNNING
    if switched_on(SCHEDULE_SWITCH)
    else dg.DefaultScheduleStatus.STOPPED,
)  # the partitions are in UTC, so is the schedule
