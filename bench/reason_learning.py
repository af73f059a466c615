"""Whether supervision can teach the shipped tiny agent to read the cancel reason: the second half
of why the demo does not climb (`bench/reason_reading.py` is the first: served, it does not read it).

In the tiny tokenizer the rest of a cancel call after the order id is one token per reason
(`", "reason": "no longer needed"}}` and `", "reason": "ordered by mistake"}}`), while the
customer's opening says the reason in word pieces (" no", " l", "onger", " needed"). So the choice
is one token whose right value is said 100-250 tokens earlier in other tokens: not a copy, which
the agent does well (order ids), but an association it has to learn.

This bench takes the recipe's level-1 tasks (`domains.retail.tiny_agent.level1_tasks`), fine-tunes
the model on the expert cancellations of the training customers (`training.sft.warm_start`,
relabelled, as the recipe trains) with the loss weighted on the tokens of the tool calls' argument
values (`--weight`; the recipe's own weight is on the tokens naming the tool), and scores the reason
token teacher-forced on the expert cancellations of held-out customers: log p(NLN token) -
log p(OBM token) at the position that chooses, split by what the customer said. The figure is the
gap between the two means with a normal 95% interval; a model that reads the reason has a gap well
above 0. The model before the fine-tuning is scored the same way.

Two questions the first runs left open have options of their own:
- `--fresh-worlds 11,12,13,14`: the training customers' cancellations of those worlds too (each
  world another generated shop), so the tuned model sees over a thousand distinct customers and
  cannot fit the reason by remembering them;
- `--weight-on reason`: the weight on the token that chooses the reason alone, so the reason is
  not one weighted token among an order id's;
- `--lm-steps N`: first N steps of plain language modelling on the same conversations, every
  token a target (the customer's turns too, as a pretrained base model was trained), at lr 1e-3;
- `--reason-tokens`: the two reasons first become tokens of their own
  (`training.tiny.phrases.add_phrase_tokens`), so the opening and the call hold the same token
  and choosing it is a copy.
The margin is taken at the first token where the two calls' texts are cut differently, whichever
tokenizer the model has.

    .venv/bin/python bench/reason_learning.py [--steps 150] [--lr 1e-3] [--weight 50] [--work DIR]
        [--fresh-worlds 11,12] [--weight-on values|reason] [--lm-steps 150] [--reason-tokens]

The last line printed is
`steps=<n> lr=<x> weight=<w> before_gap=<g> before_ci=[<lo>, <hi>] after_gap=<g> ci=[<lo>, <hi>]
right=<k>/<n>` (right: held-out customers whose reason the tuned model prefers).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import training.sft as sft  # noqa: E402
from domains.retail.level1 import level1_demonstration  # noqa: E402
from domains.retail.tiny_agent import AgentRecipe, level1_tasks, level1_tools  # noqa: E402
from training.checkpoints import save_final_model  # noqa: E402
from training.policies import load_policy  # noqa: E402
from training.tiny.manifest import SHIPPED_AGENT_DIR  # noqa: E402
from training.tiny.phrases import add_phrase_tokens  # noqa: E402

REASONS = ("no longer needed", "ordered by mistake")
CANCEL = "cancel_pending_order"
# The text of a call up to a point inside one of its argument values (still open).
_IN_VALUE = re.compile(r'"arguments"\s*:\s*\{(?:[^"]|"[^"]*")*?:\s*"[^"]*$')
_VALUE_TOKENS_AT_MOST = 120


def argument_value_positions(token_ids, tokenizer):
    """Like `training.sft.tool_name_positions`, but True on the tokens of a tool call's argument
    values: each token that ends inside a value string or closes one."""
    import torch

    marked = torch.zeros_like(token_ids, dtype=torch.bool)
    opener = tokenizer.convert_tokens_to_ids(sft.TOOL_CALL_OPEN)
    for row, column in (token_ids == opener).nonzero().tolist():
        ids = token_ids[row].tolist()
        before = ""
        for stop in range(column + 1, min(len(ids), column + _VALUE_TOKENS_AT_MOST)):
            text = tokenizer.decode(ids[column + 1 : stop + 1])
            if "</tool_call>" in text:
                break
            if _IN_VALUE.search(text) or _IN_VALUE.search(before):
                marked[row, stop] = True
            before = text
    return marked


def cancellations(tasks: list[dict]) -> list[dict]:
    return [level1_demonstration(t) for t in tasks if t["intent"] == "cancel_order"]


def choice_tokens(tokenizer) -> dict[str, int]:
    """{reason: the token that chooses it}: the first token at which the two reasons' cancel calls
    are cut differently (the closing token `", "reason": "no longer needed"}}` with the recipe's
    tokenizer; the reason's own token once it is a phrase token)."""
    cuts = {
        reason: tokenizer(f'{{"order_id": "#W1234567", "reason": "{reason}"}}}}', add_special_tokens=False)["input_ids"]
        for reason in REASONS
    }
    a, b = cuts.values()
    at = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    if at is None:
        raise SystemExit(f"the two reasons' calls are cut alike by this tokenizer: {cuts}")
    return {reason: ids[at] for reason, ids in cuts.items()}


def reason_margins(model_path: Path, demos: list[dict]) -> dict[str, list[float]]:
    """Teacher-forced log p(NLN) - log p(OBM) at the reason's token of each demo's cancel call."""
    import torch

    model, tokenizer = load_policy(model_path)
    model.eval()
    rows = sft.sft_rows(demos, tools=level1_tools())
    first = choice_tokens(tokenizer)
    margins: dict[str, list[float]] = {reason: [] for reason in REASONS}
    for row, encoded in zip(rows, sft.tokenized_rows(tokenizer, rows)):
        said = next(r for r in REASONS if f"reason: {r}" in row["messages"][1]["content"])
        ids, trained = encoded["input_ids"], encoded["assistant_masks"]
        at = next(i for i, token in enumerate(ids) if token in first.values() and trained[i])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(torch.tensor([ids[:at]])).logits[0, -1].float(), -1)
        margins[said].append(float(log_probs[first[REASONS[0]]] - log_probs[first[REASONS[1]]]))
    return margins


def reason_positions(token_ids, tokenizer):
    """True on the tokens that choose a reason (`choice_tokens`), for `--weight-on reason`."""
    import torch

    marked = torch.zeros_like(token_ids, dtype=torch.bool)
    for token in choice_tokens(tokenizer).values():
        marked |= token_ids == token
    return marked


def right(margins: dict[str, list[float]]) -> tuple[int, int]:
    """(customers whose own reason the model prefers, customers)."""
    said_first, said_second = margins[REASONS[0]], margins[REASONS[1]]
    hits = sum(m > 0 for m in said_first) + sum(m < 0 for m in said_second)
    return hits, len(said_first) + len(said_second)


def gap(margins: dict[str, list[float]]) -> tuple[float, float, float]:
    a, b = margins[REASONS[0]], margins[REASONS[1]]
    diff = statistics.mean(a) - statistics.mean(b)
    half = 1.96 * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return diff, diff - half, diff + half


def with_reason_tokens(model_path: Path, out: Path) -> Path:
    """A copy of the model at `model_path` whose tokenizer holds each reason as a token of its own."""
    model, tokenizer = load_policy(model_path)
    add_phrase_tokens(model, tokenizer, REASONS)
    save_final_model(model, tokenizer, out)
    return out


def every_token_a_target(tokenized):
    """`training.sft.tokenized_rows` with every token labelled, not only the assistant's."""

    def rows(tokenizer, chat_rows):
        out = tokenized(tokenizer, chat_rows)
        for row in out:
            row["assistant_masks"] = [1] * len(row["assistant_masks"])
        return out

    return rows


def language_modelled(model_path: Path, demos: list[dict], out: Path, steps: int, threads: int) -> Path:
    """The model after `steps` of next-token training on whole conversations (`every_token_a_target`)."""
    assistant_only = sft.tokenized_rows
    sft.tokenized_rows = every_token_a_target(assistant_only)
    try:
        settings = sft.SFTSettings(
            steps=steps,
            batch_size=16,
            learning_rate=1e-3,
            lr_scheduler_type="constant",
            tools=level1_tools(),
            relabel=True,
            torch_threads=threads,
        )
        summary = sft.warm_start(model_path, demos, out, settings)
    finally:
        sft.tokenized_rows = assistant_only
    print(json.dumps({"lm_steps": steps, "lm_train_loss": round(summary["train_loss"], 4)}), flush=True)
    return out


def fresh_cancellations(work: Path, worlds: list[int]) -> list[dict]:
    """The training customers' cancellations of other generated worlds (`AgentRecipe.world_seed`)."""
    demos: list[dict] = []
    for world in worlds:
        recipe = AgentRecipe(world_seed=world, train_tasks=800, held_out_tasks=50)
        train, _ = level1_tasks(work / f"world{world}", recipe)
        demos += cancellations(train)
    return demos


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SHIPPED_AGENT_DIR, help="the model to fine-tune")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight", type=float, default=50.0, help="loss weight of the weighted tokens")
    parser.add_argument("--weight-on", choices=("values", "reason"), default="values")
    parser.add_argument("--fresh-worlds", default="", help="comma-separated world seeds whose customers are added")
    parser.add_argument("--reason-tokens", action="store_true", help="make each reason a token of its own first")
    parser.add_argument("--lm-steps", type=int, default=0, help="steps with every token a target, first")
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="reason-learning-"))
    started = time.monotonic()
    train, held = level1_tasks(work, AgentRecipe())
    train_demos, held_demos = cancellations(train), cancellations(held)
    worlds = [int(w) for w in args.fresh_worlds.split(",") if w.strip()]
    train_demos += fresh_cancellations(work, worlds)
    print(f"{len(train_demos)} training and {len(held_demos)} held-out cancellations", flush=True)
    base = with_reason_tokens(args.model, work / "phrased") if args.reason_tokens else args.model
    if args.lm_steps:
        base = language_modelled(base, train_demos, work / "language-modelled", args.lm_steps, args.threads)
    before = gap(reason_margins(base, held_demos))
    # The weight goes where --weight-on says instead of on the tool's name: the recipe's trainer
    # reads its weighted positions from this one function.
    sft.tool_name_positions = argument_value_positions if args.weight_on == "values" else reason_positions
    settings = sft.SFTSettings(
        steps=args.steps,
        batch_size=16,
        learning_rate=args.lr,
        lr_scheduler_type="constant",
        tools=level1_tools(),
        relabel=True,
        tool_name_weight=args.weight,
        torch_threads=args.threads,
    )
    summary = sft.warm_start(base, train_demos, work / "tuned", settings)
    after_margins = reason_margins(work / "tuned", held_demos)
    train_gap = gap(reason_margins(work / "tuned", train_demos[:100]))
    after = gap(after_margins)
    hits, customers = right(after_margins)
    print(
        json.dumps(
            {
                "train_loss": round(summary["train_loss"], 4),
                "margin_by_said_after": {k: round(statistics.mean(v), 3) for k, v in after_margins.items()},
                "gap_on_100_training_cancellations": round(train_gap[0], 3),
                "seconds": round(time.monotonic() - started),
            }
        )
    )
    print(
        f"steps={args.steps} lr={args.lr:g} weight={args.weight:g} before_gap={before[0]:+.3f} "
        f"before_ci=[{before[1]:+.3f}, {before[2]:+.3f}] after_gap={after[0]:+.3f} ci=[{after[1]:+.3f}, {after[2]:+.3f}] "
        f"right={hits}/{customers}"
    )


if __name__ == "__main__":
    main()
