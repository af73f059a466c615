"""The Dagster definitions: assembly only (assets, checks, job, schedule, sensors, resources)."""
from __future__ import annotations

import dagster as dg

from assets import data
from orchestration.jobs import weekly_retrain, weekly_retrain_schedule
from orchestration.resources import default_resources

defs = dg.Definitions(
    assets=dg.load_assets_from_modules([data]),
    asset_checks=dg.load_asset_checks_from_modules([data]),
    jobs=[weekly_retrain],
    schedules=[weekly_retrain_schedule],
    resources=default_resources(),
)
