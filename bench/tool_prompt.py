"""How much of a model's context the tool list takes, and whether whole-shop conversations fit.

A policy's prompt lists its tools' JSON schemas (the chat template's `tools`), then the
conversation follows. This bench measures, with `--model`'s tokenizer and chat template (default:
the shipped tiny agent), the prompt's tokens under each curriculum tool list
(`training.curriculum.TOOL_LISTS`: level 1's six tools or every tool) for each installed domain,
and the tokens of `--conversations` whole-shop conversations of one simulated retail day (the rules
agent serving every intent, full tool results, as recorded), rendered as SFT renders them; then how
many of those conversations a training step keeps whole (`training.sft.SFTSettings.max_length`; TRL
cuts the rest) after each list's prompt. The model's `max_position_embeddings` is printed beside
it (its rotary positions extend past it; how well is another question).

    .venv/bin/python bench/tool_prompt.py [--model DIR] [--conversations 200] [--work DIR]

The last line printed is `max_positions=<n> max_length=<n> prompt_level1=<n> prompt_all=<n> conversation_p50=<n>
conversation_p90=<n> fit_level1=<k>/<n> fit_all=<k>/<n>` for retail.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "bench"))  # appended: bench/ must not shadow the product's packages
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from shop_stage import SERVED_CUSTOMERS, SERVED_SEED, day_records  # noqa: E402  (the served day)

from domains.registry import domain_names, load_domain  # noqa: E402
from domains.retail.traffic.simulate import simulate  # noqa: E402
from training.checkpoints import load_tokenizer  # noqa: E402
from training.sandbox.prompting import tool_schemas  # noqa: E402
from training.sft import SFTSettings, sft_rows, tokenized_rows  # noqa: E402
from training.tiny.manifest import SHIPPED_AGENT_DIR  # noqa: E402


def prompt_tokens(tokenizer, domain: str, tools: tuple[str, ...] | None) -> int:
    """Tokens before the first customer turn: the domain's policy and the tools' schemas."""
    messages = [{"role": "system", "content": load_domain(domain).policy}]
    text = tokenizer.apply_chat_template(messages, tools=list(tool_schemas(tools, domain)), tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def conversation_tokens(tokenizer, conversations: int, work: Path) -> dict[str, list[int]]:
    """Tokens of each replayable whole-shop conversation after the prompt (every tool listed), by
    intent, sorted."""
    summary = simulate(days=1, per_day=conversations, seed=SERVED_SEED, out_dir=work, n_users=SERVED_CUSTOMERS)
    records = day_records(summary)
    prompt = prompt_tokens(tokenizer, "retail", None)
    by_intent: dict[str, list[int]] = defaultdict(list)
    for record in records:
        rows = sft_rows([record], compact=False, tools=None, verified_only=False)
        for row in tokenized_rows(tokenizer, rows):
            by_intent[record["intent"]].append(len(row["input_ids"]) - prompt)
    return {intent: sorted(lengths) for intent, lengths in sorted(by_intent.items())}


def quantile(values: list[int], q: float) -> int:
    return values[min(int(len(values) * q), len(values) - 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=SHIPPED_AGENT_DIR)
    parser.add_argument("--conversations", type=int, default=200)
    parser.add_argument("--work", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()
    if args.conversations < 1:
        parser.error("--conversations must be at least 1")
    from transformers import AutoConfig

    tokenizer = load_tokenizer(args.model)  # the policy's own cut (AutoTokenizer re-cuts it as stock Qwen2)
    positions = AutoConfig.from_pretrained(args.model).max_position_embeddings
    limit = SFTSettings().max_length  # what a training step keeps of a conversation; TRL cuts the rest
    prompts = {}
    for name in domain_names():
        level1 = load_domain(name).level1
        lists = {"level1": level1.tools if level1 is not None else None, "all": None}
        prompts[name] = {key: prompt_tokens(tokenizer, name, tools) for key, tools in lists.items()}
        print(f"{name}: prompt tokens {prompts[name]}", flush=True)
    print(f"the model's max positions {positions}, SFT's max_length {limit}", flush=True)
    by_intent = conversation_tokens(
        tokenizer, args.conversations, args.work or Path(tempfile.mkdtemp(prefix="prompt-"))
    )
    retail = prompts["retail"]
    for intent, lengths in by_intent.items():
        fits = {key: sum(n + prompt <= limit for n in lengths) for key, prompt in retail.items()}
        print(
            f"  {intent}: {len(lengths)} conversations, tokens p50 {quantile(lengths, 0.5)} p90 "
            f"{quantile(lengths, 0.9)}; whole in a training step with level 1's tools {fits['level1']}, with every tool {fits['all']}"
        )
    body = sorted(n for lengths in by_intent.values() for n in lengths)
    fit = {key: sum(n + prompt <= limit for n in body) for key, prompt in retail.items()}
    print(
        f"max_positions={positions} max_length={limit} prompt_level1={retail['level1']} prompt_all={retail['all']} "
        f"conversation_p50={quantile(body, 0.5)} conversation_p90={quantile(body, 0.9)} "
        f"fit_level1={fit['level1']}/{len(body)} fit_all={fit['all']}/{len(body)}"
    )


if __name__ == "__main__":
    main()
