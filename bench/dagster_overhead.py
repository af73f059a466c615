"""Dagster's own share of a weekly run: wall time outside the asset bodies.

Reads finished `weekly_retrain` runs from a home's Dagster instance (default: the demo's, under
`.retrain/`) and, per run, compares the run's wall time (RUN_START to RUN_SUCCESS/FAILURE) with
the time spent inside asset bodies (each step's STEP_START to its last STEP_OUTPUT / asset
materialization). The difference (planning, IO manager pickling, event-log writes, resource
setup, step process overhead) is the orchestration overhead, printed as a share of the run.

    .venv/bin/python bench/dagster_overhead.py [--home .retrain]
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

BODY_END = {"STEP_OUTPUT", "ASSET_MATERIALIZATION", "ASSET_CHECK_EVALUATION"}


def overhead(instance, run_id: str) -> dict:
    starts, ends = {}, defaultdict(float)
    run_start = run_end = None
    for record in instance.all_logs(run_id):
        event = record.dagster_event
        if event is None:
            continue
        kind, t = event.event_type_value, record.timestamp
        if kind == "PIPELINE_START":
            run_start = t
        elif kind in ("PIPELINE_SUCCESS", "PIPELINE_FAILURE"):
            run_end = t
        elif kind == "STEP_START":
            starts[record.step_key] = t
        elif kind in BODY_END and record.step_key:
            ends[record.step_key] = max(ends[record.step_key], t)
    if run_start is None or run_end is None:
        raise ValueError(f"run {run_id} has not finished")
    body = sum(ends[step] - start for step, start in starts.items() if step in ends)
    wall = run_end - run_start
    return {
        "run_id": run_id,
        "wall_s": wall,
        "asset_bodies_s": body,
        "overhead_s": wall - body,
        "overhead_share": (wall - body) / wall if wall else 0.0,
    }


def main() -> int:
    import dagster as dg

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", default=".retrain")
    args = parser.parse_args()
    with dg.DagsterInstance.from_config(str(Path(args.home).resolve() / "dagster")) as instance:
        runs = [r for r in instance.get_runs() if r.job_name == "weekly_retrain" and r.is_finished]
        if not runs:
            print("no finished weekly_retrain run in this home: run `make demo` first")
            return 1
        for run in reversed(runs):
            o = overhead(instance, run.run_id)
            print(
                f"week {run.tags.get('dagster/partition')} run {run.run_id[:8]}: wall {o['wall_s']:.1f} s, "
                f"asset bodies {o['asset_bodies_s']:.1f} s, overhead {o['overhead_s']:.1f} s "
                f"= {100 * o['overhead_share']:.1f}% of the run"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
