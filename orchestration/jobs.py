"""The jobs and their schedules: the weekly retrain (Mondays 03:00 UTC, the week that just ended)
and the live watch (00:30 UTC, the day that just ended)."""

from __future__ import annotations

import dagster as dg

from assets.partitions import daily_partitions, weekly_partitions
from orchestration.run_config import scheduled_run_config
from orchestration.switches import LIVE_WATCH_SWITCH, SCHEDULE_SWITCH, switched_on

# One retrain at a time: every run of this job carries this tag, and the instance's run queue
# (dagster.yaml written by orchestration.instance) limits the tag to one run in progress.
PIPELINE_TAG = "agent-retrain/pipeline"
RETRAIN_TAG = {PIPELINE_TAG: "weekly"}
# The daily live watch is its own job over its own (daily) partitions; the week never runs it.
WATCH_GROUP = "watch"


def build_weekly_retrain(run_config: dict | None = None) -> dg.UnresolvedAssetJobDefinition:
    """The weekly job; `run_config` (a preset) becomes its default run config."""
    return dg.define_asset_job(
        "weekly_retrain",
        selection=dg.AssetSelection.all() - dg.AssetSelection.groups(WATCH_GROUP),
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


daily_watch = dg.define_asset_job(
    "daily_watch",
    selection=dg.AssetSelection.groups(WATCH_GROUP),
    partitions_def=daily_partitions,
    tags={PIPELINE_TAG: "watch"},  # one at a time, by the same run queue
    description="Watch one day of the champion's served traffic: action drift, rewards, failure modes.",
)

# A backstop for the landing sensor, which asks for a day's watch only once a file of that day
# lands after the day is over: files landed during the day are watched here, after midnight.
daily_watch_schedule = dg.build_schedule_from_partitioned_job(
    daily_watch,
    name="daily_watch_schedule",
    hour_of_day=0,
    minute_of_hour=30,
    default_status=dg.DefaultScheduleStatus.RUNNING
    if switched_on(LIVE_WATCH_SWITCH)
    else dg.DefaultScheduleStatus.STOPPED,
)
