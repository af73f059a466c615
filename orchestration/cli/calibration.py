"""`retrain calibration list` and `retrain calibration refresh`: the calibration versions by hand.

The weekly run freezes a new version by itself when enough eligible interactions have accrued
(`evaluation.calibration_versions`); these commands show the versions and the weeks pinned to
each, and freeze a new one at once (after a batch of traffic with gold landed, say). Both read the
home's DuckDB store with the default customer split, for one domain (`--domain`, default retail:
each domain has its own versions). A version is drawn from the eligible pool by a
stable hash of the interaction id: labels never choose it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.store import StoreLockedError, open_store
from evaluation.calibration_versions import (
    DEFAULT_CALIBRATION_SIZE,
    DEFAULT_REFRESH_AFTER,
    calibration_draw,
    eligible_pool,
    outside,
    refresh_calibration,
    version_listing,
)
from evaluation.eval_sets import EvalSetError, current_calibration_set
from orchestration import environment
from orchestration.cli.errors import CliError
from orchestration.cli.options import domain_option


def list_versions(domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """`domain`'s every version (rows, digest, created_at, pinned weeks), the current one, and the pool."""
    home = environment.home().ensure()
    try:
        # Read-write: a store from before the `calibration_week` table gets it here (DuckDB refuses
        # even CREATE TABLE IF NOT EXISTS on a read-only connection).
        with open_store(home.duckdb_path) as con:
            versions = version_listing(con, domain)
            current = current_calibration_set(con, domain)
            pool = eligible_pool(con, domain=domain)
    except StoreLockedError as err:
        raise CliError(str(err), code=1) from err
    drawn = calibration_draw(pool)
    return {
        "versions": versions,
        "current": None if current is None else current.version,
        "eligible": len(pool),
        "drawn": len(drawn),
        "outside_current": outside(current, drawn),
        "weekly_refresh_after": DEFAULT_REFRESH_AFTER,
        "size": DEFAULT_CALIBRATION_SIZE,
    }


def refresh_versions(domain: str = DEFAULT_DOMAIN) -> dict[str, Any]:
    """Freeze a new version of `domain`'s from the pool's draw when any drawn interaction is outside
    the current one."""
    home = environment.home().ensure()
    try:
        with open_store(home.duckdb_path) as con:
            done = refresh_calibration(con, domain=domain)
    except StoreLockedError as err:
        raise CliError(str(err), code=1) from err
    except EvalSetError as err:
        raise CliError(f"nothing to freeze: {err.detail}", code=1) from err
    version = done.version
    return {
        "frozen": done.frozen_now,
        "version": version.version,
        "rows": version.rows,
        "digest": version.set_hash,
        "created_at": version.created_at.isoformat(),
        "new_eligible": done.new_eligible,
    }


def _cmd_list(args: argparse.Namespace) -> int:
    listing = list_versions(args.domain)
    if args.json:
        print(json.dumps(listing, indent=2))
        return 0
    if not listing["versions"]:
        print(
            f"no calibration version yet; {listing['eligible']} eligible interactions (the next weekly run freezes v1)"
        )
        return 0
    print(f"{'version':10s} {'rows':>6s}  {'digest':16s}  {'created_at':25s}  weeks")
    for v in listing["versions"]:
        mark = " *" if v["version"] == listing["current"] else ""
        weeks = ", ".join(v["weeks"]) or "-"
        print(f"{v['version'] + mark:10s} {v['rows']:6d}  {v['digest'][:16]:16s}  {v['created_at'][:25]:25s}  {weeks}")
    print(
        f"* current. {listing['eligible']} eligible interactions, {listing['drawn']} drawn (at most "
        f"{listing['size']}, by a stable hash of the id), {listing['outside_current']} of them outside "
        f"{listing['current']} (a weekly run freezes a new version at {listing['weekly_refresh_after']} by "
        "default; retrain calibration refresh freezes one now)"
    )
    return 0


def _cmd_refresh(args: argparse.Namespace) -> int:
    done = refresh_versions(args.domain)
    if args.json:
        print(json.dumps(done, indent=2))
    elif done["frozen"]:
        print(
            f"froze calibration {done['version']}: {done['rows']} rows, digest {done['digest'][:16]}, "
            f"{done['new_eligible']} of them new; weeks not yet run use it, pinned weeks keep their version"
        )
    else:
        print(f"calibration {done['version']} is current: no drawn interaction outside it, nothing frozen")
    return 0


def add_calibration_parser(sub: Any) -> None:
    """Register `calibration list` and `calibration refresh` on the `retrain` subparsers."""
    calibration = sub.add_parser("calibration", help="the frozen calibration versions: list them, freeze a new one")
    commands = calibration.add_subparsers(dest="calibration_command", required=True)
    p = commands.add_parser(
        "list",
        help="every calibration version: rows, digest, created_at and the weeks pinned to it",
        description=(
            "Each version with its rows, digest (the set hash the week's MLflow run logs as its dataset "
            "digest), when it was frozen and the weeks evaluated on it; then how many eligible interactions "
            "(calibration customer, gold, replayable) the store holds, how many the draw takes (at most "
            f"{DEFAULT_CALIBRATION_SIZE}, by a stable hash of the interaction id, never by labels) and how many "
            "of those are outside the current version."
        ),
    )
    p.add_argument("--json", action="store_true", help="print the listing as JSON")
    domain_option(p)
    p.set_defaults(func=_cmd_list)
    p = commands.add_parser(
        "refresh",
        help="freeze a new calibration version now from the eligible pool's draw",
        description=(
            "Draws from the eligible interactions by a stable hash of the interaction id (labels play no part) "
            "and freezes a new version when at least one drawn interaction is outside the current version "
            "(otherwise nothing changes). A version is never rewritten; weeks already run stay pinned "
            "to the version they used, weeks not yet run use the new one."
        ),
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    domain_option(p)
    p.set_defaults(func=_cmd_refresh)
