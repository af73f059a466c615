"""Copy pretraining: teach a freshly initialised tiny policy to copy spans, before SFT.

A real base model arrives able to copy a name or an order id from its context (induction heads
form early in pretraining on natural text). A tiny model initialised here has never been
pretrained, and SFT on a few hundred level-1 trajectories does not make that ability appear in
minutes: measured (bench/results/learning.md), the SFT loss stalls at 0.65 token accuracy with the
policy writing the most frequent customer's name into every call. So the bootstrap adds the one
skill pretraining would have given: sequences of identifier-like tokens (digits, capitalised
words, single characters: what customers' names, zips, emails and order ids are made of), shown
once and then repeated, with the loss on the repeat only. Short sequences make this cheap.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dataplane.settings import setting
from training.checkpoints import load_policy, save_final_model

# The copy task's own span markers, added to every tokenizer the bootstrap trains. Marking spans
# with the chat template's `<tool_call>` and `<|im_end|>` taught a long copy stage that what
# follows `<tool_call>` is random tokens to repeat, which SFT then had to unlearn.
COPY_MARK = "<|copy|>"
COPY_SEP = "<|paste|>"
COPY_TOKENS = (COPY_MARK, COPY_SEP)


@dataclass(frozen=True)
class CopySettings:
    """Copy pretraining of the tiny model: spans of identifier tokens it learns to repeat."""

    steps: int = setting(300, "optimizer steps")
    batch_size: int = setting(32, "sequences per optimizer step")
    min_span: int = setting(4, "fewest tokens in a span to copy")
    max_span: int = setting(16, "most tokens in a span to copy")
    # 3e-3 left the copy loss flat for 1,000 steps; 1e-3 learns (bench/results/learning.md).
    learning_rate: float = setting(1e-3, "learning rate")
    # Ten symbols repeat within and across digit runs, so copying one needs more than "the token
    # after the last one copied": the mistake left after SFT (a zip right for two digits, then
    # continued from another run's digit).
    digit_share: float = setting(
        0.0, "share of spans made of digits only, 5 to 10 of them (a zip, an order id), each among other digit runs"
    )
    seed: int = setting(0, "seeds torch and the spans drawn")
    torch_threads: int | None = setting(None, "CPU threads for torch (None: torch's default)")


def identifier_tokens(tokenizer: Any) -> list[int]:
    """Ids of the tokens identifiers are spelled with: single characters, digit groups and capitalised words."""
    keep = []
    for token, token_id in tokenizer.get_vocab().items():
        text = tokenizer.convert_tokens_to_string([token])
        if token in tokenizer.all_special_tokens or not text:
            continue
        if (
            len(text) == 1
            and text.isalnum()
            or text.isdigit()
            or (text[:1].isupper() and text[1:].islower() and text.isalpha())
        ):
            keep.append(token_id)
    return sorted(keep)


def digit_tokens(tokenizer: Any) -> list[int]:
    """Ids of the ten single-digit tokens (identifiers' digits are one token each)."""
    found = [tokenizer.convert_tokens_to_ids(d) for d in "0123456789"]
    return [i for i in found if i is not None and i != tokenizer.unk_token_id]


def _filler(rng: random.Random, vocab: list[int], digits: list[int] | None, longest: int) -> list[int]:
    # Random tokens, and for a digit span another digit run in them: a distractor of the same kind.
    tokens = [rng.choice(vocab) for _ in range(rng.randint(0, longest))]
    if digits:
        at = rng.randint(0, len(tokens))
        tokens[at:at] = [rng.choice(digits) for _ in range(rng.randint(5, 10))]
    return tokens


def copy_batch(
    rng: random.Random,
    vocab: list[int],
    settings: CopySettings,
    mark: int,
    sep: int,
    pad: int,
    digits: list[int] | None = None,
):
    """`(input_ids, labels, attention_mask)`: `filler MARK span filler SEP span`, loss on the repeat.

    The fillers (random tokens around the span) move it about, so the model must find it by
    content (the marker, then each token's predecessor), not by position. With `digits` given,
    `settings.digit_share` of the spans are digit runs, with digit runs in their fillers too.
    """
    import torch

    rows, labels = [], []
    for _ in range(settings.batch_size):
        numeric = bool(digits) and rng.random() < settings.digit_share
        if numeric:
            span = [rng.choice(digits) for _ in range(rng.randint(5, 10))]
        else:
            span = [rng.choice(vocab) for _ in range(rng.randint(settings.min_span, settings.max_span))]
        before = _filler(rng, vocab, digits if numeric else None, settings.max_span)
        after = _filler(rng, vocab, digits if numeric else None, settings.max_span)
        prefix = before + [mark] + span + after + [sep]
        rows.append(prefix + span)
        labels.append([-100] * len(prefix) + span)
    width = max(len(r) for r in rows)
    input_ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows])
    label_ids = torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels])
    attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
    return input_ids, label_ids, attention


def copy_pretrain(
    model_path: str | os.PathLike,
    out_path: str | os.PathLike,
    settings: CopySettings = CopySettings(),
    report: Any = None,
) -> dict[str, Any]:
    """Train the model at `model_path` on the copy task; save to `out_path`; a summary dict."""
    import torch

    if settings.torch_threads:
        torch.set_num_threads(settings.torch_threads)
    torch.manual_seed(settings.seed)
    model, tokenizer = load_policy(model_path)
    vocab, digits = identifier_tokens(tokenizer), digit_tokens(tokenizer)
    if len(vocab) < 10:
        raise ValueError(f"only {len(vocab)} identifier-like tokens in the tokenizer at {model_path}")
    if settings.digit_share > 0 and len(digits) < 10:
        raise ValueError(
            f"digit_share {settings.digit_share} needs the ten digit tokens; the tokenizer at "
            f"{model_path} has {len(digits)}"
        )
    mark, sep = (tokenizer.convert_tokens_to_ids(token) for token in COPY_TOKENS)
    if tokenizer.unk_token_id in (mark, sep) or None in (mark, sep):
        raise ValueError(
            f"the tokenizer at {model_path} has no copy markers {list(COPY_TOKENS)}: copy pretraining "
            "is for a tiny model whose tokenizer training.tiny.bootstrap trained"
        )
    pad = tokenizer.pad_token_id
    rng = random.Random(settings.seed)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.0)
    losses: list[float] = []
    for step in range(1, settings.steps + 1):
        input_ids, labels, attention = copy_batch(rng, vocab, settings, mark, sep, pad, digits)
        loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(loss.item())
        if report is not None and (step % max(1, settings.steps // 10) == 0 or step == settings.steps):
            report({"copy_step": step, "copy_loss": sum(losses[-10:]) / len(losses[-10:])})
    out = Path(out_path)
    save_final_model(model, tokenizer, out)
    return {"steps": settings.steps, "final_loss": sum(losses[-10:]) / len(losses[-10:]), "model_path": str(out)}
