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

    .venv/bin/python bench/reason_learning.py [--steps 150] [--lr 1e-3] [--weight 50] [--work DIR]

The last line printed is
`steps=<n> lr=<x> weight=<w> before_gap=<g> before_ci=[<lo>, <hi>] after_gap=<g> ci=[<lo>, <hi>]`.
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
from training.policies import load_policy  # noqa: E402
from training.tiny.manifest import SHIPPED_AGENT_DIR  # noqa: E402

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


def reason_margins(model_path: Path, demos: list[dict]) -> dict[str, list[float]]:
    """Teacher-forced log p(NLN) - log p(OBM) at the reason's token of each demo's cancel call."""
    import torch

    model, tokenizer = load_policy(model_path)
    model.eval()
    rows = sft.sft_rows(demos, tools=level1_tools())
    choice = {
        reason: tokenizer(f'", "reason": "{reason}"}}}}', add_special_tokens=False)["input_ids"] for reason in REASONS
    }
    if any(len(ids) != 1 for ids in choice.values()):
        raise SystemExit(f"this tokenizer does not end a cancel call with one token per reason: {choice}")
    first = {reason: ids[0] for reason, ids in choice.items()}
    margins: dict[str, list[float]] = {reason: [] for reason in REASONS}
    for row, encoded in zip(rows, sft.tokenized_rows(tokenizer, rows)):
        said = next(r for r in REASONS if f"reason: {r}" in row["messages"][1]["content"])
        ids, trained = encoded["input_ids"], encoded["assistant_masks"]
        at = next(i for i, token in enumerate(ids) if token in first.values() and trained[i])
        with torch.no_grad():
            log_probs = torch.log_softmax(model(torch.tensor([ids[:at]])).logits[0, -1].float(), -1)
        margins[said].append(float(log_probs[first[REASONS[0]]] - log_probs[first[REASONS[1]]]))
    return margins


def gap(margins: dict[str, list[float]]) -> tuple[float, float, float]:
    a, b = margins[REASONS[0]], margins[REASONS[1]]
    diff = statistics.mean(a) - statistics.mean(b)
    half = 1.96 * math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    return diff, diff - half, diff + half


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SHIPPED_AGENT_DIR, help="the model to fine-tune")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight", type=float, default=50.0, help="loss weight of argument-value tokens")
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    work = args.work or Path(tempfile.mkdtemp(prefix="reason-learning-"))
    started = time.monotonic()
    train, held = level1_tasks(work, AgentRecipe())
    train_demos, held_demos = cancellations(train), cancellations(held)
    print(f"{len(train_demos)} training and {len(held_demos)} held-out cancellations", flush=True)
    before = gap(reason_margins(args.model, held_demos))
    # The weight goes on the argument values instead of the tool's name: the recipe's trainer reads
    # its weighted positions from this one function.
    sft.tool_name_positions = argument_value_positions
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
    summary = sft.warm_start(args.model, train_demos, work / "tuned", settings)
    after_margins = reason_margins(work / "tuned", held_demos)
    after = gap(after_margins)
    print(
        json.dumps(
            {
                "train_loss": round(summary["train_loss"], 4),
                "margin_by_said_after": {k: round(statistics.mean(v), 3) for k, v in after_margins.items()},
                "seconds": round(time.monotonic() - started),
            }
        )
    )
    print(
        f"steps={args.steps} lr={args.lr:g} weight={args.weight:g} before_gap={before[0]:+.3f} "
        f"before_ci=[{before[1]:+.3f}, {before[2]:+.3f}] after_gap={after[0]:+.3f} ci=[{after[1]:+.3f}, {after[2]:+.3f}]"
    )


if __name__ == "__main__":
    main()
