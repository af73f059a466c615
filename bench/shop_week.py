"""Whether the weekly update moves an agent that serves the whole shop in part: the supervised step
on its own good episodes, then GRPO, both in the whole shop's form.

`--model` is an agent built with the recipe's shop stage (`bench/shop_stage.py --shop-only --work W`
leaves it in `W/shop8`): it asks who the customer is, does order status and cancellations with
level 1's six tools and hands everything else over. This bench runs one week of the loop's update
on it, in the form the served shop has (curriculum level 4: conversations as recorded, full tool
results; `tool_list: level1`, the six tools it was built with):

1. **Serve.** The model serves `--per-day` x 7 whole-shop conversations (seed 21, 1,500 customers,
   the served traffic's defaults), which are ingested into a DuckDB store and read back, as the
   weekly job reads its window.
2. **Supervised step.** `training.episode_update.episode_update` with its defaults on the stored
   week (its verified successes of the training split; hand-overs a person finished need tools
   outside the six and do not replay).
3. **GRPO.** From the step's output, `--grpo-steps` steps of 4 training-split customers x 8
   rollouts at the product's learning rate, on the stored week's status and cancellation records,
   up to 10 tool calls and 1,536 tokens a rollout (a whole-shop conversation needs about seven calls).
4. **Measure.** The model, the step's output and GRPO's output each serve the same 200 whole-shop
   conversations (`bench/shop_stage.py`'s day: seed 11), greedy, behind the PII gateway.

    .venv/bin/python bench/shop_week.py --model DIR [--per-day 70] [--grpo-steps 20] [--work DIR]

The last line printed is `episodes=<n> served_week=<k>/<n> base=<k>/200 stepped=<k>/200
grpo=<k>/200 grpo_reward_first=<x> grpo_reward_last=<x> seconds=<t>`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # appended: bench/ must not shadow the product's packages
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from dataplane.ingest import ingest_paths  # noqa: E402
from dataplane.scrub import using_pii_key  # noqa: E402
from dataplane.splits import split_of  # noqa: E402
from dataplane.store import load_records, open_store  # noqa: E402
from domains.retail.tiny_agent import AgentRecipe  # noqa: E402
from domains.retail.traffic.simulate import simulate  # noqa: E402
from orchestration.cli.demo import serving_policy  # noqa: E402
from training.curriculum import tools_for_levels  # noqa: E402
from training.episode_update import EpisodeUpdateSettings, episode_update  # noqa: E402
from training.grpo import run as run_grpo  # noqa: E402
from training.grpo_config import GRPORunConfig  # noqa: E402

WEEK_SEED = 21
CUSTOMERS = 1500
LEVELS = {"4": 1.0}  # the conversations as recorded: the served shop's form
TOOL_LIST = "level1"  # the six tools the shop agent was built with, at every level
MODEL_NAME = "bench"


def stored_week(model: Path, per_day: int, work: Path) -> list[dict]:
    """A week the model served on the whole shop, as the store gives it back."""
    simulate(
        days=7,
        per_day=per_day,
        seed=WEEK_SEED,
        out_dir=work / "landing",
        policy=serving_policy(str(model), level=None, tool_list=TOOL_LIST),
        n_users=CUSTOMERS,
        policy_version=f"{MODEL_NAME}/1",
    )
    db = work / "store.duckdb"
    ingest_paths(db, [work / "landing"])
    with open_store(db) as con:
        ids = [row[0] for row in con.execute("SELECT interaction_id FROM interactions ORDER BY 1").fetchall()]
        return load_records(con, ids)


def grpo(base: str, records: list[dict], steps: int, work: Path) -> tuple[str, list[float]]:
    train = [
        r
        for r in records
        if split_of(str(r["customer_id"])) == "train"
        and r.get("gold")
        and r["intent"] in ("order_status", "cancel_order")
    ]
    config = GRPORunConfig(
        model_path=base,
        output_dir=str(work / "grpo"),
        records=train,
        levels=LEVELS,
        tool_list=TOOL_LIST,
        max_steps=steps,
        save_steps=steps,
        dataset_size=4 * steps,
        num_generations=8,
        per_device_train_batch_size=32,
        max_tool_calling_iterations=10,
        max_completion_length=1536,
        torch_threads=2,
    )
    result = run_grpo(config)
    return result.model_path, list(result.reward_curve)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, required=True, help="a shop-stage agent (bench/shop_stage.py --shop-only)"
    )
    parser.add_argument("--per-day", type=int, default=70, help="whole-shop conversations served a day, for 7 days")
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    if args.per_day < 1 or args.grpo_steps < 1:
        parser.error("--per-day and --grpo-steps must be at least 1")
    import torch
    from shop_stage import served

    torch.set_num_threads(2)
    work = args.work or Path(tempfile.mkdtemp(prefix="shop-week-"))
    started = time.monotonic()
    # One key for the gateway that serves and the ingestion that stores, as in a deployment.
    with using_pii_key(AgentRecipe().pii_key):
        records = stored_week(args.model, args.per_day, work / "week")
        completed = sum(r["outcome"] == "completed" for r in records)
        print(f"served week: {completed}/{len(records)} completed", flush=True)
        step = episode_update(
            args.model,
            records,
            work / "episodes",
            EpisodeUpdateSettings(),
            level=4,
            tools=tools_for_levels(LEVELS, "retail", TOOL_LIST),
            seed=1,
            torch_threads=2,
            model_name=MODEL_NAME,
        )
        print(f"supervised step: {step.to_dict()}", flush=True)
        trained, curve = grpo(step.model_path, records, args.grpo_steps, work)
        print(f"grpo rewards: {curve}", flush=True)
        figures = {
            name: served(Path(path), 200, work / f"served-{name}")
            for name, path in (("base", args.model), ("stepped", step.model_path), ("grpo", trained))
        }
    print(json.dumps(figures, indent=1))
    print(
        f"episodes={step.episodes} served_week={completed}/{len(records)} "
        + " ".join(f"{name}={f['completed']}/{f['n']}" for name, f in figures.items())
        + f" grpo_reward_first={curve[0]:.3f} grpo_reward_last={curve[-1]:.3f} seconds={time.monotonic() - started:.0f}"
    )


if __name__ == "__main__":
    main()
