"""Phrases a tool's argument takes, added to a trained tiny model's vocabulary as tokens of their own.

The tiny tokenizer is trained on the recipe's conversations, so it merges whatever text repeats
there. A cancellation's reason is one such text twice over, cut two different ways: the
customer's `, reason: no longer needed.` is one token and the call's
`", "reason": "no longer needed"}}` is another. Choosing the call's token from the opening's is
then an association between two tokens that are never targets of the same kind, and the tiny
agent does not learn it (200x weight on that one token, 1,119 fresh customers: the loss stays at
ln 2; bench/results/learning.md). With each phrase a token of its own, the opening and the call
hold the same token, and writing it is a copy, which the agent already does for order ids.

Tokens are added to an existing tokenizer (`tokenizer.add_tokens`), so every other text is cut as
before and a trained model keeps what it knows; only the new embedding rows are fresh. They are
added as single words: a phrase that is also part of a longer name (a record status word inside
a tool's snake_case name) leaves that name cut as the model learnt it. A marker that opens an
identifier (`within_words`: retail's `#W` before an order id's digits) is cut out wherever it
appears instead, so every mention of an order id starts with the same token.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class PhraseTokenError(ValueError):
    """A phrase that cannot become a token of its own."""


def add_phrase_tokens(
    model: Any, tokenizer: Any, phrases: Iterable[str], seed: int = 0, within_words: bool = False
) -> dict[str, int]:
    """Add each phrase of `phrases` to `tokenizer` as a token of its own and give `model` an
    embedding row for it; `{phrase: token id}`. A phrase already added keeps its id and row.
    `within_words`: cut each phrase out of a longer word too (an identifier's marker, glued to the
    digits that follow it).

    New rows are drawn at random with the spread of the existing ones rather than at their mean
    (transformers' default when resizing): rows that start equal would leave the phrases
    indistinguishable to the model, which is what this is for.
    """
    import torch

    wanted = list(dict.fromkeys(phrases))
    for phrase in wanted:
        if not isinstance(phrase, str) or not phrase.strip():
            raise PhraseTokenError(f"phrase {phrase!r}: a phrase must be a non-empty string")
    # Only an added token is cut whole wherever it appears; a BPE token spelling the phrase alone
    # is still merged with the text around it (the tiny tokenizer holds "no longer needed" so).
    added = tokenizer.get_added_vocab()
    new = [phrase for phrase in wanted if phrase not in added]
    if new:
        from tokenizers import AddedToken

        before = len(tokenizer)
        # single_word: a phrase is cut out of the text around it, never out of a longer name
        # (a status word inside a tool's snake_case name must leave that name cut as learnt).
        tokenizer.add_tokens([AddedToken(phrase, single_word=not within_words) for phrase in new])
        embeddings = model.get_input_embeddings().weight
        spread = float(embeddings.detach().float().std())
        model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            rows = model.get_input_embeddings().weight
            fresh = torch.randn(len(tokenizer) - before, rows.shape[1], generator=generator) * spread
            rows[before:] = fresh.to(rows.dtype)
            output = model.get_output_embeddings()
            if output is not None and output.weight.data_ptr() != rows.data_ptr():
                output.weight[before:] = fresh.to(output.weight.dtype)
    ids = {phrase: tokenizer.convert_tokens_to_ids(phrase) for phrase in wanted}
    for phrase, token_id in ids.items():
        # Where the phrase must be cut out: a call's argument, or glued to an identifier's digits.
        context = f'"order_id": "{phrase}1234567"' if within_words else f'"reason": "{phrase}"}}'
        in_text = tokenizer(context, add_special_tokens=False)["input_ids"]
        if tokenizer(phrase, add_special_tokens=False)["input_ids"] != [token_id] or token_id not in in_text:
            raise PhraseTokenError(f"phrase {phrase!r} is not cut as one token (id {token_id}) after adding it")
    return ids
