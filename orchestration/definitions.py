"""The Dagster definitions: assembly only (assets, checks, jobs, schedules, sensors, resources)."""

import dagster as dg

from assets import data, evaluation, promotion, registration, training, watch
from orchestration.environment import default_resources
from orchestration.jobs import daily_watch, daily_watch_schedule, weekly_retrain, weekly_retrain_schedule
from orchestration.progress import progress_logger
from orchestration.sensors import champion_health, landing_ingest, retrain_failure_incident

_modules = [data, training, evaluation, promotion, registration, watch]


def build_definitions() -> dg.Definitions:
    """The definitions with resources configured by the environment as it is now.

    The code location builds them once, when it loads (`defs`). A process that runs a job itself
    (`retrain run`, the demo) builds them again at each run, so a home or tracking URI set after
    import (a test's fixture, a script that sets RETRAIN_HOME) is the one the run uses."""
    return dg.Definitions(
        assets=dg.load_assets_from_modules(_modules),
        asset_checks=dg.load_asset_checks_from_modules(_modules),
        jobs=[weekly_retrain, daily_watch],
        schedules=[weekly_retrain_schedule, daily_watch_schedule],
        sensors=[retrain_failure_incident, champion_health, landing_ingest],
        resources=default_resources(),
        loggers={"progress": progress_logger},
    )


defs = build_definitions()
