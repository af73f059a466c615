"""The weekly supervised step on the shipped agent's own good episodes: its cost and what it does.

The shipped agent (`models/retail-agent-tiny`) serves level-1 training customers of the recipe's
world (`domains.retail.tiny_agent.level1_tasks`, a smaller day of traffic); its conversations that
verify are the week's good episodes, and `training.episode_update.episode_update` runs with its
defaults (the ones `grpo_candidate` uses). Both models are then evaluated greedily on the recipe's
held-out customers with the product's evaluator, on the same trials. The last line printed is
`episodes=<n> served=<n> sft_seconds=<s> base=<x> stepped=<y> held_out=<n>`.

    .venv/bin/python bench/episode_update.py [--serve 160] [--held-out 100] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from domains.retail.tiny_agent import AgentRecipe, level1_tasks, level1_tools  # noqa: E402
from evaluation.metrics import success_rate  # noqa: E402
from evaluation.rollout import run_rollouts  # noqa: E402
from training.episode_update import EpisodeUpdateSettings, episode_update  # noqa: E402
from training.policies import HFPolicy  # noqa: E402
from training.sandbox.rollout import SERVING_MAX_TURNS  # noqa: E402
from training.tiny.manifest import SHIPPED_AGENT_DIR  # noqa: E402


def _rollouts(model: str, tasks: list[dict], seed: int):
    tools = level1_tools()
    policy = HFPolicy(model, max_new_tokens=128, tools=tools, domain="retail")
    return run_rollouts(policy, tasks, k=1, seed=seed, max_turns=SERVING_MAX_TURNS, compact=True, tools=tools)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve", type=int, default=160, help="training customers the agent serves")
    parser.add_argument("--held-out", type=int, default=100, help="held-out customers both models are judged on")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="episode-update-"))
    # A third of the recipe's traffic still restates as more than 300 training customers.
    train, held = level1_tasks(work, replace(AgentRecipe(), traffic=3000, train_tasks=300))
    served = _rollouts(str(SHIPPED_AGENT_DIR), train[: args.serve], seed=1)
    by_id = {str(t["interaction_id"]): t for t in train}
    records = [{**by_id[t.record_id], "messages": t.messages} for t in served]
    started = time.monotonic()
    update = episode_update(
        SHIPPED_AGENT_DIR,
        records,
        work / "stepped",
        EpisodeUpdateSettings(source="any"),  # every record here is the shipped agent's own
        1,
        level1_tools(),
        torch_threads=args.threads,
    )
    seconds = round(time.monotonic() - started, 1)
    base = success_rate(_rollouts(str(SHIPPED_AGENT_DIR), held[: args.held_out], seed=2))
    stepped = success_rate(_rollouts(update.model_path, held[: args.held_out], seed=2))
    print(
        f"episodes={update.episodes} served={len(served)} sft_seconds={seconds} "
        f"base={base:.3f} stepped={stepped:.3f} held_out={min(args.held_out, len(held))}"
    )


if __name__ == "__main__":
    main()
