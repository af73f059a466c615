"""The schedules launch one run per scheduled domain, each tagged with it, for the period that ended."""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg
import pytest

from assets.weekdata import DOMAIN_TAG
from orchestration.definitions import defs
from orchestration.jobs import (
    SCHEDULED_DOMAINS,
    ScheduledDomainsError,
    daily_watch_schedule,
    scheduled_domains,
    weekly_retrain_schedule,
)

MONDAY_0300 = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)


def _requests(schedule, when):
    context = dg.build_schedule_context(scheduled_execution_time=when, repository_def=defs.get_repository_def())
    return list(schedule.evaluate_tick(context).run_requests or [])


def test_unset_means_the_default_domain_alone(monkeypatch):
    monkeypatch.delenv(SCHEDULED_DOMAINS, raising=False)
    assert scheduled_domains() == ("retail",)
    [request] = _requests(weekly_retrain_schedule, MONDAY_0300)
    assert request.partition_key == "2026-11-16"  # the week that just ended, not the one starting
    assert request.tags[DOMAIN_TAG] == "retail"


def test_each_listed_domain_gets_its_own_tagged_run(monkeypatch):
    monkeypatch.setenv(SCHEDULED_DOMAINS, "retail, airline,retail")
    weekly = _requests(weekly_retrain_schedule, MONDAY_0300)
    assert [(r.partition_key, r.tags[DOMAIN_TAG]) for r in weekly] == [
        ("2026-11-16", "retail"),
        ("2026-11-16", "airline"),
    ]
    assert len({r.run_key for r in weekly}) == 2  # the domains' runs never dedupe each other
    daily = _requests(daily_watch_schedule, datetime(2026, 11, 23, 0, 30, tzinfo=UTC))
    assert [(r.partition_key, r.tags[DOMAIN_TAG]) for r in daily] == [
        ("2026-11-22", "retail"),
        ("2026-11-22", "airline"),
    ]


def test_an_unknown_domain_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(SCHEDULED_DOMAINS, "retail,telecom")
    with pytest.raises(ScheduledDomainsError, match="telecom.*installed: .*airline"):
        scheduled_domains()
