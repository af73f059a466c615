"""The Dagster definitions: assembly only (assets, checks, job, schedule, sensors, resources)."""

import dagster as dg

from assets import data, evaluation, promotion, registration, training
from assets.resources import default_resources
from orchestration.jobs import weekly_retrain, weekly_retrain_schedule
from orchestration.progress import progress_logger
from orchestration.sensors import champion_health, retrain_failure_incident

_modules = [data, training, evaluation, promotion, registration]

defs = dg.Definitions(
    assets=dg.load_assets_from_modules(_modules),
    asset_checks=dg.load_asset_checks_from_modules(_modules),
    jobs=[weekly_retrain],
    schedules=[weekly_retrain_schedule],
    sensors=[retrain_failure_incident, champion_health],
    resources=default_resources(),
    loggers={"progress": progress_logger},
)
