"""Whether the weekly update moves an agent that serves the whole shop in part, week after week:
the supervised step on its own good episodes, then GRPO, both in the whole shop's form.

`--model` is an agent built with the recipe's shop stage (`bench/shop_stage.py --shop-only --work W`
leaves it in `W/shop8`): it asks who the customer is, does order status and cancellations with
level 1's six tools and hands everything else over. This bench runs `--weeks` weeks of the loop's
update on it, each from the last week's output, in the form the served shop has (curriculum
level 4: conversations as recorded, full tool results; `tool_list: level1`, the six tools it was
built with). Each week:

1. **Serve.** The week's model serves `--per-day` x 7 whole-shop conversations (a fresh draw each
   week: seed 21, 22, ...; 1,500 customers, the served traffic's defaults), which are ingested into
   a DuckDB store and read back, as the weekly job reads its window.
2. **Supervised step.** `training.episode_update.episode_update` with its defaults on the stored
   week (its verified successes of the training split; hand-overs a person finished need tools
   outside the six and do not replay).
3. **GRPO.** From the step's output, `--grpo-steps` steps of 4 training-split customers x 8
   rollouts at the product's learning rate, on the stored week's status and cancellation records,
   up to 10 tool calls and 1,536 tokens a rollout (a whole-shop conversation needs about seven calls).
4. **Measure.** The step's output and GRPO's output each serve the same 200 whole-shop
   conversations as the starting model did (`bench/shop_stage.py`'s day: seed 11), greedy, behind
   the PII gateway; each is compared with the week's starting model and GRPO's with the first,
   paired by conversation, with a 95% interval that resamples customers (the calibration gate's).

`--tool-list all` serves, steps, trains and measures with every tool listed (for an agent built with
`bench/shop_stage.py --tool-list all`): the supervised step then also imitates the hand-overs a
person resolved with tools outside the six, and GRPO draws every intent's records. `--grpo-steps 0`
stops each week after the supervised step; `--sft-steps` sets the step's length (the product's
20 by default) and `--sft-learning-rate` its peak rate (the product's 1e-4; the recipe's stages
teach a new copy at 1e-3). Each week prints its good episodes per intent, the agent's own and those a person
resolved. A second run with the same `--work` and `--model` (another `--sft-steps`, say) reads the
served week and the figures measured before back instead of serving them again.
`--without-resolutions` leaves the hand-overs out of the step: it imitates the agent's own
successes only; `--resolved-intents a,b` keeps only those intents' resolutions (one intent learnt
at a time, beside the agent's own successes).

    .venv/bin/python bench/shop_week.py --model DIR [--weeks 1] [--per-day 70] [--grpo-steps 20]
        [--sft-steps 20] [--sft-learning-rate 1e-4] [--without-resolutions] [--resolved-intents a,b]
        [--tool-list level1|all] [--beta 0.0] [--work DIR]

The last lines printed are `base=<k>/200 seconds=<t>`, then one a week: `week=<w>
served_week=<k>/<n> episodes=<n> stepped=<k>/200 step_vs_start=[...] grpo=<k>/200 grpo_reward_first=<x>
grpo_reward_last=<x> week_vs_start=[...] vs_base=[...]` (the GRPO figures only with GRPO steps). Before
it, `grpo by intent` gives each intent's mean trained reward and success share over GRPO's first
and last five steps (the trainer's per-intent tally).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections import Counter, defaultdict
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
from domains.retail.traffic.scenarios import DEFAULT_INTENT_MIX  # noqa: E402
from domains.retail.traffic.simulate import simulate  # noqa: E402
from evaluation.stats import cluster_bootstrap_ci  # noqa: E402
from orchestration.cli.demo import serving_policy  # noqa: E402
from training.curriculum import tools_for_levels  # noqa: E402
from training.episode_update import (  # noqa: E402
    EpisodeUpdateSettings,
    episode_update,
    gold_hands_over,
    good_episodes,
)
from training.grpo import run as run_grpo  # noqa: E402
from training.grpo_config import GRPORunConfig  # noqa: E402
from training.reporting import JsonLinesReporter  # noqa: E402

WEEK_SEED = 21
CUSTOMERS = 1500
LEVELS = {"4": 1.0}  # the conversations as recorded: the served shop's form
MODEL_NAME = "bench"


def stored_week(model: Path, per_day: int, work: Path, week: int, tool_list: str) -> list[dict]:
    """Week `week` (1, 2, ...) the model served on the whole shop, as the store gives it back. Each
    week is a fresh draw of conversations (seed WEEK_SEED + week - 1) from the same shop, as the
    demo's weeks are. A folder that holds the week already (a run again with the same `--work`,
    e.g. another `--sft-steps`) is read back, not served again: the draw and the model are the same."""
    if not list((work / "landing").glob("*/interactions.jsonl")):
        simulate(
            days=7,
            per_day=per_day,
            seed=WEEK_SEED + week - 1,
            out_dir=work / "landing",
            policy=serving_policy(str(model), level=None, tool_list=tool_list),
            n_users=CUSTOMERS,
            policy_version=f"{MODEL_NAME}/{week}",
        )
    db = work / "store.duckdb"
    ingest_paths(db, [work / "landing"])
    with open_store(db) as con:
        ids = [row[0] for row in con.execute("SELECT interaction_id FROM interactions ORDER BY 1").fetchall()]
        return load_records(con, ids)


def grpo(
    base: str, records: list[dict], steps: int, work: Path, tool_list: str, beta: float = 0.0
) -> tuple[str, list[float]]:
    """GRPO from `base` on the stored week's training-split records with gold: status and
    cancellations under level 1's six tools, every intent when every tool is offered."""
    intents = ("order_status", "cancel_order") if tool_list == "level1" else None
    train = [
        r
        for r in records
        if split_of(str(r["customer_id"])) == "train" and r.get("gold") and (intents is None or r["intent"] in intents)
    ]
    config = GRPORunConfig(
        model_path=base,
        output_dir=str(work / "grpo"),
        records=train,
        levels=LEVELS,
        tool_list=tool_list,
        max_steps=steps,
        save_steps=steps,
        dataset_size=4 * steps,
        num_generations=8,
        per_device_train_batch_size=32,
        max_tool_calling_iterations=10,
        max_completion_length=1536,
        torch_threads=2,
        beta=beta,
    )
    reporter = TallyingReporter()
    result = run_grpo(config, reporter)
    print(f"grpo by intent (first five steps -> last five): {reporter.by_intent()}", flush=True)
    return result.model_path, list(result.reward_curve)


class TallyingReporter(JsonLinesReporter):
    """GRPO's JSON lines on stdout, keeping each step's per-intent tally
    (`training.rewards.tally`) to summarise."""

    def __init__(self) -> None:
        super().__init__()
        self.steps: list[dict[str, float]] = []

    def metrics(self, step: int, values: dict[str, float]) -> None:
        super().metrics(step, values)
        self.steps.append({k: v for k, v in values.items() if k.startswith("by_intent/")})

    def by_intent(self) -> str:
        """Per intent, the mean reward and success share over the first and the last five steps."""

        def mean(steps: list[dict[str, float]], key: str) -> str:
            values = [s[key] for s in steps if key in s]
            return f"{sum(values) / len(values):+.2f}" if values else "-"

        intents = sorted({k.split("/")[1] for s in self.steps for k in s})
        first, last = self.steps[:5], self.steps[-5:]
        return "; ".join(
            f"{i} reward {mean(first, f'by_intent/{i}/reward')} -> {mean(last, f'by_intent/{i}/reward')}, "
            f"success {mean(first, f'by_intent/{i}/success')} -> {mean(last, f'by_intent/{i}/success')}"
            for i in intents
        )


def measured(model: Path, out: Path, tool_list: str) -> dict:
    """`shop_stage.served` on the bench's 200 conversations, read back from `out` when a run with
    the same `--work` (and `--model`) measured it already."""
    from shop_stage import served

    figures = out / "figures.json"
    if figures.exists():
        return json.loads(figures.read_text())
    result = served(model, 200, out, tool_list)
    figures.write_text(json.dumps(result))
    return result


def episode_intents(records: list[dict], tools: tuple[str, ...]) -> dict[str, dict[str, int]]:
    """The supervised step's episodes per intent: the agent's own successes (a hand-over the gold asks
    for among them), and the hand-overs a person completed (`training.episode_update.good_episodes`, as the step selects them)."""
    by_id = {r["interaction_id"]: r for r in records}
    counts: dict[str, Counter] = defaultdict(Counter)
    for episode in good_episodes(records, 4, tools, model_name=MODEL_NAME):
        record = by_id[episode["interaction_id"]]
        if not record.get("handoff"):
            kind = "the agent's own"
        else:  # a hand-over the gold asks for is the agent's own success; no resolution of it verifies
            kind = "the agent's own hand-over" if gold_hands_over(record) else "resolved by a person"
        counts[record["intent"]][kind] += 1
    return {intent: dict(c) for intent, c in sorted(counts.items())}


def paired(after: dict, before: dict) -> str:
    """`after` against `before` on the same served conversations: won/lost and the difference of
    completion rates with its 95% interval, resampling customers (the calibration gate's CI)."""
    ids = sorted(after["conversations"])
    if ids != sorted(before["conversations"]):
        raise ValueError("the two figures were not served on the same conversations")
    a = [after["conversations"][i][1] for i in ids]
    b = [before["conversations"][i][1] for i in ids]
    ci = cluster_bootstrap_ci(a, b, [after["conversations"][i][0] for i in ids])
    won = sum(x and not y for x, y in zip(a, b))
    lost = sum(y and not x for x, y in zip(a, b))
    return f"{won} won, {lost} lost: {ci.difference:+.3f} (95% CI {ci.low:+.3f}..{ci.high:+.3f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model", type=Path, required=True, help="a shop-stage agent (bench/shop_stage.py --shop-only)"
    )
    parser.add_argument("--per-day", type=int, default=70, help="whole-shop conversations served a day, for 7 days")
    parser.add_argument("--grpo-steps", type=int, default=20, help="0: the supervised step alone")
    parser.add_argument(
        "--sft-steps",
        type=int,
        default=EpisodeUpdateSettings.steps,
        help="optimizer steps of the supervised step (the product's default: episodes_steps)",
    )
    parser.add_argument(
        "--sft-learning-rate",
        type=float,
        default=EpisodeUpdateSettings.learning_rate,
        help="peak learning rate of the supervised step (the product's default: episodes_learning_rate)",
    )
    parser.add_argument(
        "--tool-list",
        choices=("level1", "all"),
        default="level1",
        help="the tools the agent was built with and serves, trains and is measured with",
    )
    parser.add_argument(
        "--without-resolutions",
        action="store_true",
        help="the supervised step imitates the agent's own successes only, not what a person finished",
    )
    parser.add_argument(
        "--resolved-intents",
        default="",
        help="comma-separated intents: the step keeps only these intents' resolved hand-overs (default: every one)",
    )
    parser.add_argument("--beta", type=float, default=0.0, help="GRPO's KL coefficient (the product's default 0)")
    parser.add_argument("--weeks", type=int, default=1, help="weeks in a row, each served by the last week's output")
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    if args.per_day < 1 or args.grpo_steps < 0 or args.weeks < 1 or args.sft_steps < 1:
        parser.error("--per-day, --weeks and --sft-steps must be at least 1, --grpo-steps at least 0")
    if not args.sft_learning_rate > 0:
        parser.error("--sft-learning-rate must be above 0")
    focus = [i for i in args.resolved_intents.split(",") if i]
    if unknown := sorted(set(focus) - set(DEFAULT_INTENT_MIX)):
        parser.error(f"--resolved-intents: {', '.join(unknown)} not among {', '.join(sorted(DEFAULT_INTENT_MIX))}")
    import torch
    from shop_stage import without_conversations

    torch.set_num_threads(2)
    work = args.work or Path(tempfile.mkdtemp(prefix="shop-week-"))
    started = time.monotonic()
    lines = []
    # One key for the gateway that serves and the ingestion that stores, as in a deployment.
    with using_pii_key(AgentRecipe().pii_key):
        base = measured(args.model, work / "served-base", args.tool_list)
        print(f"base: {base['completed']}/{base['n']} {json.dumps(without_conversations(base))}", flush=True)
        current, last = args.model, base
        for week in range(1, args.weeks + 1):
            folder = work / f"week{week}"
            records = stored_week(current, args.per_day, folder / "served", week, args.tool_list)
            completed = sum(r["outcome"] == "completed" for r in records)
            print(f"week {week}: served {completed}/{len(records)} completed", flush=True)
            tools = tools_for_levels(LEVELS, "retail", args.tool_list)
            print(f"week {week}: good episodes by intent {episode_intents(records, tools)}", flush=True)
            default_rate = args.sft_learning_rate == EpisodeUpdateSettings.learning_rate
            arm = (
                f"{args.sft_steps}{'' if default_rate else f'-lr{args.sft_learning_rate:g}'}"
                f"{'-own' if args.without_resolutions else ''}{''.join(f'-{i}' for i in focus)}"
            )
            # What is left out is people's resolutions; a hand-over the gold asks for stays (the
            # agent's own success, `training.episode_update.gold_hands_over`).
            kept = [
                r
                for r in records
                if not r.get("handoff")
                or gold_hands_over(r)
                or not (args.without_resolutions or (focus and r["intent"] not in focus))
            ]
            step = episode_update(
                current,
                kept,
                folder / f"episodes-{arm}",
                EpisodeUpdateSettings(steps=args.sft_steps, learning_rate=args.sft_learning_rate),
                level=4,
                tools=tools,
                seed=week,
                torch_threads=2,
                model_name=MODEL_NAME,
            )
            print(f"week {week}: supervised step {step.to_dict()}", flush=True)
            stepped = measured(Path(step.model_path), folder / f"measured-stepped-{arm}", args.tool_list)
            print(f"week {week}: stepped {json.dumps(without_conversations(stepped))}", flush=True)
            line = (
                f"week={week} served_week={completed}/{len(records)} episodes={step.episodes} "
                f"stepped={stepped['completed']}/200 step_vs_start=[{paired(stepped, last)}]"
            )
            trained, after = Path(step.model_path), stepped
            if args.grpo_steps:
                path, curve = grpo(
                    step.model_path,
                    records,
                    args.grpo_steps,
                    folder / f"after-{arm}",
                    args.tool_list,
                    args.beta,
                )
                print(f"week {week}: grpo rewards {[round(r, 3) for r in curve]}", flush=True)
                trained, after = Path(path), measured(Path(path), folder / f"measured-{arm}", args.tool_list)
                print(f"week {week}: {json.dumps(without_conversations(after))}", flush=True)
                line += (
                    f" grpo={after['completed']}/200 grpo_reward_first={curve[0]:.3f} "
                    f"grpo_reward_last={curve[-1]:.3f} week_vs_start=[{paired(after, last)}]"
                )
            line += f" vs_base=[{paired(after, base)}]"
            print(line, flush=True)
            lines.append(line)
            current, last = trained, after
    print(f"base={base['completed']}/200 seconds={time.monotonic() - started:.0f}")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
