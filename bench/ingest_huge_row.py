"""Benchmark: peak memory of ingesting a small zstd Parquet file one of whose rows inflates to ~200 MB.

    python bench/ingest_huge_row.py              # a 200 MB row
    python bench/ingest_huge_row.py --mib 50

The file holds three records; the middle one's `messages` JSON text is `--mib` MiB of one letter,
which zstd shrinks to almost nothing. Two layouts: the three rows in one row group (over
PARQUET_BATCH_BYTES uncompressed, so read through DuckDB: every row measured, the big one never
fetched) and the big row alone in its row group (refused on the file's metadata, never decoded).
Each is ingested by the real `ingest_paths` in a fresh Python process, whose peak RSS (VmHWM) is
reported with the RSS it had before ingesting (imports and an opened store). Target: the big row
quarantined (`line_too_long`), the two others stored, peak RSS under 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, date, datetime
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO_ROOT))
NOW = datetime(2030, 1, 1, tzinfo=UTC)
JSON_TEXT = ("initial_state", "user_scenario", "messages", "gold", "human_label")

# Run in a fresh interpreter: RSS before, and the high-water mark of the ingestion alone.
_MEASURE = """
import json, sys, time
from datetime import datetime
from pathlib import Path
from dataplane.ingest import ingest_paths
from dataplane.store import open_store

def status(key):
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith(key + ":"))
    return int(line.split()[1])

open_store(sys.argv[1]).close()
Path("/proc/self/clear_refs").write_text("5")  # reset VmHWM: the peak below is the ingestion's
base = status("VmRSS")
started = time.perf_counter()
summary = ingest_paths(sys.argv[1], [sys.argv[2]], now=datetime.fromisoformat(sys.argv[3]))
print(json.dumps({"base_kib": base, "peak_kib": status("VmHWM"), "seconds": time.perf_counter() - started,
                  "accepted": summary.accepted, "quarantined_by_rule": summary.quarantined_by_rule}))
"""

# Built in a fresh interpreter too: the row's text and its Arrow copy are freed with the process.
_BUILD = """
import json, sys
import pyarrow as pa, pyarrow.parquet as pq
records, mib, path, own = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4] == "own"
messages = json.loads(records[1]["messages"])
messages[-1]["content"] = "x" * (mib * 1024 * 1024)
records[1]["messages"] = json.dumps(messages)
table = pa.table({key: [r.get(key) for r in records] for key in records[0]})
with pq.ParquetWriter(path, table.schema, compression="zstd") as writer:
    for start, length in ([(0, 1), (1, 1), (2, 1)] if own else [(0, 3)]):
        writer.write_table(table.slice(start, length))
"""


def small_records() -> list[dict]:
    """Three contract-valid records of simulated traffic, free-form fields as JSON text."""
    from domains.retail.traffic.simulate import simulate

    with tempfile.TemporaryDirectory() as tmp:
        simulate(days=1, per_day=3, seed=3, out_dir=tmp, start=date(2026, 1, 5), n_users=10)
        records = [json.loads(line) for p in sorted(Path(tmp).rglob("*.jsonl")) for line in p.read_text().splitlines()]
    for record in records:
        for key in JSON_TEXT:
            if record.get(key) is not None:
                record[key] = json.dumps(record[key])
    return records[:3]


def run(code: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=200, help="MiB the big row's messages inflate to")
    args = parser.parse_args()
    records = small_records()
    print("| layout | file KiB | RSS before MiB | peak RSS MiB | peak - before MiB | s | accepted | quarantined |")
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for layout in ("together", "own"):
            path = Path(tmp) / f"{layout}.parquet"
            started = time.perf_counter()
            run(_BUILD, json.dumps(records), str(args.mib), str(path), layout)
            built = time.perf_counter() - started
            result = json.loads(run(_MEASURE, str(Path(tmp) / f"{layout}.duckdb"), str(path), NOW.isoformat()))
            base, peak = result["base_kib"] / 1024, result["peak_kib"] / 1024
            name = "one row group (measured through DuckDB)" if layout == "together" else "own row group (metadata)"
            print(
                f"| {name} | {path.stat().st_size / 1024:.0f} | {base:.0f} | {peak:.0f} | {peak - base:.0f} | "
                f"{result['seconds']:.2f} | {result['accepted']} | {result['quarantined_by_rule']} |",
                flush=True,
            )
            assert result["accepted"] == 2 and result["quarantined_by_rule"] == {"line_too_long": 1}, result
            assert peak < 1024, f"peak RSS {peak:.0f} MiB (file built in {built:.1f} s)"


if __name__ == "__main__":
    main()
