"""Benchmark: peak memory of ingesting one new file against how many files the store already holds.

    python bench/ingest_memory.py                       # stores of 10, 100, 1000 ingested files
    python bench/ingest_memory.py --sizes 10,100 --repeats 1

Ingestion must not grow with history: a file already ingested is skipped by a primary-key probe on
`ingested_files` and duplicates are found by a probe on `interactions`' primary key, so nothing
should load earlier files. This builds one store incrementally (small files of simulated traffic,
each with fresh interaction ids), snapshots it at each size, and then, for every snapshot, ingests
the same new file in a fresh Python process. There the high-water mark is reset after imports
(/proc/self/clear_refs), so "peak" is the peak RSS during the ingestion itself (VmHWM); the RSS
before it (imports plus an opened store) is reported too, and so the ingestion's own share.
Prints a table and the ratio of the largest store's figures to the smallest's (target ~1).
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
NOW = datetime(2030, 1, 1, tzinfo=UTC)  # after every simulated day: nothing is "future"

# Run in a fresh interpreter: RSS before, and the high-water mark of the ingestion alone.
_MEASURE = """
import json, resource, sys, time
from datetime import datetime
from pathlib import Path
from dataplane.ingest import ingest_paths
from dataplane.store import open_store

def status(key):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
    return int(line.split()[1])

open_store(sys.argv[1], read_only=True).close()  # DuckDB's own start-up is not the file's cost
# Reset the high-water mark so the peak below is the ingestion's, not the imports'.
Path("/proc/self/clear_refs").write_text("5")
base = status("VmRSS")
started = time.perf_counter()
summary = ingest_paths(sys.argv[1], [sys.argv[2]], now=datetime.fromisoformat(sys.argv[3]))
seconds = time.perf_counter() - started
peak = status("VmHWM")
print(json.dumps({"base_kib": base, "peak_kib": peak, "seconds": seconds, "accepted": summary.accepted,
                  "process_peak_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def template_records(n: int, seed: int) -> list[dict]:
    """`n` contract-valid records of simulated traffic (the product's own generator)."""
    from domains.retail.traffic.simulate import simulate

    with tempfile.TemporaryDirectory() as tmp:
        simulate(days=1, per_day=n, seed=seed, out_dir=tmp, start=date(2026, 1, 5), n_users=60)
        return [json.loads(line) for p in sorted(Path(tmp).rglob("*.jsonl")) for line in p.read_text().splitlines()]


def write_file(path: Path, records: list[dict], tag: str) -> Path:
    """The template records under fresh ids (`<tag>-<n>`), so every file adds new rows."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({**r, "interaction_id": f"{tag}-{n}"}) for n, r in enumerate(records)]
    path.write_text("\n".join(lines) + "\n")
    return path


def build_snapshots(work: Path, sizes: list[int], rows_per_file: int) -> dict[int, Path]:
    """One store grown file by file; a copy of it taken at each size in `sizes`."""
    from dataplane.ingest import ingest_file
    from dataplane.store import open_store

    records = template_records(rows_per_file, seed=1)
    db, snapshots, done = work / "grow.duckdb", {}, 0
    for size in sorted(sizes):
        started = time.perf_counter()
        con = open_store(db)  # one connection while growing: the same per-file transactions, faster
        try:
            for i in range(done, size):
                ingest_file(con, write_file(work / "old" / f"f{i:05d}.jsonl", records, f"old{i}").resolve(), NOW)
            con.execute("CHECKPOINT")
        finally:
            con.close()
        done = size
        snapshots[size] = work / f"store-{size}.duckdb"
        shutil.copy(db, snapshots[size])
        print(f"  store with {size} files built ({time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return snapshots


def measure(snapshot: Path, new_file: Path, work: Path) -> dict:
    db = work / "measure.duckdb"
    shutil.copy(snapshot, db)
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(db), str(new_file), NOW.isoformat()],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    db.unlink()
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,1000", help="files already ingested, comma-separated")
    parser.add_argument("--rows-per-file", type=int, default=10, help="rows of each already-ingested file")
    parser.add_argument("--new-file-rows", type=int, default=500, help="rows of the one new file measured")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per size (median reported)")
    args = parser.parse_args()
    sizes = sorted({int(s) for s in args.sizes.split(",")})

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        snapshots = build_snapshots(work, sizes, args.rows_per_file)
        new_file = write_file(work / "new" / "new.jsonl", template_records(args.new_file_rows, seed=2), "new")
        rows = []
        for size in sizes:
            runs = [measure(snapshots[size], new_file, work) for _ in range(args.repeats)]
            assert all(r["accepted"] == args.new_file_rows for r in runs), runs
            rows.append(
                {
                    "files": size,
                    "stored_rows": size * args.rows_per_file,
                    "store_mib": snapshots[size].stat().st_size / 2**20,
                    "base_mib": statistics.median(r["base_kib"] for r in runs) / 1024,
                    "peak_mib": statistics.median(r["peak_kib"] for r in runs) / 1024,
                    "ingest_mib": statistics.median(r["peak_kib"] - r["base_kib"] for r in runs) / 1024,
                    "seconds": statistics.median(r["seconds"] for r in runs),
                }
            )

    print(
        f"# {platform.processor() or platform.machine()}, python {platform.python_version()}, "
        f"{datetime.now(UTC):%Y-%m-%d}; new file {args.new_file_rows} rows, "
        f"old files {args.rows_per_file} rows each, median of {args.repeats} fresh processes"
    )
    print(
        "| files already ingested | rows stored | store MiB | RSS before MiB | peak RSS MiB "
        "| peak - before MiB | ingest s |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['files']} | {r['stored_rows']} | {r['store_mib']:.1f} | {r['base_mib']:.1f} | "
            f"{r['peak_mib']:.1f} | {r['ingest_mib']:.1f} | {r['seconds']:.2f} |"
        )
    small, large = rows[0], rows[-1]
    print(
        f"\npeak RSS ratio {large['files']} vs {small['files']} files: {large['peak_mib'] / small['peak_mib']:.3f}; "
        f"ingestion's own share ratio: {large['ingest_mib'] / max(small['ingest_mib'], 1e-9):.3f}; "
        f"time ratio: {large['seconds'] / small['seconds']:.3f}"
    )


if __name__ == "__main__":
    main()
