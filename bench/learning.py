"""Does GRPO improve the shipped agent? Greedy verified success before and after, on held-out customers.

The product path end to end, nothing built here:
- the policy is the shipped agent `models/retail-agent-tiny`, loaded only once it matches its
  manifest (`training.tiny.manifest.shipped_agent_path`), as `policy_base` starts a first week;
- the tasks are the manifest's: its recipe's simulated world restated as level-1 tasks
  (`domains.retail.tiny_agent.level1_tasks`), training customers for GRPO, the held-out customers the
  manifest's figures were measured on for the score;
- GRPO runs through `training.grpo.run`, the code `python -m training.grpo` (the `grpo_candidate`
  asset's subprocess) runs, with `GRPORunConfig`'s defaults and the product's default reward:
  every term at its playbook weight (`RewardWeights`), no reward subset, no entropy bonus, no TRL
  override. Only the flags given below replace a `GRPORunConfig` default;
- the score is the product's evaluator as `bench/shipped_agent.py` runs it for the manifest
  (`measure`: `evaluation.rollout.run_rollouts` with `HFPolicy`, greedy, `calibration_report`'s
  turns, tokens and compact results), k trials per held-out customer with the same simulator seeds
  before and after, so every trial pairs up.

The paired 95% CI is over customers: each customer's success rate over its k trials after minus
before, a normal half-width of their mean (`task_ci95`). The manifest's expert-only SFT reference
and shipped figure are printed beside the two measurements, so what GRPO adds beyond SFT shows.

    OMP_NUM_THREADS=2 .venv/bin/python bench/learning.py [--steps N] [--lr X] [--threads 2]

With no flag it runs the product's default update (20 steps of `GRPORunConfig`). Runs and their
figures are in bench/results/learning.md. On the shipped agent of 2026-12-01 (0.33, a quarter of
its customers handed over for no reason) the defaults took held-out success to 0.60 (+0.27, paired
CI +-0.087) in 49 s on 2 cores: the hand-overs go, the copy errors stay. On the earlier, weaker
agent (0.12) they took it to 0.00: below ~25% success per attempt the default reward prefers a
hand-over to trying.

The last line printed is
`success_before=<x> success_after=<y> n=<tasks> seconds=<t> ci95=<half-width> reward=default`.

`--reward-weights '{"term": weight}'` is a diagnostic, not the benchmark: it reprices terms to test
a hypothesis about the default reward, and the last line then names the weights instead of
`reward=default`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import fields, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.shipped_agent import EVAL_SEED, TRIALS, measure, task_ci95  # noqa: E402
from domains.retail.tiny_agent import AgentRecipe, level1_tasks  # noqa: E402
from training.grpo_config import GRPORunConfig  # noqa: E402
from training.tiny.manifest import shipped_agent_path, verify_shipped  # noqa: E402

# Command-line flag -> the GRPORunConfig field it replaces; the default and help come from the field.
GRPO_FLAGS = {
    "steps": "max_steps",
    "lr": "learning_rate",
    "generations": "num_generations",
    "batch": "per_device_train_batch_size",
    "temperature": "temperature",
    "completion_length": "max_completion_length",
    "tool_calls": "max_tool_calling_iterations",
    "save_steps": "save_steps",
    "seed": "seed",
}
# What a reader compares before/after with: the manifest's figures of the shipped agent and of the
# expert-only SFT model it was built from (the same held-out customers, trials and seeds).
MANIFEST_FIGURES = ("expert_sft", "shipped")


class BenchError(ValueError):
    """A setting this bench cannot measure honestly (named in the message)."""


def manifest_tasks(manifest: dict, n_train: int | None, n_eval: int, work: Path) -> tuple[list[dict], list[dict]]:
    """(training tasks, held-out tasks) of the recipe the manifest records: the held-out customers
    come first in the same order, so the first `recipe.held_out_tasks` are the manifest's."""
    recipe = AgentRecipe()
    recorded = manifest["recipe"]
    differing = sorted(k for k, v in recipe.as_dict().items() if recorded.get(k) != v)
    if differing:
        raise BenchError(
            f"the manifest's recipe differs from AgentRecipe() in {differing}: its held-out customers "
            "are not the ones this code would simulate"
        )
    sized = replace(recipe, train_tasks=n_train or recipe.train_tasks, held_out_tasks=n_eval)
    return level1_tasks(work / "tasks", sized)


def grpo_config(args: argparse.Namespace, work: Path, base: Path, train: list[dict]) -> GRPORunConfig:
    """`GRPORunConfig`'s defaults with only the flags given replaced; the reward at its default
    unless `--reward-weights` reprices terms."""
    chosen = {field: getattr(args, flag) for flag, field in GRPO_FLAGS.items() if getattr(args, flag) is not None}
    return GRPORunConfig(
        model_path=str(base),
        output_dir=str(work / "grpo"),
        records=train,
        reward_weights=args.reward_weights,
        torch_threads=args.threads,
        **chosen,
    )


def reward_label(weights: dict[str, float]) -> str:
    return json.dumps(weights, separators=(",", ":"), sort_keys=True) if weights else "default"


def per_customer(figures: dict) -> list[float]:
    """Each customer's success rate over its k trials (`measure` keeps run_rollouts' (record,
    trial) order, so trials of one customer are consecutive)."""
    flags, k = figures["successes"], figures["k"]
    return [sum(flags[i : i + k]) / k for i in range(0, len(flags), k)]


def paired_difference(before: dict, after: dict) -> tuple[float, float]:
    """Mean over customers of (after - before) and its 95% half-width."""
    diffs = [a - b for a, b in zip(per_customer(after), per_customer(before), strict=True)]
    return sum(diffs) / len(diffs), task_ci95(diffs)


def side(figures: dict) -> dict:
    """The figures a results table reads, without the per-trial flags."""
    keep = ("success_rate", "ci95", "outcomes", "failure_mode_shares", "mean_reward", "seconds")
    return {key: figures[key] for key in keep if key in figures}


def training_signal(summary: dict) -> dict:
    """What the GRPO run itself says: did the sampled reward rise, and how often had a group no signal."""
    curve = summary.get("reward_curve") or []
    head, tail = curve[: max(len(curve) // 4, 1)], curve[-max(len(curve) // 4, 1) :]
    return {
        "steps": summary.get("final_step"),
        "seconds": summary.get("seconds"),
        "reward_first_quarter": sum(head) / len(head) if curve else None,
        "reward_last_quarter": sum(tail) / len(tail) if curve else None,
        "reward_curve": [round(r, 3) for r in curve],
        "zero_std_fraction": summary.get("zero_std_fraction"),
        "train_loss": summary.get("train_loss"),
    }


def _weights(text: str) -> dict[str, float]:
    weights = json.loads(text)
    if not isinstance(weights, dict):
        raise argparse.ArgumentTypeError(f"{text!r} is not a JSON object of term: weight")
    return weights


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = {f.name: f for f in fields(GRPORunConfig)}
    for flag, name in GRPO_FLAGS.items():
        spec = defaults[name]
        parser.add_argument(
            f"--{flag.replace('_', '-')}",
            type=type(spec.default),
            default=None,
            help=f"GRPORunConfig.{name}: {spec.metadata['help']} (default {spec.default})",
        )
    parser.add_argument(
        "--reward-weights",
        type=_weights,
        default={},
        help="diagnostic only: a JSON object of RewardWeights overrides (default: none, the product's reward)",
    )
    parser.add_argument("--train-tasks", type=int, default=None, help="training customers (default: the recipe's)")
    parser.add_argument("--eval-tasks", type=int, default=AgentRecipe().held_out_tasks, help="held-out customers")
    parser.add_argument("--trials", type=int, default=TRIALS, help="greedy trials per held-out customer")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (training and evaluation)")
    parser.add_argument("--workdir", type=Path, default=None, help="scratch folder (default: a new temporary one)")
    return parser.parse_args(argv)


def main() -> int:
    args = parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from training.grpo import run
    from training.reporting import JsonLinesReporter

    started = time.monotonic()
    load_at_start = os.getloadavg()
    work = args.workdir or Path(tempfile.mkdtemp(prefix="bench-learning-"))
    work.mkdir(parents=True, exist_ok=True)
    base = shipped_agent_path()
    manifest = verify_shipped(base)
    train, held = manifest_tasks(manifest, args.train_tasks, args.eval_tasks, work)
    overlap = {r["customer_id"] for r in train} & {r["customer_id"] for r in held}
    if overlap:
        raise BenchError(f"customers {sorted(overlap)[:3]} are both trained on and held out")
    t_tasks = time.monotonic() - started

    before = measure(base, held, trials=args.trials, seed=EVAL_SEED)
    print(json.dumps({"before": side(before), "seconds": round(time.monotonic() - started)}), flush=True)

    config = grpo_config(args, work, base, train)
    with open(work / "grpo.jsonl", "w") as log:
        summary = run(config, JsonLinesReporter(log)).to_dict()
    after = measure(Path(summary["model_path"]), held, trials=args.trials, seed=EVAL_SEED)
    difference, half = paired_difference(before, after)
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "manifest": {name: side(manifest["figures"][name]) for name in MANIFEST_FIGURES},
                "before": side(before),
                "after": side(after),
                "difference": difference,
                "ci95_half_width": half,
                "learned": difference >= 0.05 and difference > half,
                "grpo": training_signal(summary),
                "grpo_config": {k: v for k, v in config.to_dict().items() if k not in ("records", "output_dir")},
                "train_tasks": len(train),
                "seconds": {
                    "tasks": round(t_tasks),
                    "before": before["seconds"],
                    "grpo": summary.get("seconds"),
                    "after": after["seconds"],
                    "total": round(seconds),
                },
                # The cores are shared: the load average says how much of them this run had.
                "load_average": {"start": load_at_start, "end": os.getloadavg()},
                "workdir": str(work),
            }
        ),
        flush=True,
    )
    expert, shipped = (manifest["figures"][name]["success_rate"] for name in MANIFEST_FIGURES)
    print(
        f"expert SFT (manifest) {expert:.3f} | shipped (manifest) {shipped:.3f} | "
        f"before {before['success_rate']:.3f} | after GRPO {after['success_rate']:.3f} | "
        f"after - before {difference:+.3f} +- {half:.3f}"
    )
    print(
        f"success_before={before['success_rate']:.3f} success_after={after['success_rate']:.3f} "
        f"n={len(held)} seconds={seconds:.0f} ci95={half:.3f} reward={reward_label(config.reward_weights)}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
