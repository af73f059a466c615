"""Data assets: the interaction log in DuckDB, the weekly window, its validation, its splits."""
# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.

from datetime import UTC, datetime, timedelta

import dagster as dg

from assets.configs import config_from_dataclass, dataclass_kwargs
from assets.handoffs import IngestedInteractions, RecentIngests, ValidatedWindow, WindowSplits
from assets.partitions import week_end, weekly_partitions
from assets.resources import DuckDBStore, HomeResource
from assets.retries import CONTENTION_RETRY
from assets.weekdata import run_domain
from dataplane.ingest import ingest_paths
from dataplane.landing import ingested_since
from dataplane.splits import SplitSettings, customers_in_several_splits, split_counts, split_window
from dataplane.validation import validate_window
from dataplane.window import WindowSettings, cut_window, window_frame, window_records
from domains.registry import DEFAULT_DOMAIN

# The landing sensor ingests files as they land, so by Monday this run may find nothing new: the
# window's quarantine rate is taken over every ingest of the past week, not this run's alone.
RECENT_INGESTS = timedelta(days=7)


class IngestConfig(dg.Config):
    """Extra paths to ingest besides the landing folder (files or folders)."""

    paths: list[str] = []


# Declared once, on the data plane's settings dataclasses (whose defaults the CLI and the demo cut
# and split with too); the Dagster configs are built from their fields, defaults and help texts.
WindowConfig = config_from_dataclass(WindowSettings, "WindowConfig", module=__name__)
SplitConfig = config_from_dataclass(SplitSettings, "SplitConfig", module=__name__)


@dg.asset(
    group_name="data",
    kinds={"duckdb"},
    partitions_def=weekly_partitions,
    retry_policy=CONTENTION_RETRY,
    check_specs=[dg.AssetCheckSpec("no_row_lost", asset="raw_interactions", blocking=True)],
)
def raw_interactions(context: dg.AssetExecutionContext, config: IngestConfig, home: HomeResource, store: DuckDBStore):
    """Every interaction ever ingested (DuckDB `interactions`), rejects in `quarantine`."""
    h = home.home
    started = datetime.now(UTC)
    run = ingest_paths(store.resolved_path(h), [h.landing, *config.paths])
    lost = run.read - (run.accepted + run.duplicates + run.quarantined)
    yield dg.AssetCheckResult(
        check_name="no_row_lost",
        passed=lost == 0,
        metadata={
            "read": run.read,
            "accepted": run.accepted,
            "duplicates": run.duplicates,
            "quarantined": run.quarantined,
            "unaccounted": lost,
        },
    )
    with store.connect(h, read_only=True) as con:
        stored = con.execute("SELECT count(*) FROM interactions").fetchone()[0]
        recent = ingested_since(con, started - RECENT_INGESTS)
    yield dg.MaterializeResult(
        value=IngestedInteractions(run, int(stored), RecentIngests(**recent)),
        metadata={
            "files_ingested": run.files,
            "rows_read": run.read,
            "accepted": run.accepted,
            "duplicates": run.duplicates,
            "quarantined": run.quarantined,
            "quarantined_by_rule": dg.MetadataValue.json(run.quarantined_by_rule),
            "interactions_stored": stored,
            "ingested_past_week": dg.MetadataValue.json(recent),
            "store": dg.MetadataValue.path(store.resolved_path(h)),
        },
    )


WINDOW_CHECKS = ("window_gx_suite", "window_min_rows", "window_quarantine_rate", "window_no_pii")


@dg.asset(
    group_name="data",
    kinds={"duckdb", "great_expectations"},
    partitions_def=weekly_partitions,
    retry_policy=CONTENTION_RETRY,
    check_specs=[dg.AssetCheckSpec(name, asset="interaction_window", blocking=True) for name in WINDOW_CHECKS],
)
def interaction_window(
    context: dg.AssetExecutionContext,
    config: WindowConfig,
    raw_interactions: IngestedInteractions,
    home: HomeResource,
    store: DuckDBStore,
):
    """The last N interactions of the run's domain that ended before the week's end, validated by
    Great Expectations."""
    h, domain = home.home, run_domain(context)
    with store.connect(h) as con:
        info = cut_window(con, week_end(context.partition_key), size=config.size, domain=domain)
        frame = window_frame(con, info.week, domain)
    name = info.week if domain == DEFAULT_DOMAIN else f"{domain}-{info.week}"
    report = validate_window(
        frame, h, min_gold_share=config.min_gold_share, min_rows=config.min_rows, name=name, domain=domain
    )
    yield from _window_checks(report, info, raw_interactions, config)
    yield dg.MaterializeResult(
        value=ValidatedWindow(
            **info.to_dict(),
            validation_success=report.success,
            validation_path=str(report.results_path),
            failed_expectations=tuple(report.failed),
            domain=domain,
        ),
        metadata={
            "domain": domain,
            "rows": info.rows,
            "content_hash": info.content_hash,
            "iso_week": info.week,
            "ended_at_min": str(info.ended_at_min),
            "ended_at_max": str(info.ended_at_max),
            "outcome_mix": dg.MetadataValue.json(info.outcome_mix),
            "intent_mix": dg.MetadataValue.json(info.intent_mix),
            "validation_success": report.success,
            "data_docs": dg.MetadataValue.path(str(report.docs_path)),
        },
    )


def _window_checks(report, info, ingest: IngestedInteractions, config: WindowConfig):
    failed = [r for r in report.results if not r["success"]]
    yield dg.AssetCheckResult(
        check_name="window_gx_suite",
        passed=report.success,
        severity=dg.AssetCheckSeverity.ERROR,
        metadata={
            "expectations": len(report.results),
            "failed": len(failed),
            "failing_expectations": dg.MetadataValue.json(failed[:10]),
        },
    )
    yield dg.AssetCheckResult(
        check_name="window_min_rows",
        passed=info.rows >= config.min_rows,
        metadata={"rows": info.rows, "threshold": config.min_rows},
    )
    recent = ingest.recent  # every ingest of the past week, the landing sensor's included
    rate = recent.quarantine_rate
    yield dg.AssetCheckResult(
        check_name="window_quarantine_rate",
        passed=rate <= config.max_quarantine_rate,
        metadata={
            "quarantine_rate": rate,
            "threshold": config.max_quarantine_rate,
            "quarantined": recent.quarantined,
            "read": recent.read,
        },
    )
    pii = [r for r in report.results if r["expectation"] == "no_pii"]
    yield dg.AssetCheckResult(
        check_name="window_no_pii",
        passed=all(r["success"] for r in pii) and bool(pii),
        metadata={
            "found": sum(r.get("unexpected_count") or 0 for r in pii),
            "sample_ids": dg.MetadataValue.json([i for r in pii for i in r.get("sample_ids", [])][:5]),
        },
    )


@dg.asset(
    group_name="data",
    kinds={"duckdb"},
    partitions_def=weekly_partitions,
    check_specs=[dg.AssetCheckSpec("no_customer_in_two_splits", asset="window_splits", blocking=True)],
)
def window_splits(
    context: dg.AssetExecutionContext,
    config: SplitConfig,
    interaction_window: ValidatedWindow,
    home: HomeResource,
    store: DuckDBStore,
):
    """Train / calibration / shadow by a stable hash of customer_id; held-out customers never train."""
    fractions = SplitSettings(**dataclass_kwargs(config, SplitSettings)).fractions
    with store.connect(home.home, read_only=True) as con:
        domain = interaction_window.domain
        splits = split_window(window_records(con, interaction_window.week, domain), fractions, domain=domain)
    counts = split_counts(splits)
    overlap = customers_in_several_splits(splits)
    yield dg.AssetCheckResult(
        check_name="no_customer_in_two_splits",
        passed=not overlap,
        metadata={"customers_in_two_splits": len(overlap), "sample": dg.MetadataValue.json(sorted(overlap)[:5])},
    )
    yield dg.MaterializeResult(
        value=WindowSplits(
            week=interaction_window.week,
            counts=counts,
            fractions=fractions,
            window_hash=interaction_window.content_hash,
            domain=interaction_window.domain,
        ),
        metadata={**counts, "domain": interaction_window.domain},
    )
