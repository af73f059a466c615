"""Reading a week's window and splits back from DuckDB (shared by the asset modules).

Splits are not stored: they are a pure function of `customer_id` (dataplane.splits), so every
asset recomputes the same split from the stored window instead of trusting a copy.
"""

from pathlib import Path

from assets.handoffs import WindowSplits
from assets.resources import DuckDBStore
from dataplane.home import Home
from dataplane.splits import split_window
from dataplane.window import window_records
from domains.registry import load_domain
from training.sandbox.prompting import domain_of


def week_dir(home: Home, partition_key: str) -> Path:
    """The week's folder (`Home.week_dir`), created for an asset to write into."""
    path = home.week_dir(partition_key)
    path.mkdir(parents=True, exist_ok=True)
    return path


def split_records(home: Home, store: DuckDBStore, window_splits: WindowSplits) -> dict[str, list[dict]]:
    with store.connect(home, read_only=True) as con:
        records = window_records(con, window_splits.week)
    return split_window(records, window_splits.fractions)


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
