"""Benchmark the data plane: ingest throughput, window cut vs top-N vs pandas, incremental ingest.

    python bench/window.py                 # 10,000,000 rows (long)
    python bench/window.py --rows 200000   # quick run

Builds a synthetic, contract-valid interaction log as day-partitioned Parquet (compact records:
free-form objects as short JSON text), ingests all days but the last into a fresh store, then
measures (b) `cut_window` (the first cut of a week, and apart from it a re-cut of the unchanged
week, which skips the write) against a bare DuckDB top-N over the same stored table and two pandas
baselines that read every file, filter, sort and take the tail (one reading only the columns the
window needs, one reading every column; each skipped if the log would not fit in the memory
available), and (c) ingesting the held-back day into the full store against ingesting it into an
empty one. Prints ratios, CPU seconds of the ingest (the machine may be shared: rows per
CPU-second is the figure contention moves least), load averages and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dataplane.ingest import ingest_paths
from dataplane.store import open_store
from dataplane.window import cut_window, week_id

START = datetime(2024, 1, 1, tzinfo=UTC)
ROWS_PER_DAY = 27_400  # ~10 million a year
INTENTS = ["order_status", "cancel_order", "return_items", "exchange_items", "modify_order_items", "other"]
OUTCOMES = ["completed", "completed", "completed", "failed", "escalated"]


# Resident memory of the pandas baseline per row of this log, measured at 219,200 rows (object
# columns: ~1.2 kB/row once read). Used only to refuse a baseline that would not fit in memory.
PANDAS_BYTES_PER_ROW = 1300
PANDAS_COLUMNS = ["interaction_id", "ended_at", "outcome", "intent"]  # what cut_window reads


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def mem_available_bytes() -> int:
    with open("/proc/meminfo") as handle:
        for line in handle:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {load()}] {text}", flush=True)


def day_table(day: int, first: int, count: int) -> pa.Table:
    """`count` compact records ending during day `day`, ids numbered from `first`."""
    base = START + timedelta(days=day)
    step = 86_400 / count
    ids = range(first, first + count)
    ended = [base + timedelta(seconds=int(k * step)) for k in range(count)]
    customers = [f"user_{i % 50_000}" for i in ids]
    user_turn = [
        '[{"role":"user","content":"where is order #W%07d, call 415-555-%04d"},'
        '{"role":"assistant","content":"","tool_calls":[{"name":"get_order_details",'
        '"arguments":{"order_id":"#W%07d"}}]},{"role":"tool","name":"get_order_details","content":"ok"},'
        '{"role":"assistant","content":"It ships soon."}]' % (i % 10**7, i % 10**4, i % 10**7)
        for i in ids
    ]
    return pa.table(
        {
            "interaction_id": [f"int-{i:010d}" for i in ids],
            "started_at": [(t - timedelta(minutes=3)).strftime("%Y-%m-%dT%H:%M:%SZ") for t in ended],
            "ended_at": [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in ended],
            "policy_version": ["retail-agent/12"] * count,
            "customer_id": customers,
            "intent": [INTENTS[i % len(INTENTS)] for i in ids],
            "initial_state": ['{"users":{"%s":{}},"orders":{},"products":{}}' % c for c in customers],
            "user_scenario": ['{"instruction":"Ask about your order.","known_info":{},"persona":"terse"}'] * count,
            "messages": user_turn,
            "outcome": [OUTCOMES[i % len(OUTCOMES)] for i in ids],
            "escalation_was_necessary": [True if i % 5 == 4 else None for i in ids],
            "actions_taken": [i % 7 for i in ids],
            "customer_sentiment_delta": [((i % 21) - 10) / 10 for i in ids],
            "gold": ['{"actions":[],"outputs":["soon"]}' if i % 3 == 0 else None for i in ids],
            "human_label": [None] * count,
            "schema_version": [1] * count,
        }
    )


def build_log(root: Path, rows: int) -> list[Path]:
    days = max(2, -(-rows // ROWS_PER_DAY))
    per_day = rows // days
    paths = []
    for day in range(days):
        path = root / f"day={(START + timedelta(days=day)).date()}" / "part-0.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():  # a --workdir of an interrupted run: same rows, already written
            pq.write_table(day_table(day, day * per_day, per_day), path, row_group_size=8192)
        paths.append(path)
    return paths


def timed(fn, repeat: int = 1):
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--window", type=int, default=10_000)
    parser.add_argument(
        "--phases",
        type=int,
        default=10,
        help="ingest the history in this many calls, reporting each (the store is reopened per call)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="default: a temporary folder, removed after; "
        "the folder of an interrupted run resumes it (ingestion skips the files already stored, "
        "so (a) then covers the rest)",
    )
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-window-"))
    now = datetime(2030, 1, 1, tzinfo=UTC)
    try:
        gen_s, files = timed(lambda: build_log(work / "landing", args.rows))
        history, new_day = files[:-1], files[-1]
        size_mib = sum(p.stat().st_size for p in files) / 2**20
        say(f"log: {args.rows:,} rows in {len(files)} daily Parquet files ({size_mib:,.0f} MiB), built in {gen_s:.1f}s")

        db = work / "interactions.duckdb"
        ingest_s, ingest_cpu, summary = ingest_history(db, history, now, args.phases)
        assert summary.read == summary.accepted + summary.duplicates + summary.quarantined
        say(
            f"(a) ingest: {summary.accepted:,} rows in {ingest_s:.1f}s = {summary.accepted / ingest_s:,.0f} rows/s "
            f"(CPU {ingest_cpu:.1f}s = {summary.accepted / ingest_cpu:,.0f} rows per CPU-second; quarantined "
            f"{summary.quarantined}); store {db.stat().st_size / 2**20:,.0f} MiB; peak RSS so far {peak_rss_mib():,.0f} MiB"
        )

        week_end = datetime.combine(pd.Timestamp(new_day.parent.name[4:]).date(), datetime.min.time(), UTC)
        con = open_store(db)
        cut_s, topn_s, info, top = first_cuts(con, week_end, args.window)
        recut_s, again = timed(lambda: cut_window(con, week_end, size=args.window), repeat=5)
        con.close()
        assert again == info and [r[0] for r in top[::-1]][:3] == _first_ids(db, info.week)
        say(
            f"(b) window of {info.rows:,}: first cut_window of a week {cut_s * 1000:.0f} ms, bare top-N "
            f"{topn_s * 1000:.0f} ms (ratio {cut_s / topn_s:.2f}x); re-cut of the unchanged week "
            f"{recut_s * 1000:.0f} ms ({recut_s / topn_s:.2f}x)"
        )

        rss_before_pandas = peak_rss_mib()
        baselines = {}
        for name, columns in (("the window's", PANDAS_COLUMNS), ("all", None)):
            baselines[name] = pandas_baseline(work / "landing", columns, week_end, args.window, args.rows, top[0][0])
            if baselines[name] is not None:
                say(
                    f"(b) pandas read ({name} columns) + filter + sort + tail: {baselines[name]:.1f}s "
                    f"(cut_window {baselines[name] / cut_s:,.0f}x faster); peak RSS {peak_rss_mib():,.0f} MiB"
                )

        full_s, full = timed(lambda: ingest_paths(db, [new_day], now=now))
        empty_s, empty = timed(lambda: ingest_paths(work / "empty.duckdb", [new_day], now=now))
        say(
            f"(c) one new day ({full.accepted:,} rows): into the full store {full_s:.2f}s, "
            f"into an empty store {empty_s:.2f}s (ratio {full_s / empty_s:.2f})"
        )
        say(f"peak RSS: {rss_before_pandas:,.0f} MiB before the pandas baselines, {peak_rss_mib():,.0f} MiB overall")
        print(
            json.dumps(
                {
                    "rows": args.rows,
                    "ingest_rows_per_s": round(summary.accepted / ingest_s),
                    "ingest_rows_per_cpu_s": round(summary.accepted / ingest_cpu),
                    "cut_ms": round(cut_s * 1000, 1),
                    "recut_ms": round(recut_s * 1000, 1),
                    "topn_ms": round(topn_s * 1000, 1),
                    "pandas_columns_s": _round(baselines["the window's"]),
                    "pandas_all_s": _round(baselines["all"]),
                    "incremental_full_s": round(full_s, 3),
                    "incremental_empty_s": round(empty_s, 3),
                    "peak_rss_before_pandas_mib": round(rss_before_pandas),
                    "peak_rss_mib": round(peak_rss_mib()),
                }
            ),
            flush=True,
        )
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


TOPN_SQL = (
    "SELECT interaction_id, content_hash FROM interactions WHERE ended_at < ? "
    "ORDER BY ended_at DESC, interaction_id DESC LIMIT ?"
)


def first_cuts(con, week_end: datetime, size: int, repeat: int = 5):
    """Median seconds of a week's first cut and of the bare top-N, over `repeat` week ends a day apart.

    Each week's stored window is deleted (untimed) before its cut, so every timed cut writes its
    rows, as the first cut of a week does; a re-cut of an unchanged week skips the write and is
    timed apart. The top-N runs once untimed first, so both sides read from a warm cache, and the
    timed top-N follows its cut. Returns the two medians, the `week_end` cut's info and its top-N
    (that cut comes last, so its rows are the ones left stored).
    """
    cuts, topns, info, top = [], [], None, None
    for day in reversed(range(repeat)):  # `week_end` last: days may share its ISO week
        end = week_end - timedelta(days=day)
        con.execute("DELETE FROM windows WHERE week = ?", [week_id(end)])
        con.execute(TOPN_SQL, [end, size]).fetchall()
        cut_s, cut_info = timed(lambda: cut_window(con, end, size=size))
        topn_s, rows = timed(lambda: con.execute(TOPN_SQL, [end, size]).fetchall())
        cuts.append(cut_s)
        topns.append(topn_s)
        if day == 0:
            info, top = cut_info, rows
    return statistics.median(cuts), statistics.median(topns), info, top


def ingest_history(db: Path, history: list[Path], now: datetime, phases: int):
    """Ingest `history` in `phases` calls; returns wall seconds, CPU seconds and the summed summary."""
    total_s = total_cpu = 0.0
    summary = None
    step = -(-len(history) // max(1, phases))
    for start in range(0, len(history), step):
        cpu0 = cpu_s()
        part_s, part = timed(lambda: ingest_paths(db, history[start : start + step], now=now))
        part_cpu = cpu_s() - cpu0
        total_s, total_cpu = total_s + part_s, total_cpu + part_cpu
        if summary is None:
            summary = part
        else:
            for item in part.per_file:
                summary.add(item)
        say(
            f"    ingested files {start + 1}-{start + len(part.per_file)} of {len(history)}: "
            f"{part.accepted:,} rows in {part_s:.1f}s = {part.accepted / part_s:,.0f} rows/s, "
            f"{part.accepted / part_cpu:,.0f} rows per CPU-second (stored so far {summary.accepted:,}; peak RSS {peak_rss_mib():,.0f} MiB)"
        )
    return total_s, total_cpu, summary


def pandas_baseline(
    landing: Path, columns: list[str] | None, week_end: datetime, size: int, rows: int, expected_last: str
) -> float | None:
    """Seconds to read the log with pandas, keep rows before `week_end`, sort and take the tail.

    Refused (None) when the whole log would not fit in the memory available now: the machine is
    shared, and a swap-less OOM would take someone else's process with it.
    """
    need = rows * (PANDAS_BYTES_PER_ROW if columns is None else PANDAS_BYTES_PER_ROW // 4)
    available = mem_available_bytes()
    if need * 1.25 + 2 * 2**30 > available:
        say(
            f"(b) pandas baseline ({'all' if columns is None else 'some'} columns) skipped: needs about "
            f"{need / 2**30:.1f} GiB, {available / 2**30:.1f} GiB available"
        )
        return None

    def tail():
        frame = pd.read_parquet(landing, columns=columns)
        frame = frame[frame["ended_at"] < week_end.strftime("%Y-%m-%dT%H:%M:%SZ")]
        return frame.sort_values(["ended_at", "interaction_id"]).tail(size)

    seconds, result = timed(tail)
    assert list(result["interaction_id"])[-1] == expected_last
    del result
    return seconds


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _first_ids(db: Path, week: str) -> list[str]:
    con = open_store(db, read_only=True)
    try:
        return [
            r[0]
            for r in con.execute(
                "SELECT interaction_id FROM windows WHERE week = ? ORDER BY position LIMIT 3", [week]
            ).fetchall()
        ]
    finally:
        con.close()


if __name__ == "__main__":
    main()
