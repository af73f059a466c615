"""Benchmark the data plane: ingest throughput, window cut vs top-N vs pandas, incremental ingest.

    python bench/window.py                 # 10,000,000 rows (long)
    python bench/window.py --rows 200000   # quick run

Builds a synthetic, contract-valid interaction log as day-partitioned Parquet (compact records:
free-form objects as short JSON text), ingests all days but the last into a fresh store, then
measures (b) `cut_window` against a bare DuckDB top-N over the same stored table and a pandas
baseline that reads every file, sorts and takes the tail, and (c) ingesting the held-back day into
the full store against ingesting it into an empty one. Prints ratios and peak RSS.
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from dataplane.ingest import ingest_paths  # noqa: E402
from dataplane.store import open_store  # noqa: E402
from dataplane.window import cut_window  # noqa: E402

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
ROWS_PER_DAY = 27_400  # ~10 million a year
INTENTS = ["order_status", "cancel_order", "return_items", "exchange_items", "modify_order_items", "other"]
OUTCOMES = ["completed", "completed", "completed", "failed", "escalated"]


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def day_table(day: int, first: int, count: int) -> pa.Table:
    """`count` compact records ending during day `day`, ids numbered from `first`."""
    base = START + timedelta(days=day)
    step = 86_400 / count
    ids = range(first, first + count)
    ended = [base + timedelta(seconds=int(k * step)) for k in range(count)]
    customers = [f"user_{i % 50_000}" for i in ids]
    user_turn = ['[{"role":"user","content":"where is order #W%07d, call 415-555-%04d"},'
                 '{"role":"assistant","content":"","tool_calls":[{"name":"get_order_details",'
                 '"arguments":{"order_id":"#W%07d"}}]},{"role":"tool","name":"get_order_details","content":"ok"},'
                 '{"role":"assistant","content":"It ships soon."}]' % (i % 10**7, i % 10**4, i % 10**7) for i in ids]
    return pa.table({
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
    })


def build_log(root: Path, rows: int) -> list[Path]:
    days = max(2, -(-rows // ROWS_PER_DAY))
    per_day = rows // days
    paths = []
    for day in range(days):
        path = root / f"day={(START + timedelta(days=day)).date()}" / "part-0.parquet"
        path.parent.mkdir(parents=True)
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
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary folder, removed after")
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-window-"))
    now = datetime(2030, 1, 1, tzinfo=timezone.utc)
    try:
        gen_s, files = timed(lambda: build_log(work / "landing", args.rows))
        history, new_day = files[:-1], files[-1]
        print(f"log: {args.rows:,} rows in {len(files)} daily Parquet files, built in {gen_s:.1f}s")

        db = work / "interactions.duckdb"
        ingest_s, summary = timed(lambda: ingest_paths(db, history, now=now))
        assert summary.read == summary.accepted + summary.duplicates + summary.quarantined
        print(f"(a) ingest: {summary.accepted:,} rows in {ingest_s:.1f}s = {summary.accepted / ingest_s:,.0f} rows/s "
              f"(quarantined {summary.quarantined}); peak RSS so far {peak_rss_mib():,.0f} MiB")

        week_end = datetime.combine(pd.Timestamp(new_day.parent.name[4:]).date(), datetime.min.time(), timezone.utc)
        con = open_store(db)
        cut_s, info = timed(lambda: cut_window(con, week_end, size=args.window), repeat=5)
        topn_sql = ("SELECT interaction_id, content_hash FROM interactions WHERE ended_at < ? "
                    "ORDER BY ended_at DESC, interaction_id DESC LIMIT ?")
        topn_s, top = timed(lambda: con.execute(topn_sql, [week_end, args.window]).fetchall(), repeat=5)
        con.close()
        assert [r[0] for r in top[::-1]][:3] == [i for i in _first_ids(db, info.week)]

        def pandas_tail():
            frame = pd.read_parquet(work / "landing")
            frame = frame[frame["ended_at"] < week_end.strftime("%Y-%m-%dT%H:%M:%SZ")]
            return frame.sort_values(["ended_at", "interaction_id"]).tail(args.window)
        rss_before_pandas = peak_rss_mib()
        pandas_s, tail = timed(pandas_tail)
        assert list(tail["interaction_id"])[-1] == top[0][0]
        print(f"(b) window of {info.rows:,}: cut_window {cut_s * 1000:.0f} ms, bare top-N {topn_s * 1000:.0f} ms "
              f"(ratio {cut_s / topn_s:.2f}x), pandas read+sort+tail {pandas_s:.1f}s "
              f"(cut_window {pandas_s / cut_s:,.0f}x faster)")

        full_s, full = timed(lambda: ingest_paths(db, [new_day], now=now))
        empty_s, empty = timed(lambda: ingest_paths(work / "empty.duckdb", [new_day], now=now))
        print(f"(c) one new day ({full.accepted:,} rows): into the full store {full_s:.2f}s, "
              f"into an empty store {empty_s:.2f}s (ratio {full_s / empty_s:.2f})")
        print(f"peak RSS: {rss_before_pandas:,.0f} MiB before the pandas baseline, {peak_rss_mib():,.0f} MiB overall")
        print(json.dumps({"rows": args.rows, "ingest_rows_per_s": round(summary.accepted / ingest_s),
                          "cut_ms": round(cut_s * 1000, 1), "topn_ms": round(topn_s * 1000, 1),
                          "pandas_s": round(pandas_s, 2), "incremental_full_s": round(full_s, 3),
                          "incremental_empty_s": round(empty_s, 3), "peak_rss_mib": round(peak_rss_mib())}))
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)


def _first_ids(db: Path, week: str) -> list[str]:
    con = open_store(db, read_only=True)
    try:
        return [r[0] for r in con.execute(
            "SELECT interaction_id FROM windows WHERE week = ? ORDER BY position LIMIT 3", [week]).fetchall()]
    finally:
        con.close()


if __name__ == "__main__":
    main()
