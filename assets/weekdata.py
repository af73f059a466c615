"""Reading a week's window and splits back from DuckDB (shared by the asset modules).

Splits are not stored: they are a pure function of `customer_id` (dataplane.splits), so every
asset recomputes the same split from the stored window instead of trusting a copy.
"""

from pathlib import Path
from typing import Any

import dagster as dg

from assets.handoffs import WindowSplits
from assets.resources import DuckDBStore
from dataplane.home import Home
from dataplane.splits import split_window
from dataplane.window import window_records
from domains.registry import DEFAULT_DOMAIN, DomainNotFoundError, load_domain
from training.sandbox.prompting import domain_of

# The run tag naming the domain a weekly run retrains (`retrain run --domain D` sets it; the schedule's
# runs and a launchpad run without it retrain the default domain). Every asset of the run reads it.
DOMAIN_TAG = "agent-retrain/domain"


def run_domain(context: Any) -> str:
    """The domain this run retrains, from its tag; a Failure naming the installed ones if unknown."""
    name = context.run.tags.get(DOMAIN_TAG, DEFAULT_DOMAIN)
    try:
        load_domain(name)
    except DomainNotFoundError as err:
        raise dg.Failure(str(err), allow_retries=False) from err
    return name


def week_dir(home: Home, partition_key: str, domain: str = DEFAULT_DOMAIN) -> Path:
    """The week's folder (`Home.week_dir`; another domain's weeks under its own name), created for
    an asset to write into."""
    path = home.week_dir(partition_key if domain == DEFAULT_DOMAIN else f"{domain}/{partition_key}")
    path.mkdir(parents=True, exist_ok=True)
    return path


def split_records(home: Home, store: DuckDBStore, window_splits: WindowSplits) -> dict[str, list[dict]]:
    with store.connect(home, read_only=True) as con:
        records = window_records(con, window_splits.week, window_splits.domain)
    return split_window(records, window_splits.fractions, domain=window_splits.domain)


def train_records(home: Home, store: DuckDBStore, window_splits: WindowSplits) -> list[dict]:
    """Train-split records that carry gold: the only interactions that become training tasks."""
    return [r for r in split_records(home, store, window_splits)["train"] if r.get("gold")]


def at_level(records: list[dict], level: int) -> list[dict]:
    """The records as tasks of curriculum `level`: level 1 rewrites them (dropping ineligible ones),
    any other level takes them as recorded."""
    if level != 1:
        return records

    tasks = (load_domain(domain_of(r)).as_level1(r) for r in records)
    return [task for task in tasks if task is not None]
