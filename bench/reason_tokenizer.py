"""Whether a tokenizer that keeps the cancel reason whole lets a tiny agent copy it: an A/B at equal budget.

`bench/reason_learning.py` found why the shipped agent picks the cancel reason at chance: its
byte-level BPE merges across punctuation, so the rest of a cancel call after the order id is one
token per reason (`", "reason": "no longer needed"}}`), and the customer's opening says the reason
in other tokens. Choosing it is then an association the fine-tuning does not teach, where an order
id, whose digits are the same tokens wherever they appear, is copied.

The hypothesis: when each enumerated value of the domain's tools is a piece of its own for the
pre-tokenizer (`train_tokenizer(isolated_phrases=...)`), the reason is the same token(s) in the
customer's text and in the call, and a tiny model learns to copy it like an order id.

Two arms from the same seed and the same level-1 tasks (`domains.retail.tiny_agent.level1_tasks`):
A, the recipe's tokenizer as shipped; B, the same with the enumerated values isolated. Each builds
the recipe's tokenizer and tiny model (`build_tiny_policy`, `AgentRecipe.spec`), runs the recipe's
copy pretraining (`copy_pretrain`, `--copy-steps`) and one expert SFT stage (`warm_start`,
relabelled, both intents, `--sft-steps`) on the training customers' level-1 demonstrations, then
scores the held-out customers' cancellations teacher-forced: at the tokens where the two reasons
part, log p(the reason the customer gave) - log p(the other), summed up to the token that ends the
reason. The figures are the share of calls with a margin above 0 (accuracy; chance 0.5) and the
mean margin with a normal 95% interval. A model biased to one reason scores that reason's share
of the held-out calls (29 of 51 said "ordered by mistake") and a margin off 0 by its bias alone, so
the figures per reason the customer gave are printed too: a model that copies is right on both. The order id of the same calls is a sanity figure: the
share of calls whose every order-id token is the teacher-forced argmax.

The retail tool schemas carry no `enum` (the reason's values are in its description, the write
tool checks them against `domains.retail.tools_write.CANCEL_REASONS`), so arm B isolates the
schemas' enum values (`enum_values`, none for retail) together with those reasons.

    .venv/bin/python bench/reason_tokenizer.py [--copy-steps 1000] [--sft-steps 300] [--lr 1e-3]
        [--seed 0] [--work DIR] [--threads 1]

The last line printed is
`copy_steps=<n> sft_steps=<n> lr=<x> seed=<s> held_out=<n> A_acc=<a> A_margin=<m> A_ci=[<lo>, <hi>]
A_id=<a> B_acc=<a> B_margin=<m> B_ci=[<lo>, <hi>] B_id=<a>` (one line).
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
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import training.sft as sft  # noqa: E402
from domains.retail.level1 import level1_demonstration  # noqa: E402
from domains.retail.tiny_agent import AgentRecipe, level1_tasks, level1_tools  # noqa: E402
from domains.retail.tools_write import CANCEL_REASONS  # noqa: E402
from training.policies import load_policy  # noqa: E402
from training.sandbox.prompting import tool_schemas  # noqa: E402
from training.tiny.bootstrap import build_tiny_policy, enum_values  # noqa: E402
from training.tiny.pretrain import CopySettings, copy_pretrain  # noqa: E402

DOMAIN = "retail"
CANCEL = "cancel_pending_order"
CALL_END = "</tool_call>"
# The last cancel call's arguments in a rendered conversation (the template writes them as JSON).
_REASON_VALUE = re.compile(r'"reason":\s*"')
_ORDER_VALUE = re.compile(r'"order_id":\s*"([^"]*)"')


def isolated_values() -> list[str]:
    """Arm B's phrases: every enum value of the domain's tool schemas, and the cancel reasons,
    which the retail schemas state only in prose."""
    return sorted(set(enum_values(tool_schemas(None, DOMAIN))) | set(CANCEL_REASONS))


def cancellations(tasks: list[dict]) -> list[dict]:
    return [level1_demonstration(t) for t in tasks if t["intent"] == "cancel_order"]


def build_arm(name: str, phrases: list[str], expert: list[dict], work: Path, args, recipe: AgentRecipe) -> Path:
    """Tokenizer and model of the recipe's spec, copy pretraining, one expert SFT stage: the model's folder."""
    folder = work / name
    current = build_tiny_policy(folder / "base", expert, recipe.spec(), isolated_phrases=phrases)
    if args.copy_steps:
        copy = CopySettings(
            steps=args.copy_steps, learning_rate=recipe.copy_lr, seed=recipe.seed, torch_threads=args.threads
        )
        summary = copy_pretrain(current, folder / "copy", copy)
        print(json.dumps({"arm": name, "stage": "copy", "final_loss": round(summary["final_loss"], 4)}), flush=True)
        current = folder / "copy"
    settings = sft.SFTSettings(
        steps=args.sft_steps,
        batch_size=recipe.sft_batch,
        learning_rate=args.lr,
        lr_scheduler_type=recipe.sft_schedule,
        tools=level1_tools(),
        relabel=True,
        torch_threads=args.threads,
    )
    # The seed the recipe's first expert stage uses.
    summary = sft.warm_start(current, expert, folder / "sft", replace(settings, seed=1 + 1000 * recipe.seed))
    print(json.dumps({"arm": name, "stage": "sft", "train_loss": round(summary["train_loss"], 4)}), flush=True)
    return folder / "sft"


def rendered(tokenizer, row: dict) -> str:
    """The row's text exactly as `sft.tokenized_rows` renders it for training."""
    from trl.chat_template_utils import get_training_chat_template

    return tokenizer.apply_chat_template(
        row["messages"],
        tools=json.loads(row["tools"]),
        chat_template=get_training_chat_template(tokenizer),
        tokenize=False,
    )


def encode(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return encoded["input_ids"], encoded["offset_mapping"]


def log_probs(model, ids: list[int]):
    """Log-probabilities of each next token, teacher-forced: row i predicts ids[i + 1]."""
    import torch

    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor([ids[:-1]])).logits[0].float(), -1)


def score_call(model, tokenizer, text: str, said: str) -> dict:
    """The last cancel call of `text`: the reason's margin and whether its order id is copied.

    Each reason is written into the call and tokenised; the tokens from where the two encodings
    part up to the one that ends the reason are the choice, scored by their summed log-prob. A
    tokenizer that fuses the reason with the JSON after it makes that one token; one that isolates
    it, the reason's own tokens.
    """
    call = text.rindex(f'"{CANCEL}"')
    start = _REASON_VALUE.search(text, call).end()
    end = text.index(CALL_END, start) + len(CALL_END)
    if text[start : start + len(said)] != said:
        raise ValueError(f"the cancel call does not carry the reason the customer gave ({said!r})")
    texts = {reason: text[:start] + reason + text[start + len(said) : end] for reason in CANCEL_REASONS}
    encoded = {reason: encode(tokenizer, t) for reason, t in texts.items()}
    first, second = (encoded[r][0] for r in CANCEL_REASONS)
    part = next(i for i, (a, b) in enumerate(zip(first, second)) if a != b)
    chosen: dict[str, float] = {}
    for reason, (ids, offsets) in encoded.items():
        stop = next(i for i, (_, high) in enumerate(offsets) if high >= start + len(reason))
        lp = log_probs(model, ids[: stop + 1])
        chosen[reason] = float(sum(lp[i - 1, ids[i]] for i in range(part, stop + 1)))
        if reason == said:
            copied = order_id_copied(lp, ids, offsets, texts[reason], call)
            choice_tokens = stop + 1 - part
    other = next(r for r in CANCEL_REASONS if r != said)
    return {"margin": chosen[said] - chosen[other], "id_copied": copied, "choice_tokens": choice_tokens}


def order_id_copied(lp, ids: list[int], offsets, text: str, call: int) -> bool:
    """Whether every token inside the cancel call's order-id value is the teacher-forced argmax."""
    value = _ORDER_VALUE.search(text, call)
    low, high = value.span(1)
    inside = [i for i, (a, b) in enumerate(offsets) if low <= a and b <= high and b > a and i > 0]
    return bool(inside) and all(int(lp[i - 1].argmax()) == ids[i] for i in inside)


def score(model_path: Path, demos: list[dict]) -> list[dict]:
    """`score_call` on each held-out demo's cancel call, rendered as training renders it."""
    model, tokenizer = load_policy(model_path)
    model.eval()
    rows = sft.sft_rows(demos, tools=level1_tools())
    results = []
    for row, encoded in zip(rows, sft.tokenized_rows(tokenizer, rows)):
        text = rendered(tokenizer, row)
        if encode(tokenizer, text)[0] != encoded["input_ids"]:
            raise ValueError("the rendered text does not tokenise to the training ids")
        said = next(r for r in CANCEL_REASONS if f"reason: {r}" in row["messages"][1]["content"])
        results.append({"said": said, **score_call(model, tokenizer, text, said)})
    return results


def figures(results: list[dict]) -> dict:
    margins = [r["margin"] for r in results]
    mean = statistics.mean(margins)
    half = 1.96 * statistics.stdev(margins) / math.sqrt(len(margins))
    return {
        "n": len(margins),
        "acc": sum(m > 0 for m in margins) / len(margins),
        "margin": mean,
        "ci": (mean - half, mean + half),
        "id": sum(bool(r["id_copied"]) for r in results) / len(results),
        "choice_tokens": sorted({r["choice_tokens"] for r in results}),
        # By the reason the customer gave: (calls, share right, mean margin). A model that always
        # prefers one reason is right on one side only, whatever the overall accuracy.
        "by_said": {
            s: (len(m), round(sum(x > 0 for x in m) / len(m), 3), round(statistics.mean(m), 3))
            for s in CANCEL_REASONS
            if (m := [r["margin"] for r in results if r["said"] == s])
        },
    }


def reason_tokens(model_path: Path, reason: str) -> dict[str, list[str]]:
    """How the arm's tokenizer cuts a reason where the customer says it and where the call carries it."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast.from_pretrained(model_path)
    said = f"Please cancel order #W1234567, reason: {reason}."
    called = f'{{"order_id": "#W1234567", "reason": "{reason}"}}}}'
    return {t: tokenizer.tokenize(t) for t in (said, called)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copy-steps", type=int, default=1000, help="copy pretraining steps (0: none)")
    parser.add_argument("--sft-steps", type=int, default=300, help="expert SFT steps")
    parser.add_argument("--lr", type=float, default=1e-3, help="SFT learning rate")
    parser.add_argument("--seed", type=int, default=0, help="initial weights, copy stream, SFT order")
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    started = time.monotonic()
    work = args.work or Path(tempfile.mkdtemp(prefix="reason-tokenizer-"))
    recipe = AgentRecipe(seed=args.seed)
    train, held = level1_tasks(work, recipe)
    expert, held_cancels = [level1_demonstration(t) for t in train], cancellations(held)
    phrases = isolated_values()
    print(
        json.dumps({"train": len(expert), "held_out_cancellations": len(held_cancels), "isolated": phrases}),
        flush=True,
    )
    result = {}
    for name, arm_phrases in (("A", []), ("B", phrases)):
        model = build_arm(name, arm_phrases, expert, work, args, recipe)
        result[name] = figures(score(model, held_cancels))
        shown = {k: v for k, v in result[name].items() if k != "ci"}
        print(json.dumps({"arm": name, **shown, "tokens": reason_tokens(model, CANCEL_REASONS[0])}), flush=True)
        print(json.dumps({"arm": name, "seconds": round(time.monotonic() - started)}), flush=True)
    line = [
        f"copy_steps={args.copy_steps} sft_steps={args.sft_steps} lr={args.lr:g} seed={args.seed}",
        f"held_out={result['A']['n']}",
    ]
    for name, f in result.items():
        line.append(
            f"{name}_acc={f['acc']:.3f} {name}_margin={f['margin']:+.3f} "
            f"{name}_ci=[{f['ci'][0]:+.3f}, {f['ci'][1]:+.3f}] {name}_id={f['id']:.3f}"
        )
    print(" ".join(line))


if __name__ == "__main__":
    main()
