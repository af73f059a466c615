"""Whether the week's supervised step teaches an intent the agent hands over: people's resolutions as recorded vs restated.

The weekly update's supervised step (`training.episode_update`) imitates, besides the agent's own
verified successes, what a person finished after the agent handed the conversation over
(`training.traffic.handoff.resolved_demonstration`): "this is how an intent the agent hands over
this week becomes one it handles next week". This bench measures that on the tiny agent:

1. **Plant.** The shipped agent (`models/retail-agent-tiny`) is fine-tuned to hand every
   cancellation over (`level1_demonstration(escalate=True)` for cancellations, the expert's for
   status questions; the recipe's training customers; `--plant-steps` at lr 1e-4 with the tool name
   weighted as the recipe's decision stage): an agent that is not yet trusted with writes.
2. **Serve.** That agent serves `--conversations` level-1 conversations of a fresh shop (greedy,
   behind the PII gateway, as the demo serves); the simulated desk finishes every hand-over
   (`GoldReplayHuman` for retail: greets, proposes the change, makes it, closes).
3. **Step, two ways, from the planted agent**, with the step's own settings
   (`episode_update.step_settings`, `EpisodeUpdateSettings` defaults):
   - *as recorded*: each completed hand-over as one conversation with the desk's turns as the
     assistant's (`resolved_demonstration`), what the step imitated before it restated them (since
     2026-12-07 without the desk's greeting, and the desk reads, asks for the change's details and
     words it as the shop's agent does; `bench/results/learning.md` was measured before that);
   - *restated*: `episode_update` on the served records, as the weekly run calls it now: at level
     1 a completed hand-over is the level-1 demonstration of its task (the calls the person made,
     in the form the agent was built with; `episode_update._in_level_form`).
4. **Measure** the planted agent and both steps on the recipe's held-out customers (greedy, one
   trial each, `bench/shipped_agent.measure`), per intent.

    .venv/bin/python bench/handover_learning.py [--plant-steps 100] [--conversations 300] [--work DIR]

The last line printed is `planted=<s> recorded=<s> restated=<s> recorded_loss=<l> restated_loss=<l>
cancel_planted=<a>/<n> cancel_recorded=<a>/<n> cancel_restated=<a>/<n>` (success rates on the
held-out customers; the step's train loss).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from shipped_agent import held_out, measure  # noqa: E402

from dataplane.pii_records import scrub_record  # noqa: E402
from dataplane.scrub import using_pii_key  # noqa: E402
from domains.retail.level1 import level1_demonstration  # noqa: E402
from domains.retail.tiny_agent import AgentRecipe, level1_tasks, level1_tools  # noqa: E402
from orchestration.cli.demo import serving_policy  # noqa: E402
from training.episode_update import (  # noqa: E402
    EpisodeUpdateSettings,
    episode_update,
    good_episodes,
    step_settings,
)
from training.sft import SFTSettings, warm_start  # noqa: E402
from training.tiny.manifest import shipped_agent_path  # noqa: E402
from training.traffic.handoff import resolved_demonstration  # noqa: E402
from training.traffic.simulate import simulate  # noqa: E402

HANDED_OVER = "cancel_order"
MODEL = "bench-agent"


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def plant(work: Path, recipe: AgentRecipe, steps: int, threads: int) -> Path:
    train, _ = level1_tasks(work / "tasks", recipe)
    demos = [level1_demonstration(task, escalate=task["intent"] == HANDED_OVER) for task in train]
    settings = SFTSettings(
        steps=steps,
        batch_size=recipe.sft_batch,
        learning_rate=recipe.decision_lr,
        tool_name_weight=recipe.tool_name_weight,
        tools=level1_tools(),
        relabel=True,
        verified_only=False,
        lr_scheduler_type="constant",
        torch_threads=threads,
        seed=1,
    )
    done = warm_start(shipped_agent_path(), demos, work / "planted", settings)
    say(f"planted: {steps} steps, train loss {done['train_loss']:.3f}")
    return work / "planted"


def served_records(model: Path, work: Path, recipe: AgentRecipe, conversations: int) -> list[dict]:
    days = 2
    summary = simulate(
        days=days,
        per_day=-(-conversations // days),
        seed=11,
        out_dir=str(work / "served"),
        start=date(2026, 11, 2),
        policy=serving_policy(str(model)),
        level=1,
        policy_version=f"{MODEL}/1",
        n_users=1500,
    )
    records = [
        scrub_record(json.loads(line))
        for path in summary["files"]
        for line in Path(path).read_text().splitlines()
        if line
    ]
    say(f"served {len(records)} conversations: {summary['outcomes']}")
    return records


def as_recorded(records: list[dict]) -> list[dict]:
    """The records with each completed hand-over as one conversation, the desk's turns as the
    assistant's (`resolved_demonstration`) and no `handoff`: what the step imitated before it
    restated resolutions at level 1."""
    out = []
    for record in records:
        taught = resolved_demonstration(record) if record.get("handoff") else None
        if record.get("handoff") and taught is None:
            continue
        if taught is not None:
            record = {**{k: v for k, v in record.items() if k != "handoff"}, "messages": taught}
        out.append(record)
    return out


def by_intent(figures: dict, held: list[dict], intent: str) -> str:
    wins, seen = Counter(), Counter()
    for task, ok in zip(held, figures["successes"]):
        seen[task["intent"]] += 1
        wins[task["intent"]] += ok
    return f"{wins[intent]}/{seen[intent]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plant-steps", type=int, default=100)
    parser.add_argument("--conversations", type=int, default=300)
    parser.add_argument("--work", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    recipe = AgentRecipe()
    work = args.work or Path(tempfile.mkdtemp(prefix="handover-learning-"))
    tools = level1_tools()
    with using_pii_key(recipe.pii_key):
        planted = plant(work, recipe, args.plant_steps, args.threads)
        records = served_records(planted, work, recipe, args.conversations)
        settings = EpisodeUpdateSettings()
        product = episode_update(
            planted,
            records,
            work / "restated",
            settings,
            level=1,
            tools=tools,
            torch_threads=args.threads,
            log=say,
            model_name=MODEL,
        )
        episodes = good_episodes(as_recorded(records), 1, tools, model_name=MODEL)
        say(f"as recorded: {len(episodes)} episodes (restated: {product.episodes})")
        done = warm_start(planted, episodes, work / "recorded", step_settings(settings, 1, tools, 0, args.threads))
        held = held_out(work, recipe)
        figures = {name: measure(work / name, held, trials=1) for name in ("planted", "recorded", "restated")}
    for name, fig in figures.items():
        say(
            f"{name}: success {fig['success_rate']:.3f}, outcomes {fig['outcomes']}, "
            f"cancellations {by_intent(fig, held, HANDED_OVER)}, status {by_intent(fig, held, 'order_status')}"
        )
    print(
        f"planted={figures['planted']['success_rate']:.3f} recorded={figures['recorded']['success_rate']:.3f} "
        f"restated={figures['restated']['success_rate']:.3f} recorded_loss={done['train_loss']:.3f} "
        f"restated_loss={product.train_loss:.3f} "
        + " ".join(f"cancel_{name}={by_intent(fig, held, HANDED_OVER)}" for name, fig in figures.items())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
