"""Build, measure and check the shipped production agent (`models/retail-agent-tiny`).

    python bench/shipped_agent.py build --out models/retail-agent-tiny [--threads 2]
        the recipe (domains.retail.tiny_agent), then the greedy figures on the held-out customers, then
        the manifest (training.tiny.manifest). This is the command the manifest records.
    python bench/shipped_agent.py measure --out DIR --work WORK [--threads 2]
        the second half of `build` for a folder `python -m domains.retail.tiny_agent build` made.
    python bench/shipped_agent.py measure-expert --work WORK
        the expert-only SFT reference alone (kept in WORK for `measure`), while the weakness
        stage still trains.
    python bench/shipped_agent.py check [--threads 2]
        rebuilds into a scratch folder, measures, and compares success with the manifest's:
        exit 0 when the paired difference on the same trials is within its 95% CI.

Figures come from the product's evaluator: `evaluation.rollout.run_rollouts` with `HFPolicy`,
greedy, on level 1's tool list, with the evaluation defaults (`assets.evaluation`: 12 turns,
compact tool results, 128 new tokens), k trials per held-out customer (simulator seeds from
`trial_seed`, the same on every machine). The last line printed is
`success=<x> ci95=<h> pass_hat_2=<p> n=<tasks> k=<k> seconds=<t>` for the shipped agent.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dataplane.hashing import sha256_file  # noqa: E402
from domains.retail.tiny_agent import (  # noqa: E402
    BUILD_SUMMARY,
    WEIGHTS_FILE,
    AgentRecipe,
    build_agent,
    level1_tasks,
    level1_tools,
)
from evaluation.failure_modes import failure_mode_shares  # noqa: E402
from evaluation.metrics import pass_hat_ks, success_rate, successes_by_task  # noqa: E402
from evaluation.rollout import run_rollouts  # noqa: E402
from training.policies import HFPolicy  # noqa: E402
from training.rewards import outcome_of  # noqa: E402
from training.sandbox.rollout import SERVING_MAX_TURNS  # noqa: E402
from training.tiny.manifest import (  # noqa: E402
    REBUILD_COMMAND,
    SHIPPED_AGENT_DIR,
    build_machine,
    verify_shipped,
    write_manifest,
)

EVAL_SEED = 0
TRIALS = 2  # per held-out customer: pass^2 needs two
MAX_TURNS = SERVING_MAX_TURNS
MAX_NEW_TOKENS = 128


def task_ci95(per_task: list[float]) -> float:
    """95% normal half-width of the mean of per-customer success rates (trials of one customer
    are not independent, so the customer is the unit)."""
    n = len(per_task)
    mean = sum(per_task) / n
    var = sum((x - mean) ** 2 for x in per_task) / (n - 1) if n > 1 else 0.0
    return 1.96 * math.sqrt(var / n)


def measure(model_path: Path, held: list[dict], trials: int = TRIALS, seed: int = EVAL_SEED) -> dict:
    """Greedy figures of the model at `model_path` on `held`, `trials` per customer."""
    tools = level1_tools()
    started = time.monotonic()
    policy = HFPolicy(str(model_path), max_new_tokens=MAX_NEW_TOKENS, seed=seed, tools=tools)
    result = run_rollouts(policy, held, k=trials, seed=seed, max_turns=MAX_TURNS, compact=True, tools=tools)
    by_task = successes_by_task(result)
    per_task = [sum(v) / len(v) for v in by_task.values()]
    outcomes = Counter(outcome_of(t.episode) for t in result)
    return {
        "tasks": len(by_task),
        "trials": len(result),
        "k": trials,
        "eval_seed": seed,
        "success_rate": success_rate(result),
        "ci95": task_ci95(per_task),
        **{f"pass_hat_{k}": v for k, v in pass_hat_ks(result, range(1, trials + 1)).items()},
        "outcomes": {name: outcomes[name] / len(result) for name in ("completed", "escalated", "failed")},
        "failure_mode_shares": failure_mode_shares(result),
        "mean_reward": sum(t.reward for t in result) / len(result),
        "successes": [int(t.success) for t in result],
        "seconds": round(time.monotonic() - started),
    }


def held_out(work: Path, recipe: AgentRecipe) -> list[dict]:
    """The recipe's held-out customers, simulated once per work folder and kept there."""
    cached = work / "eval" / "held_out.json"
    if not cached.is_file():
        _, held = level1_tasks(work / "eval", recipe)
        cached.write_text(json.dumps(held))
    return json.loads(cached.read_text())


def measured(model_path: Path, work: Path, recipe: AgentRecipe) -> dict:
    """`measure` on the held-out customers, kept in the work folder under the weights' sha256, so a
    figure measured once (the expert reference, while the weakness stage still trains) is not
    measured again and a changed model is never given another model's figures."""
    digest = sha256_file(model_path / WEIGHTS_FILE)
    cached = work / "eval" / f"figures-{digest}.json"
    if not cached.is_file():
        figures = measure(model_path, held_out(work, recipe))
        cached.write_text(json.dumps({"model": str(model_path), **figures}))
    figures = json.loads(cached.read_text())
    figures.pop("model")
    return figures


def figures_for(out: Path, work: Path, recipe: AgentRecipe) -> dict:
    return {"shipped": measured(out, work, recipe), "expert_sft": measured(work / "expert", work, recipe)}


def publish(out: Path, work: Path, recipe: AgentRecipe, threads: int) -> dict:
    summary = json.loads((work / BUILD_SUMMARY).read_text())
    figures = figures_for(out, work, recipe)
    for side in figures.values():
        side.pop("successes")
    summary.pop("expert_path", None)
    return write_manifest(
        out,
        recipe=recipe.as_dict(),
        build={**build_machine(threads), **summary},
        figures=figures,
        rebuild_command=REBUILD_COMMAND,
    )


def report(manifest: dict) -> None:
    shipped, expert = manifest["figures"]["shipped"], manifest["figures"]["expert_sft"]
    print(json.dumps(manifest["figures"], indent=2))
    print(
        f"expert_sft_success={expert['success_rate']:.3f} success={shipped['success_rate']:.3f} "
        f"ci95={shipped['ci95']:.3f} pass_hat_2={shipped.get('pass_hat_2', float('nan')):.3f} "
        f"n={shipped['tasks']} k={shipped['k']} seconds={manifest['build'].get('build_seconds')}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("build", "measure", "measure-expert", "check"))
    parser.add_argument("--out", type=Path, default=SHIPPED_AGENT_DIR)
    parser.add_argument("--work", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    recipe = AgentRecipe()
    work = args.work or Path(tempfile.mkdtemp(prefix="shipped-agent-"))
    if args.command == "build":
        build_agent(args.out, work, recipe, threads=args.threads, progress=lambda d: print(json.dumps(d), flush=True))
    if args.command == "measure-expert":
        print(json.dumps(measured(work / "expert", work, recipe)))
        return 0
    if args.command in ("build", "measure"):
        report(publish(args.out, work, recipe, args.threads))
        return 0
    # check: rebuild from scratch and compare with what ships, trial by trial.
    manifest = verify_shipped(args.out)
    rebuilt = work / "agent"
    build_agent(rebuilt, work, recipe, threads=args.threads, progress=lambda d: print(json.dumps(d), flush=True))
    _, held = level1_tasks(work / "eval", recipe)
    ours, theirs = measure(rebuilt, held), measure(args.out, held)
    diffs = [a - b for a, b in zip(ours["successes"], theirs["successes"])]
    half = task_ci95(diffs) if len(diffs) > 1 else 0.0
    mean = sum(diffs) / len(diffs)
    within = abs(mean) <= half or mean == 0
    print(
        json.dumps(
            {
                "rebuilt_success": ours["success_rate"],
                "shipped_success_now": theirs["success_rate"],
                "manifest_success": manifest["figures"]["shipped"]["success_rate"],
                "difference": mean,
                "ci95": half,
                "within": within,
            }
        )
    )
    print(
        f"rebuilt_success={ours['success_rate']:.3f} manifest_success="
        f"{manifest['figures']['shipped']['success_rate']:.3f} ci95={half:.3f} within={within}"
    )
    return 0 if within else 1


if __name__ == "__main__":
    raise SystemExit(main())
