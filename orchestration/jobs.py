"""The jobs and their schedules: the weekly retrain (Mondays 03:00 UTC, the week that just ended)
and the live watch (00:30 UTC, the day that just ended)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

import dagster as dg

from assets.partitions import daily_partitions, week_key, weekly_partitions
from assets.weekdata import DOMAIN_TAG
from domains.registry import DEFAULT_DOMAIN, domain_names
from orchestration.environment import LIVE_WATCH_SWITCH, SCHEDULE_SWITCH, switched_on, value
from orchestration.run_config import scheduled_run_config

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

# Which domains the schedules retrain and watch, comma-separated (`retail,airline`); unset: the
# default domain alone, so a deployment that serves one agent runs exactly as before domains.
SCHEDULED_DOMAINS = "RETRAIN_DOMAINS"


class ScheduledDomainsError(ValueError):
    """RETRAIN_DOMAINS names a domain that is not installed."""


def scheduled_domains(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """The domains each scheduled tick launches a run for, checked against the installed ones."""
    raw = value(SCHEDULED_DOMAINS, environ) or ""
    names = tuple(dict.fromkeys(n.strip() for n in raw.split(",") if n.strip())) or (DEFAULT_DOMAIN,)
    installed = domain_names()
    unknown = [n for n in names if n not in installed]
    if unknown:
        raise ScheduledDomainsError(
            f"{SCHEDULED_DOMAINS}={raw!r} names {', '.join(unknown)}, not installed; installed: {', '.join(installed)}"
        )
    return names


def domain_run_requests(partition_key: str, salt: str = "") -> list[dg.RunRequest]:
    """One run of `partition_key` per scheduled domain, tagged with it (every asset reads the tag).
    The run key names the domain, so the domains' runs of one partition never dedupe each other."""
    return [
        dg.RunRequest(
            partition_key=partition_key,
            run_key=f"{partition_key}:{domain}{salt}",
            tags={DOMAIN_TAG: domain},
        )
        for domain in scheduled_domains()
    ]


def _ended(partitions: dg.TimeWindowPartitionsDefinition, key: str) -> str | None:
    """`key` when it is a partition (on or after RETRAIN_START_DATE), else None."""
    first = partitions.get_first_partition_key()
    return key if first is not None and key >= first else None


def week_that_ended(now: datetime) -> str | None:
    """The weekly partition of the week before the one `now` falls in (Monday keys, UTC)."""
    return _ended(weekly_partitions, week_key((now - timedelta(days=7)).date()))


def day_that_ended(now: datetime) -> str | None:
    return _ended(daily_partitions, (now - timedelta(days=1)).date().isoformat())


def _status(switch: str) -> dg.DefaultScheduleStatus:
    return dg.DefaultScheduleStatus.RUNNING if switched_on(switch) else dg.DefaultScheduleStatus.STOPPED


@dg.schedule(
    job=weekly_retrain,
    cron_schedule="0 3 * * 1",  # Mondays 03:00; the partitions are in UTC, so is the schedule
    execution_timezone="UTC",
    name="weekly_retrain_schedule",
    default_status=_status(SCHEDULE_SWITCH),
)
def weekly_retrain_schedule(context: dg.ScheduleEvaluationContext):
    """The week that just ended, once per scheduled domain."""
    week = week_that_ended(context.scheduled_execution_time)
    if week is None:
        return dg.SkipReason("no complete week yet (RETRAIN_START_DATE is in the future)")
    return domain_run_requests(week)


daily_watch = dg.define_asset_job(
    "daily_watch",
    selection=dg.AssetSelection.groups(WATCH_GROUP),
    partitions_def=daily_partitions,
    tags={PIPELINE_TAG: "watch"},  # one at a time, by the same run queue
    description="Watch one day of the champion's served traffic: action drift, rewards, failure modes.",
)


# A backstop for the landing sensor, which asks for a day's watch only once a file of that day
# lands after the day is over: files landed during the day are watched here, after midnight.
@dg.schedule(
    job=daily_watch,
    cron_schedule="30 0 * * *",
    execution_timezone="UTC",
    name="daily_watch_schedule",
    default_status=_status(LIVE_WATCH_SWITCH),
)
def daily_watch_schedule(context: dg.ScheduleEvaluationContext):
    """The day that just ended, once per scheduled domain."""
    day = day_that_ended(context.scheduled_execution_time)
    if day is None:
        return dg.SkipReason("no complete day yet (RETRAIN_START_DATE is in the future)")
    return domain_run_requests(day)
