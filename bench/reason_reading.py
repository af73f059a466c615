"""Whether a retail model reads the cancel reason its customer gives: the limit of the demo's climb.

The shipped tiny agent serves the level-1 shop's order-status questions without fault; what it
fails is the cancellation's `reason`, which the customer states in the opening ("... reason: no
longer needed."). This bench serves `--serve` level-1 conversations of the demo's shop with the
model (behind the PII gateway, greedy, as the demo serves), then, for every served cancellation,
scores both reasons at the cancel call: the log-probability of the whole call text with
"no longer needed" minus with "ordered by mistake", from the prompt the model had at that turn.
A model that reads the reason has a higher margin for customers who said "no longer needed" than
for those who said "ordered by mistake"; the gap between the two means (with a normal-approximation
95% interval) is the figure. A gap near zero means the choice ignores the customer: no update
that only reweights what the model already samples can lift cancellations above the share of the
reason it prefers.

    .venv/bin/python bench/reason_reading.py [--model models/retail-agent-tiny ...] [--serve 100]

The last line printed per model is `model=<path> served=<x> cancel=<x> gap=<g> ci=[<lo>, <hi>]`.
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
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The demo's fixed key: the same pseudonyms, so the same prompts, on every run.
os.environ.setdefault("RETRAIN_PII_KEY", "agent-retrain-demo-pseudonyms-not-a-secret")

from orchestration.cli.demo import DemoSettings, serving_policy  # noqa: E402
from training.tiny.manifest import SHIPPED_AGENT_DIR  # noqa: E402
from training.traffic.simulate import simulate  # noqa: E402

REASONS = ("no longer needed", "ordered by mistake")
CANCEL = "cancel_pending_order"
SAID = re.compile(r"reason: (no longer needed|ordered by mistake)")


def _call_text(order_id: str, reason: str) -> str:
    arguments = json.dumps({"order_id": order_id, "reason": reason})
    return f'<tool_call>\n{{"name": "{CANCEL}", "arguments": {arguments}}}'


def _log_prob(model, tokenizer, prompt: str, continuation: str) -> float:
    import torch

    start = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    ids = tokenizer(prompt + continuation, add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return float(sum(log_probs[i - 1, ids[i]] for i in range(start, len(ids))))


def measure(model_path: str, serve: int, seed: int) -> dict:
    gateway = serving_policy(model_path)
    model, tokenizer = gateway.policy.model, gateway.policy.tokenizer
    with tempfile.TemporaryDirectory(prefix="reason-reading-") as work:
        summary = simulate(
            days=1,
            per_day=serve,
            seed=seed,
            out_dir=work,
            start=date(2026, 11, 30),
            policy=gateway,
            level=1,
            policy_version="bench/1",
            n_users=DemoSettings.customers,
        )
        records = [json.loads(line) for f in summary["files"] for line in Path(f).read_text().splitlines() if line]
    margins: dict[str, list[float]] = {reason: [] for reason in REASONS}
    chosen = {reason: {r: 0 for r in REASONS} for reason in REASONS}
    for record in records:
        messages = record["messages"]
        said = SAID.search(messages[1].get("content") or "")
        turn = next(
            (i for i, m in enumerate(messages) if any(c["name"] == CANCEL for c in m.get("tool_calls") or ())), None
        )
        if said is None or turn is None:
            continue
        call = next(c for c in messages[turn]["tool_calls"] if c["name"] == CANCEL)
        # What the model read at that turn: the conversation as the gateway showed it.
        prompt = gateway.policy.render(gateway.view_of(messages[:turn]))
        order_id = str(call["arguments"].get("order_id", ""))
        scores = {reason: _log_prob(model, tokenizer, prompt, _call_text(order_id, reason)) for reason in REASONS}
        margins[said.group(1)].append(scores[REASONS[0]] - scores[REASONS[1]])
        if call["arguments"].get("reason") in REASONS:
            chosen[said.group(1)][call["arguments"]["reason"]] += 1
    completed = [r["outcome"] == "completed" for r in records]
    cancels = [r["outcome"] == "completed" for r in records if r["intent"] == "cancel_order"]
    a, b = margins[REASONS[0]], margins[REASONS[1]]
    gap = statistics.mean(a) - statistics.mean(b) if a and b else float("nan")
    se = (
        math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
        if len(a) > 1 < len(b)
        else float("nan")
    )
    return {
        "model": model_path,
        "served": sum(completed) / len(completed),
        "cancel": sum(cancels) / max(len(cancels), 1),
        "cancellations": len(cancels),
        "margin_by_said": {k: round(statistics.mean(v), 3) if v else None for k, v in margins.items()},
        "chosen_by_said": chosen,
        "gap": gap,
        "ci": (gap - 1.96 * se, gap + 1.96 * se),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", nargs="+", default=[str(SHIPPED_AGENT_DIR)], help="model folders to measure")
    parser.add_argument("--serve", type=int, default=100, help="level-1 conversations served per model")
    parser.add_argument(
        "--seed", type=int, default=11, help="the served day's seed (the same customers for every model)"
    )
    parser.add_argument("--threads", type=int, default=2, help="torch threads")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    for path in args.model:
        m = measure(path, args.serve, args.seed)
        print(json.dumps({k: v for k, v in m.items() if k not in ("gap", "ci")}))
        print(
            f"model={m['model']} served={m['served']:.3f} cancel={m['cancel']:.3f} "
            f"gap={m['gap']:+.3f} ci=[{m['ci'][0]:+.3f}, {m['ci'][1]:+.3f}]"
        )


if __name__ == "__main__":
    main()
