"""What tracing costs a weekly evaluation: the demo's sizes with and without traces, same run.

    .venv/bin/python bench/traces.py [--calibration 60] [--trials 2] [--shadow 269] [--threads 1] [--rounds 2]

The evaluation is the product's: `evaluation.reports.evaluate_pair` with `HFPolicy` on the shipped
agent (`models/retail-agent-tiny`, candidate and baseline both: the demo's first week compares the
shipped agent with its GRPO update, which this bench does not train), level-1 tasks of the shipped
agent's recipe (`domains.retail.tiny_agent.level1_tasks`; its world has fewer held-out customers
than a demo week evaluates, so training customers' tasks top the shadow set up: for timing a
conversation is a conversation), `calibration_report`'s turns, tokens and compact results. The
sizes are the demo's week: calibration 60 tasks x 2 trials, shadow 269 conversations x 1
(the demo's 2026-12-01 run, `bench/results/demo.md`), each for candidate and baseline.

"With traces" is what `calibration_report` and `shadow_report` do: `tracking.traces.week_traces`
into a week run of a sqlite MLflow store (as `open_week_run` opens it), `tracing_to` around
`evaluate_pair(on_trials=...)` (MLflow's asynchronous, batched export overlapping the second
policy's rollouts, flushed before it returns), then the count of stored traces the assets put in
their metadata, with `TraceSettings`' defaults (`--max-traces -1` traces every failed trial). The
shipped agent fails about two conversations in three, more than a trained candidate. After the
clock stops, the traced run's traces are read back and any with fewer spans than its conversation
is counted (MLflow drops what it cannot write with only a log line).

Each round evaluates each set without traces and with them, back to back, the order alternating
between rounds (the machine's load drifts). Both wall time and process CPU time are reported (CPU:
every thread of this process, MLflow's export threads included; with `--threads 1` torch does not
spin-wait, so CPU time does not grow with other processes' load as wall time does). Beside them,
the serial bound: the traces of the untraced run's trials logged on their own afterwards (no
overlap with rollouts at all). The last line is
`traces=<n> ratio_wall=<r> ratio_cpu=<r> serial_ratio_wall=<r> serial_ratio_cpu=<r>`.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("MLFLOW_ENABLE_TELEMETRY", "false")

from domains.retail.tiny_agent import AgentRecipe, level1_tasks, level1_tools  # noqa: E402
from evaluation.reports import evaluate_pair  # noqa: E402
from tracking.registry import mlflow_client  # noqa: E402
from tracking.run_log import open_week_run  # noqa: E402
from tracking.traces import TraceSettings, TrialTraces, conversation_spans, tracing_to, week_traces  # noqa: E402
from training.sandbox.rollout import SERVING_MAX_TURNS  # noqa: E402
from training.tiny.manifest import shipped_agent_path  # noqa: E402

WEEK = "2026-11-09"
MAX_TURNS, MAX_NEW_TOKENS = SERVING_MAX_TURNS, 128  # calibration_report's and shadow_report's defaults
VERSIONS = {"candidate": f"retail-agent/candidate-{WEEK}", "baseline": "retail-agent/base"}


SETTINGS = TraceSettings()  # replaced by the flags in main()


def _log(store: dict, split: str) -> TrialTraces:
    return week_traces(
        store["uri"], store["run_id"], week=WEEK, split=split, policy_versions=VERSIONS, settings=SETTINGS, seed=0
    )


def missing_spans(store: dict, kept: dict) -> int:
    """Traces of the run whose stored spans are fewer than their conversation's (MLflow drops the
    spans of a trace it could not write, and says so only in a log line)."""
    client = mlflow_client(store["uri"])
    experiment = client.get_run(store["run_id"]).info.experiment_id
    by_key = {(t.record_id, str(t.trial), side): t for side, trials in kept.items() for t in trials}
    short, token = 0, None
    while True:
        page = client.search_traces(locations=[experiment], run_id=store["run_id"], page_token=token)
        for trace in page:
            tags = trace.info.tags
            trial = by_key[(tags["task_id"], tags["trial"], tags["policy"])]
            short += len(trace.data.spans) < 1 + _count(conversation_spans(trial.messages))
        token = page.token
        if not token:
            return short


def _count(docs: list) -> int:
    return sum(1 + _count(d.children) for d in docs)


def evaluate(model: Path, records: list[dict], k: int, split: str, store: dict | None) -> tuple[dict, dict]:
    """One set's evaluation, timed; with `store`, traced as the evaluation assets trace it. Returns
    the figures and the trials (by policy)."""
    kept: dict[str, list] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    traces = _log(store, split) if store is not None else None

    def on_trials(side: str, trials: list) -> None:
        kept[side] = trials
        if traces is not None:
            traces(side, trials)

    with tracing_to(store["uri"]) if store is not None else nullcontext():
        pair = evaluate_pair(
            str(model),
            str(model),
            records,
            k=k,
            seed=0,
            max_turns=MAX_TURNS,
            compact=True,
            max_new_tokens=MAX_NEW_TOKENS,
            tools=level1_tools(),
            on_trials=on_trials,
        )
    stored = traces.stored(store["uri"]) if traces is not None else 0
    seconds, cpu_seconds = time.perf_counter() - wall, time.process_time() - cpu
    spans_missing = missing_spans(store, kept) if traces is not None else 0  # after the clock
    figures = {
        "split": split,
        "traced": traces is not None,
        "conversations": 2 * len(pair.candidate.keys),
        "failures": sum(not s for s in pair.candidate.success) + sum(not s for s in pair.baseline.success),
        "traces": stored,
        "traces_missing_spans": spans_missing,
        "untraced_failures": sum(traces.untraced_failures.values()) if traces is not None else 0,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
    }
    return figures, kept


def trace_only(trials: dict, split: str, store: dict) -> dict:
    """The serial bound: logging `trials`' traces with nothing else running."""
    wall, cpu = time.perf_counter(), time.process_time()
    traces = _log(store, split)
    with tracing_to(store["uri"]):
        for side, side_trials in trials.items():
            traces(side, side_trials)
    stored = traces.stored(store["uri"])
    return {"traces": stored, "seconds": time.perf_counter() - wall, "cpu_seconds": time.process_time() - cpu}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calibration", type=int, default=60, help="calibration tasks (demo: 60)")
    parser.add_argument("--trials", type=int, default=2, help="calibration trials per task (demo: 2)")
    parser.add_argument("--shadow", type=int, default=269, help="shadow conversations (demo week 1: 269)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of (without, with), order alternating")
    parser.add_argument("--max-traces", type=int, default=TraceSettings().max_traces, help="TraceSettings.max_traces")
    parser.add_argument(
        "--successes", type=int, default=TraceSettings().trace_successes, help="TraceSettings.trace_successes"
    )
    args = parser.parse_args()
    global SETTINGS
    SETTINGS = TraceSettings(trace_successes=args.successes, max_traces=args.max_traces)

    import torch

    torch.set_num_threads(args.threads)
    model = shipped_agent_path()
    work = Path(tempfile.mkdtemp(prefix="bench-traces-"))
    started = time.perf_counter()
    recipe = AgentRecipe()
    train, held = level1_tasks(work, replace(recipe, held_out_tasks=min(args.calibration, recipe.held_out_tasks)))
    tasks = held + train
    if len(tasks) < args.calibration + args.shadow:
        raise SystemExit(f"{len(tasks)} level-1 tasks, {args.calibration + args.shadow} needed")
    print(f"tasks: {len(tasks)} level-1 tasks in {time.perf_counter() - started:.0f} s", flush=True)
    sets = (
        ("calibration", tasks[: args.calibration], args.trials),
        ("shadow", tasks[args.calibration : args.calibration + args.shadow], 1),
    )
    uri = f"sqlite:///{work / 'mlflow.db'}"
    runs = iter(range(1_000_000))

    def fresh_run() -> dict:
        """A week run of its own per measurement, opened before the clock starts (training opens it
        in a weekly run), so no measurement finds another's traces to replace."""
        dagster_run = f"bench-traces-{next(runs)}"
        return {"uri": uri, "run_id": open_week_run(uri, WEEK, dagster_run, artifact_location=(work / "a").as_uri())}

    # Untimed: the first rollouts pay one-time costs (kernels, caches), the first trace MLflow's
    # tracer start; either would flatter whichever measurement came second.
    evaluate(model, tasks[:2], 1, "calibration", fresh_run())

    rows: list[dict] = []
    for round_no in range(args.rounds):
        for split, records, k in sets:
            order = (False, True) if round_no % 2 == 0 else (True, False)
            for traced in order:
                row, kept = evaluate(model, records, k, split, fresh_run() if traced else None)
                row["round"] = round_no
                if not traced:
                    row["trace_only"] = trace_only(kept, split, fresh_run())
                rows.append(row)
                print(json.dumps(row), flush=True)

    def total(traced: bool, key: str) -> float:
        return sum(r[key] for r in rows if r["traced"] == traced)

    serial_wall = total(False, "seconds") + sum(r["trace_only"]["seconds"] for r in rows if not r["traced"])
    serial_cpu = total(False, "cpu_seconds") + sum(r["trace_only"]["cpu_seconds"] for r in rows if not r["traced"])
    traces = sum(r["traces"] for r in rows if r["traced"]) // args.rounds
    print(
        f"machine: {platform.platform()}, {os.cpu_count()} cpus, torch threads {args.threads}, load {os.getloadavg()}"
    )
    print(f"settings: {SETTINGS}; traces missing spans: {sum(r.get('traces_missing_spans', 0) for r in rows)}")
    print(
        f"without traces: {total(False, 'seconds'):.1f} s wall, {total(False, 'cpu_seconds'):.1f} s cpu; "
        f"with: {total(True, 'seconds'):.1f} s wall, {total(True, 'cpu_seconds'):.1f} s cpu ({args.rounds} rounds)"
    )
    print(
        f"traces={traces} ratio_wall={total(True, 'seconds') / total(False, 'seconds'):.3f} "
        f"ratio_cpu={total(True, 'cpu_seconds') / total(False, 'cpu_seconds'):.3f} "
        f"serial_ratio_wall={serial_wall / total(False, 'seconds'):.3f} "
        f"serial_ratio_cpu={serial_cpu / total(False, 'cpu_seconds'):.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
