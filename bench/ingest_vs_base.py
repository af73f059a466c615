"""Ingest throughput against an earlier commit, measured in the same run: `bench/window.py`'s (a).

    python bench/ingest_vs_base.py                    # against c10b1a0, 1,000,000 rows, 2 pairs
    python bench/ingest_vs_base.py --base REF --rows 200000 --pairs 3

`c10b1a0` is the code before the pydantic record contract and the PII upgrade, whose 13,042 rows
per CPU-second on the 10M log was the data plane's ingest figure (bench/results/data.md). The base
commit's tree is exported with `git archive` into a scratch folder; the log is built once by this
tree's generator; then each pair runs `bench/window.py` of both trees, one after the other, each
on a fresh store over hard links to the same files, with one OpenMP thread, in the same Python
environment. The order alternates between pairs (base first, then this tree first) so a machine
that speeds up or slows down through the run favours neither. Prints every run's rows per
CPU-second (the figure contention moves least), each pair's ratio and the ratio of the means
(this tree / base); the last line is JSON. Needs git and the base commit in this clone's history.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from window import build_log  # noqa: E402  (this tree's generator: both trees ingest the same files)

DEFAULT_BASE = "c10b1a0"


def export_tree(ref: str, into: Path) -> Path:
    """The tree of commit `ref`, written under `into`; exits with git's own message for a ref it cannot read."""
    done = subprocess.run(["git", "-C", str(ROOT), "archive", ref], capture_output=True)
    if done.returncode != 0:
        raise SystemExit(f"cannot export the base tree {ref!r}: {done.stderr.decode(errors='replace').strip()}")
    archive = done.stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into


def ingest_rate(tree: Path, landing: Path, rows: int, work: Path) -> float:
    """Rows per CPU-second of `tree`'s bench/window.py (a) on a fresh store over `landing`."""
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(landing, work / "landing", copy_function=os.link)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(tree)}
    done = subprocess.run(
        [sys.executable, str(tree / "bench" / "window.py"), "--rows", str(rows), "--workdir", str(work)],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
    )
    shutil.rmtree(work, ignore_errors=True)
    if done.returncode != 0:
        raise SystemExit(f"{tree / 'bench' / 'window.py'} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    last = [line for line in done.stdout.splitlines() if line.startswith("{")][-1]
    return float(json.loads(last)["ingest_rows_per_cpu_s"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"the commit to measure against (default {DEFAULT_BASE})")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder, removed after")
    args = parser.parse_args()
    if args.pairs < 1 or args.rows < 2:
        parser.error("--pairs must be at least 1 and --rows at least 2")
    scratch = Path(args.workdir or tempfile.mkdtemp(prefix="bench-ingest-vs-base-"))
    try:
        base = export_tree(args.base, scratch / "base")
        landing = scratch / "log" / "landing"
        build_log(landing, args.rows)
        trees = {"base": base, "this": ROOT}
        rates: dict[str, list[float]] = {"base": [], "this": []}
        for pair in range(args.pairs):
            order = ("base", "this") if pair % 2 == 0 else ("this", "base")
            for name in order:
                rate = ingest_rate(trees[name], landing, args.rows, scratch / "run")
                rates[name].append(rate)
                load = "/".join(f"{x:.1f}" for x in os.getloadavg())
                print(
                    f"[{time.strftime('%H:%M:%S')} load {load}] pair {pair + 1} {name}: {rate:,.0f} rows per CPU-second",
                    flush=True,
                )
            print(f"pair {pair + 1}: this / base = {rates['this'][-1] / rates['base'][-1]:.3f}", flush=True)
        mean = {name: statistics.mean(values) for name, values in rates.items()}
        ratios = [t / b for t, b in zip(rates["this"], rates["base"])]
        print(
            f"means: this {mean['this']:,.0f}, base ({args.base}) {mean['base']:,.0f} rows per CPU-second: "
            f"{mean['this'] / mean['base']:.3f}x (pairs {min(ratios):.3f}-{max(ratios):.3f})"
        )
        print(
            json.dumps(
                {
                    "base": args.base,
                    "rows": args.rows,
                    "this_rows_per_cpu_s": [round(r) for r in rates["this"]],
                    "base_rows_per_cpu_s": [round(r) for r in rates["base"]],
                    "ratio_of_means": round(mean["this"] / mean["base"], 4),
                }
            )
        )
    finally:
        if args.workdir is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
