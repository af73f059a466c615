"""Does GRPO teach the tiny policy anything? Verified success before and after, on held-out customers.

Builds the tiny policy offline, SFT-warm-starts it on verified level-1 trajectories of training
customers, measures greedy verified success on level-1 tasks of customers it never saw (fixed
simulator seeds), runs GRPO (`training.grpo.run`, the production entry point's code path), measures
again on the same tasks with the same seeds, and reports the paired difference with a 95% normal
confidence interval. The measuring loop is written here on the environment itself (training must
not import evaluation; this script keeps to the same rule so it measures what training sees).

    .venv/bin/python bench/learning.py [--seed 0] [--threads 2]

Its defaults are the recipe that learns from a freshly built model in under 20 minutes
(bench/results/learning.md, runs E14-E16): E14, alone on the 2 cores, printed
`success_before=0.000 success_after=0.440 n=100 seconds=1126` (paired 95% CI +-0.098). Spelled
out:

    .venv/bin/python bench/learning.py --train-tasks 1500 --eval-tasks 100 --copy-steps 1000 \
        --sft-steps 300 --sft-stages 4 --habit-steps 100 --escalation-share 0.8 --no-measure-stages \
        --sft-lr 1e-3 --sft-schedule constant --relabel --grpo-steps 20 --generations 8 --batch 32 \
        --lr 1e-4 --temperature 1.0 --rewards completed,escalated_unnecessary --hidden 128 --threads 2

--relabel trains SFT on relabelled copies (training.tiny.relabel): fresh identifiers in every example,
so they can only be copied. Copy pretraining must run long enough to start copying (1,000 steps:
its loss fell to 2.9); with 500 steps, which identifier SFT learns to copy was a lottery.

With --habit-steps the warm start is SFT on expert conversations (to learn the calls and to copy
identifiers), then on a log in which an over-cautious agent hands --escalation-share of the
customers to a human after reading their order; GRPO is measured on unlearning that habit.

The last line printed is `success_before=<x> success_after=<y> n=<tasks> seconds=<t>`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def level1_tasks(
    work: Path, n_train: int, n_eval: int, seed: int = 3, n_users: int = 600, by_name_zip: bool = True
) -> tuple[list, list]:
    """Level-1 tasks through the product path: simulated contract traffic on a generated world,
    customers split by `dataplane.splits.split_of` (held-out = customers outside the train split),
    each verified record restated by `training.tiny.level1.as_level1`. `by_name_zip` keeps the tasks whose
    customer identifies by name and zip (short identifiers a tiny policy can copy)."""
    from dataplane.splits import split_of
    from training.tiny.level1 import as_level1
    from training.traffic.simulate import simulate

    summary = simulate(
        days=1,
        per_day=5 * (n_train + n_eval),
        seed=seed,
        out_dir=work / "landing",
        intent_mix={"order_status": 0.5, "cancel_order": 0.5},
        verified_share=1.0,
        n_users=n_users,
    )
    records = [json.loads(line) for f in summary["files"] for line in Path(f).read_text().splitlines() if line]
    train, held, seen = [], [], set()
    for record in records:
        task = as_level1(record)
        key = (record["customer_id"], task and task["user_scenario"]["known_info"]["order_ids"][0])
        if task is None or key in seen or (by_name_zip and "zip code" not in task["messages"][1]["content"]):
            continue
        seen.add(key)
        bucket = train if split_of(record["customer_id"]) == "train" else held
        bucket.append(task)
    return train[:n_train], held[:n_eval]


def greedy_outcomes(
    model_path: Path,
    records: list[dict],
    seeds: list[int],
    max_turns: int = 6,
    max_new_tokens: int = 72,
    batch: int = 16,
    tool_names: tuple[str, ...] | None = None,
) -> list[str]:
    """The outcome per task ("completed" = verified success, "escalated", "failed"): batched greedy
    decoding, tool calls run in the environment offering `tool_names` (None: every tool), the same
    list the prompt shows."""
    import torch

    from training.checkpoints import load_policy
    from training.rewards import outcome_of
    from training.sandbox.environment import call_tool, environment_class
    from training.sandbox.prompting import initial_messages, parse_tool_calls, tool_schemas

    model, tokenizer = load_policy(model_path)
    model.eval()
    tokenizer.padding_side = "left"
    tools = list(tool_schemas(tool_names))
    end_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    envs, conversations = [], []
    for record, seed in zip(records, seeds):
        env = environment_class(tool_names)()
        env.reset(
            initial_state=record["initial_state"],
            user_scenario=record["user_scenario"],
            gold=record["gold"],
            seed=seed,
            compact=True,
        )
        envs.append(env)
        conversations.append(initial_messages(record, seed=seed))
    live = list(range(len(records)))
    for _ in range(max_turns):
        if not live:
            break
        still = []
        for start in range(0, len(live), batch):
            chunk = live[start : start + batch]
            texts = [
                tokenizer.apply_chat_template(conversations[i], tools=tools, add_generation_prompt=True, tokenize=False)
                for i in chunk
            ]
            inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
            with torch.no_grad():
                out = model.generate(
                    **inputs,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    eos_token_id=end_id,
                    pad_token_id=tokenizer.pad_token_id,
                )
            for row, i in enumerate(chunk):
                # Not skip_special_tokens: this tokenizer registers <tool_call> as special, and
                # skipping it would turn every call into plain text that ends the conversation.
                text = tokenizer.decode(out[row][inputs["input_ids"].shape[1] :], skip_special_tokens=False)
                text = text.split("<|im_end|>")[0].replace(tokenizer.pad_token, "")
                content, calls = parse_tool_calls(text)
                message = {"role": "assistant", "content": content}
                if calls:
                    message["tool_calls"] = [{"type": "function", "function": c} for c in calls]
                conversations[i].append(message)
                for call in calls:
                    result = call_tool(envs[i], call["name"], call["arguments"])
                    conversations[i].append({"role": "tool", "name": call["name"], "content": result})
                if calls and not envs[i].done:
                    still.append(i)
        live = still
    return [outcome_of(env.episode) for env in envs]


def outcome_mix(records: list[dict], outcomes: list[str]) -> dict[str, int]:
    """How many tasks of each intent ended in each outcome, e.g. {"cancel_order/escalated": 12}."""
    mix: dict[str, int] = {}
    for record, outcome in zip(records, outcomes):
        key = f"{record['intent']}/{outcome}"
        mix[key] = mix.get(key, 0) + 1
    return dict(sorted(mix.items()))


def paired_ci(before: list[int], after: list[int]) -> tuple[float, float]:
    """Mean paired difference and its 95% normal-approximation half-width."""
    diffs = [a - b for a, b in zip(after, before)]
    n = len(diffs)
    mean = sum(diffs) / n
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return mean, 1.96 * math.sqrt(var / n)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train-tasks", type=int, default=1500)
    parser.add_argument("--eval-tasks", type=int, default=100)
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--sft-batch", type=int, default=16)
    parser.add_argument("--sft-only", action="store_true", help="stop after measuring the SFT policy")
    parser.add_argument("--sft-lr", type=float, default=1e-3)
    parser.add_argument("--sft-schedule", default="constant", help="lr schedule of SFT (cosine, constant, ...)")
    parser.add_argument(
        "--sft-stages",
        type=int,
        default=4,
        help="SFT this many times for --sft-steps each, measuring greedy success after each "
        "(0 with no --habit-steps: measure --base as it is)",
    )
    parser.add_argument(
        "--measure-stages",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="measure greedy success after every SFT phase (--no-measure-stages: after the last only)",
    )
    parser.add_argument(
        "--copy-steps", type=int, default=1000, help="copy-pretraining steps (training.tiny.pretrain) before SFT"
    )
    parser.add_argument("--copy-lr", type=float, default=1e-3)
    parser.add_argument(
        "--copy-digits",
        type=float,
        default=0.0,
        help="share of copy-pretraining spans that are digit runs among other digit runs",
    )
    parser.add_argument(
        "--escalation-share",
        type=float,
        default=0.8,
        help="share of the warm start's demonstrations that hand the customer to a human after "
        "reading the order (an over-cautious logged agent; SFT then clones the log unverified)",
    )
    parser.add_argument(
        "--habit-steps",
        type=int,
        default=100,
        help="after the expert SFT stages, this many SFT steps on the logged conversations "
        "(--escalation-share of them hand over)",
    )
    parser.add_argument(
        "--relabel",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="SFT on relabelled copies (training.tiny.relabel): fresh identifiers in every example",
    )
    parser.add_argument("--base", default=None, help="start from this model folder instead of building one")
    parser.add_argument(
        "--all-tools",
        action="store_true",
        help="offer every tool (default: level 1's own tool list, as the pipeline does)",
    )
    parser.add_argument("--grpo-steps", type=int, default=20)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument(
        "--rewards",
        default="completed,escalated_unnecessary",
        help="comma-separated reward terms for GRPO (an empty string: every term in REWARD_TERMS)",
    )
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seeds the model's initial weights, copy pretraining, SFT and GRPO (the held-out tasks "
        "and their simulator seeds stay the same)",
    )
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()

    import torch

    from training.grpo import run
    from training.grpo_config import GRPORunConfig
    from training.reporting import JsonLinesReporter
    from training.sft import SFTSettings, warm_start
    from training.tiny.bootstrap import TinyModelSpec, build_tiny_policy

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench-learning-"))
    train, held = level1_tasks(work, args.train_tasks, args.eval_tasks)
    assert not {r["customer_id"] for r in train} & {r["customer_id"] for r in held}
    seeds = [1000 + i for i in range(len(held))]

    spec = TinyModelSpec(
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 3,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        seed=args.seed,
    )
    from training.tiny.level1 import level1_demonstration

    # Conversations of training customers: the expert's, and (--escalation-share) those an
    # over-cautious production agent logged: a fixed, seeded draw per task hands over instead.
    draw = random.Random(7)
    expert = [level1_demonstration(task) for task in train]
    logged = [level1_demonstration(task, escalate=draw.random() < args.escalation_share) for task in train]
    from training.curriculum import tools_for_levels

    tool_names = None if args.all_tools else tools_for_levels({"1": 1.0})
    base = Path(args.base) if args.base else build_tiny_policy(work / "base", expert, spec)
    if args.copy_steps:
        from training.tiny.pretrain import CopySettings, copy_pretrain

        copied = copy_pretrain(
            base,
            work / "copy",
            CopySettings(
                steps=args.copy_steps,
                learning_rate=args.copy_lr,
                digit_share=args.copy_digits,
                seed=args.seed,
                torch_threads=args.threads,
            ),
        )
        print(json.dumps({"copy": copied, "copy_seconds": round(time.monotonic() - started)}), flush=True)
        base = work / "copy"
    settings = SFTSettings(
        steps=args.sft_steps,
        batch_size=args.sft_batch,
        learning_rate=args.sft_lr,
        torch_threads=args.threads,
        tools=tool_names,
        lr_scheduler_type=args.sft_schedule,
        relabel=args.relabel,
    )
    # SFT phases, each continuing from the last one's weights and measured after: --sft-stages on
    # the expert's conversations (on the log when there is no --habit-steps phase), then
    # --habit-steps on the log. The log is cloned as it is (its hand-overs do not verify).
    phases = [("sft", expert if args.habit_steps else logged, args.sft_steps)] * args.sft_stages
    if args.habit_steps:
        phases.append(("habit", logged, args.habit_steps))
    start_from, sft, steps_done = base, {"skipped": True, "model_path": str(base)}, 0
    t_sft = time.monotonic() - started
    outcomes_before = [] if phases else greedy_outcomes(start_from, held, seeds, tool_names=tool_names)
    for number, (name, demos, steps) in enumerate(phases, start=1):
        cloned_log = demos is logged and args.escalation_share > 0
        sft = warm_start(
            start_from,
            demos,
            work / f"{name}{number}",
            replace(settings, steps=steps, verified_only=not cloned_log, seed=number + 1000 * args.seed),
        )
        start_from, steps_done = work / f"{name}{number}", steps_done + steps
        t_sft = time.monotonic() - started
        measured = {}
        if args.measure_stages or number == len(phases):
            outcomes_before = greedy_outcomes(start_from, held, seeds, tool_names=tool_names)
            measured = {
                "outcomes": outcome_mix(held, outcomes_before),
                "success": sum(o == "completed" for o in outcomes_before) / len(held),
            }
        print(
            json.dumps(
                {
                    "phase": f"{name}{number}",
                    "sft_steps_total": steps_done,
                    "sft": sft,
                    "seconds": round(time.monotonic() - started),
                    **measured,
                }
            ),
            flush=True,
        )
    t_before = time.monotonic() - started
    before = [int(o == "completed") for o in outcomes_before]
    if args.sft_only:
        return 0
    log = open(work / "grpo.jsonl", "w")  # noqa: SIM115 - the trainer writes to it for the whole run
    config = GRPORunConfig(
        model_path=str(start_from),
        output_dir=str(work / "grpo"),
        records=train,
        max_steps=args.grpo_steps,
        num_generations=args.generations,
        per_device_train_batch_size=args.batch,
        max_completion_length=448,
        learning_rate=args.lr,
        beta=0.0,
        temperature=args.temperature,
        max_tool_calling_iterations=6,
        save_steps=max(args.grpo_steps, 1),
        seed=args.seed,
        torch_threads=args.threads,
        reward_names=args.rewards.split(",") if args.rewards else None,
    )
    summary = run(config, JsonLinesReporter(log))
    t_grpo = time.monotonic() - started
    outcomes_after = greedy_outcomes(Path(summary["model_path"]), held, seeds, tool_names=tool_names)
    after = [int(o == "completed") for o in outcomes_after]
    mean, half = paired_ci(before, after)
    seconds = time.monotonic() - started
    print(
        json.dumps(
            {
                "sft": sft,
                "before": before,
                "after": after,
                "outcomes_before": outcome_mix(held, outcomes_before),
                "outcomes_after": outcome_mix(held, outcomes_after),
                "sft_seconds": round(t_sft),
                "eval_before_seconds": round(t_before - t_sft),
                "grpo_seconds": round(t_grpo - t_before),
                "final_reward": summary["metrics"].get("reward"),
                "difference": mean,
                "ci95_half_width": half,
                "learned": mean > half,
                "workdir": str(work),
                "args": vars(args),
            }
        )
    )
    print(
        f"success_before={sum(before) / len(before):.3f} success_after={sum(after) / len(after):.3f} "
        f"n={len(held)} seconds={seconds:.0f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
