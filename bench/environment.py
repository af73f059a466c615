"""Benchmark of the retail sandbox: replaying the 500 reference tasks, and tool-call throughput.

    .venv/bin/python bench/environment.py [--world DIR] [--repeat 3] [--simulate N] [--json]

Measured in one run, best of `--repeat`:
- full replay: the gold actions of all 500 tasks, each from a fresh copy of the full world
  (1,500 records), three ways: `copy.deepcopy` of the world per task (the naive baseline, timed
  on every 10th task because it is slow, and reported per task), `replay_actions` (a fast JSON
  copy), and `replay_actions(share_unchanged=True)` (copy-on-write);
- rollout mix: per task, an environment reset from the task's touched subset, then a realistic
  read mix (authenticate, user, every order, every product of the actions) and the gold actions,
  all through `call_tool`: tool calls per second, including resets;
- dispatch overhead: the same read calls straight to the pure tool functions, to show what the
  allow-list, argument checks and audit log cost.
`--simulate N` times N simulated interactions through `domains.retail.traffic.simulate.measure_throughput`.
"""

from __future__ import annotations

import argparse
import copy
import json
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from domains.retail import tools_read  # noqa: E402
from domains.retail.tools import replay_actions  # noqa: E402
from domains.retail.world import load_world, touched_subset  # noqa: E402
from training.sandbox.environment import call_tool, environment_class  # noqa: E402

RetailEnvironment = environment_class("retail")


def best_of(repeat: int, run: Callable[[], int]) -> tuple[float, int]:
    """Smallest wall time over `repeat` runs, and the count the run reports (calls, tasks)."""
    times, count = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        count = run()
        times.append(time.perf_counter() - started)
    return min(times), count


def naive_replay(world: dict[str, Any], tasks: list[dict[str, Any]]) -> int:
    for task in tasks:
        env = RetailEnvironment()
        env.reset(initial_state=copy.deepcopy(world))
        for action in task["actions"]:
            call_tool(env, action["name"], action["arguments"])
    return len(tasks)


def fast_replay(world: dict[str, Any], tasks: list[dict[str, Any]], share: bool) -> int:
    for task in tasks:
        replay_actions(world, task["actions"], share_unchanged=share)
    return len(tasks)


def read_mix(subset: dict[str, Any], task: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """What an agent reads before acting on a task: identity, profile, orders, products."""
    user = subset["users"][task["user_id"]]
    calls = [
        (
            "find_user_id_by_name_zip",
            {
                "first_name": user["name"]["first_name"],
                "last_name": user["name"]["last_name"],
                "zip": user["address"]["zip"],
            },
        ),
        ("get_user_details", {"user_id": task["user_id"]}),
    ]
    calls += [("get_order_details", {"order_id": oid}) for oid in subset["orders"]]
    calls += [("get_product_details", {"product_id": pid}) for pid in subset["products"]]
    return calls + [("calculate", {"expression": "(129.99 - 89.5) * 2"})]


def rollout_mix(prepared: list[tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]]) -> int:
    calls = 0
    for subset, mix in prepared:
        env = RetailEnvironment()
        env.reset(initial_state=subset)
        for name, arguments in mix:
            call_tool(env, name, arguments)
        calls += len(mix)
    return calls


READS = ("find_user_id_by_name_zip", "get_user_details", "get_order_details", "get_product_details")


def dispatched_reads(
    envs: list[RetailEnvironment], prepared: list[tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]]
) -> int:
    """The read calls of the mix through call_tool on environments reset beforehand."""
    calls = 0
    for env, (_, mix) in zip(envs, prepared):
        for name, arguments in mix:
            if name in READS:
                call_tool(env, name, arguments)
                calls += 1
    return calls


def direct_reads(prepared: list[tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]]) -> int:
    """The read calls of the mix straight to the pure functions: no checks, no audit, no reset."""
    direct = {
        "find_user_id_by_name_zip": lambda s, a: tools_read.find_user_id_by_name_zip(s, **a),
        "get_user_details": lambda s, a: tools_read.render("user", tools_read.user(s, a["user_id"]), False),
        "get_order_details": lambda s, a: tools_read.render("order", tools_read.order(s, a["order_id"]), False),
        "get_product_details": lambda s, a: tools_read.render("product", tools_read.product(s, a["product_id"]), False),
    }
    calls = 0
    for subset, mix in prepared:
        for name, arguments in mix:
            if name in direct:
                direct[name](subset, arguments)
                calls += 1
    return calls


def simulate_part(n: int) -> dict[str, Any] | str:
    # ---- `--simulate N`: owned by domains.retail.traffic.simulate; this bench only times it ----
    if not (ROOT / "training" / "traffic.py").exists():
        return "skipped: training/traffic.py does not exist yet (left to the traffic engineer)"
    from training.traffic import simulate as traffic

    if not hasattr(traffic, "measure_throughput"):
        return "skipped: domains.retail.traffic.simulate has no measure_throughput(n) yet"
    return traffic.measure_throughput(n)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", default=str(ROOT / "tests" / "data" / "retail-world"))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--simulate", type=int, default=0, metavar="N")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    world = load_world(args.world)
    tasks = [json.loads(line) for line in (Path(args.world) / "tasks_train.jsonl").read_text().splitlines() if line]
    gold_calls = sum(len(t["actions"]) for t in tasks)
    prepared = []
    for task in tasks:
        subset = touched_subset(world, task["user_id"], task["actions"])
        mix = read_mix(subset, task) + [(a["name"], a["arguments"]) for a in task["actions"]]
        prepared.append((subset, mix))

    sample = tasks[::10]
    naive_s, _ = best_of(args.repeat, lambda: naive_replay(world, sample))
    naive_ms = naive_s / len(sample) * 1e3
    copied_s, _ = best_of(args.repeat, lambda: fast_replay(world, tasks, share=False))
    cow_s, _ = best_of(args.repeat, lambda: fast_replay(world, tasks, share=True))
    copied_ms, cow_ms = copied_s / len(tasks) * 1e3, cow_s / len(tasks) * 1e3
    mix_s, mix_calls = best_of(args.repeat, lambda: rollout_mix(prepared))
    envs = []
    for subset, _ in prepared:
        envs.append(RetailEnvironment())
        envs[-1].reset(initial_state=subset)
    read_s, read_calls = best_of(args.repeat, lambda: dispatched_reads(envs, prepared))
    direct_s, direct_calls = best_of(args.repeat, lambda: direct_reads(prepared))
    assert direct_calls == read_calls

    figures = {
        "machine": f"{platform.machine()} {platform.processor() or ''} Python {platform.python_version()}".strip(),
        "tasks": len(tasks),
        "gold_calls": gold_calls,
        "repeat": args.repeat,
        "replay_ms_per_task_naive_deepcopy": round(naive_ms, 2),
        "replay_ms_per_task_json_copy": round(copied_ms, 2),
        "replay_ms_per_task_copy_on_write": round(cow_ms, 2),
        "full_replay_500_tasks_s_json_copy": round(copied_s, 3),
        "full_replay_500_tasks_s_copy_on_write": round(cow_s, 3),
        "rollout_mix_calls": mix_calls,
        "rollout_mix_s": round(mix_s, 3),
        "rollout_mix_calls_per_s": round(mix_calls / mix_s),
        "dispatched_read_calls_per_s": round(read_calls / read_s),
        "direct_read_calls_per_s": round(direct_calls / direct_s),
    }
    if args.simulate:
        figures["simulate"] = simulate_part(args.simulate)
    if args.json:
        print(json.dumps(figures, indent=2))
        return 0
    print(f"reference tasks: {len(tasks)} ({gold_calls} gold calls), best of {args.repeat}")
    print(f"replay from the full world, copy.deepcopy per task (baseline, {len(sample)} tasks): {naive_ms:.2f} ms/task")
    print(
        f"replay from the full world, replay_actions (JSON copy):   {copied_ms:.2f} ms/task, all 500: {copied_s:.3f} s"
    )
    print(f"replay from the full world, replay_actions copy-on-write: {cow_ms:.2f} ms/task, all 500: {cow_s:.3f} s")
    print(
        f"rollout mix on subsets (reset + reads + gold writes): {mix_calls} calls in {mix_s:.3f} s "
        f"= {mix_calls / mix_s:,.0f} calls/s"
    )
    print(
        f"read calls through call_tool: {read_calls / read_s:,.0f} calls/s; "
        f"pure read functions: {direct_calls / direct_s:,.0f} calls/s"
    )
    print(
        f"ratio: copy-on-write replay is {naive_ms / cow_ms:.1f}x faster per task than the deepcopy baseline "
        f"({copied_ms / cow_ms:.1f}x faster than the JSON copy)"
    )
    print(
        f"ratio: checked, audited reads run at {(read_calls / read_s) / (direct_calls / direct_s):.2f}x "
        f"the speed of the pure functions"
    )
    if args.simulate:
        print(f"simulate {args.simulate}: {figures['simulate']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
