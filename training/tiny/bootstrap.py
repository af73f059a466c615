"""A tiny tool-calling policy built offline: a BPE tokenizer and a Qwen2 model of a few million weights.

The demo and the tests must run with no model hub, yet exercise exactly the code path a real
checkpoint takes (`from_pretrained` on a folder). So the tokenizer is trained here with the
`tokenizers` library on the text the policy will see (world records, conversations, tool schemas,
the system policy), saved with TRL's shipped `qwen2_5.jinja` chat template byte-for-byte (TRL parses tool
calls only under a template it ships), and always loaded back with
`PreTrainedTokenizerFast.from_pretrained` (never AutoTokenizer, which would swap in the stock Qwen2
tokenizer for a `qwen2` config).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from domains.registry import DEFAULT_DOMAIN
from training.fields import as_dict
from training.sandbox.prompting import domain_of, system_policy, tool_schemas
from training.tiny.pretrain import COPY_TOKENS, CopySettings, copy_pretrain
from training.tiny.relabel import customer_names

# TRL's tool-call parsing and the chat template both key off these exact strings.
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
MARKUP_TOKENS = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
_EMAIL = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]+"
_EMAIL_LOCAL_CHAR = r"[A-Za-z0-9._%+-](?=[A-Za-z0-9._%+-]*@)"
_CAPITALISED_WORD = r"[A-Z][a-z]+"
# Bumped whenever the tokenizer's rules change (2: customers' names spelled a letter a token; 3:
# digit runs optionally cut into groups, `TinyModelSpec.digit_group`; 4: the copy task's markers), so
# `ensure_base_policy` builds a new base rather than reusing one made under the old rules.
TOKENIZER_FORMAT = 4


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny Qwen2 policy. Defaults: about 1.5M parameters, fast on two CPU cores."""

    vocab_size: int = 6000
    hidden_size: int = 128
    intermediate_size: int = 384
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    # Long enough for the system policy + every tool schema + a short level-1 conversation.
    max_position_embeddings: int = 2048
    seed: int = 0
    # Digits a token in identifiers (train_tokenizer's `digit_group`).
    digit_group: int = 1


def qwen25_chat_template() -> str:
    """TRL's shipped Qwen2.5 template, byte-identical (its response parser matches on the string)."""
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def corpus_from_records(records: Iterable[dict[str, Any]]) -> list[str]:
    """Training text for the tokenizer: each record's world slice, scenario and conversation."""
    texts: list[str] = []
    for record in records:
        for key in ("initial_state", "user_scenario", "gold"):
            value = record.get(key)
            if value:
                texts.append(value if isinstance(value, str) else json.dumps(value, sort_keys=True))
        for message in record.get("messages") or ():
            texts.append(message.get("content") or "")
            for call in message.get("tool_calls") or ():
                texts.append(json.dumps({"name": call.get("name"), "arguments": call.get("arguments")}))
    return texts


def _rendered_examples(domain: str = DEFAULT_DOMAIN) -> list[str]:
    """The chat template rendered around the domain's policy and tool schemas, so its scaffolding
    gets compact tokens."""
    from jinja2 import Template

    policy, schemas = system_policy(domain), list(tool_schemas(None, domain))
    messages = [
        {"role": "system", "content": policy},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "think", "arguments": {"thought": "x"}}]},
        {"role": "tool", "content": "ok"},
    ]
    text = Template(qwen25_chat_template()).render(messages=messages, tools=schemas, add_generation_prompt=True)
    return [text, policy, json.dumps(schemas)]


def spelled_word_pattern(whole_words: Iterable[str]) -> str:
    """A regex matching each letter of a piece that is a capitalised word not in `whole_words`.

    It runs on the pieces the capitalised-word split leaves, one piece at a time: the capital
    matches when the whole piece is a capitalised word outside the list, and `\\G` (where the
    previous match ended) chains the lowercase letters after it, one match each.
    """
    kept = sorted({w for w in whole_words if re.fullmatch(_CAPITALISED_WORD, w)})
    unless = rf"(?!(?:{'|'.join(kept)})\z)" if kept else ""
    return rf"\A{unless}[A-Z](?=[a-z]+\z)|\G(?<=[A-Za-z])[a-z]"


def fixed_words(texts: Iterable[str], names: Iterable[str]) -> set[str]:
    """Capitalised words of `texts` that are not among `names`: the words kept whole."""
    found = {w for text in texts for w in re.findall(_CAPITALISED_WORD, text)}
    return found - set(names)


def name_words(records: Iterable[dict[str, Any]]) -> set[str]:
    """The capitalised words of every customer name the records' world slices and scenarios give."""
    found: set[str] = set()
    for record in records:
        users = (as_dict(record.get("initial_state")).get("users") or {}).values()
        for user in users:
            found.update(str(v) for v in (user.get("name") or {}).values() if v)
        found.update(customer_names(record))
    return {word for name in found for word in re.findall(_CAPITALISED_WORD, name)}


def digit_groups(width: int) -> list[str]:
    """Every group of `width` digits, each written once per line, so BPE learns all of them."""
    if width < 1:
        raise ValueError(f"digit_group must be at least 1, got {width}")
    if width == 1:
        return []
    line = " ".join(f"{n:0{width}d}" for n in range(10**width))
    # Repeated so that each group outranks the corpus's rarer merges.
    return [line] * 64


def enum_values(schemas: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every string in an `enum` list anywhere in `schemas` (tool JSON schemas), sorted, each once."""
    found: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, Mapping):
            found.update(v for v in node.get("enum") or () if isinstance(v, str))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    for schema in schemas:
        visit(schema)
    return sorted(found)


def phrase_pattern(phrases: Iterable[str]) -> str:
    """A regex matching any of `phrases` as whole words, or "" for none.

    Longest first, so a phrase that begins another never cuts the longer one short. Bounded by
    non-word characters, so a short value (an enum's "no") does not cut "not" or "know" apart.
    """
    kept = sorted({p for p in phrases if p}, key=lambda p: (-len(p), p))
    if not kept:
        return ""
    return rf"(?<!\w)(?:{'|'.join(re.escape(p) for p in kept)})(?!\w)"


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 6000,
    names: Iterable[str] = (),
    digit_group: int = 1,
    domain: str = DEFAULT_DOMAIN,
    *,
    isolated_phrases: Iterable[str] = (),
):
    """Byte-level BPE in which identifiers are spelled: `digit_group` digits a token, a letter of a name.

    Capitalised words are spelled one letter a token except the corpus's fixed words: those of
    `texts` outside `names` (the customers' names, which must always be spelled).

    The byte-level step runs without its word-splitting regex, so merges may span spaces and
    punctuation: the JSON scaffolding of tool schemas and calls collapses into a few tokens
    (the system prompt with every tool schema drops from about 3,000 tokens to about 400), which
    is what makes multi-turn rollouts affordable on a CPU.

    `isolated_phrases` (e.g. `enum_values` of the tool schemas) are each cut out as a piece of
    their own, so such a phrase tokenises the same in a customer's message and in a tool call's
    argument. None by default: the shipped tokenizer is trained without them.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = list(texts) + _rendered_examples(domain) + digit_groups(digit_group)
    whole_words = fixed_words(corpus, names)
    phrases = phrase_pattern(isolated_phrases)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            # Each listed phrase is its own piece, first, so the merges that span punctuation can
            # not fuse it into the JSON around it (`", "reason": "no longer needed"}}` was one
            # token): the value a call must carry is then the same tokens the customer said.
            # Only when phrases are given, so the default tokenizer is the shipped one.
            *([pre_tokenizers.Split(Regex(phrases), behavior="isolated")] if phrases else []),
            # An email is its own piece, tokenised the same wherever it appears, so it can be copied from
            # the customer's message into a tool call (a merge into the text around it could not be).
            pre_tokenizers.Split(Regex(_EMAIL), behavior="isolated"),
            # ...and its local part is spelled one character a token, like digits: a new customer's
            # name then uses only tokens the policy has already emitted, so copying it generalises.
            pre_tokenizers.Split(Regex(_EMAIL_LOCAL_CHAR), behavior="isolated"),
            # A capitalised word (a name, a city, a street) is its own piece too. Without this the
            # space-spanning merges fuse a frequent customer's name into the tool-call scaffolding
            # (`..."first_name": "Nora", "last_name": "`), a token no other customer's call can use.
            pre_tokenizers.Split(Regex(_CAPITALISED_WORD), behavior="isolated"),
            # ...and spelled one letter a token, unless it is one of the corpus's fixed words. As one
            # token, a name never seen in training is a token the policy has never emitted, and a
            # tiny policy then writes a name it knows (one constant name in every call) instead of
            # copying it. Spelled, that name uses only letters the policy has copied before. The
            # fixed words (the system policy's, the catalogue's) stay whole, so the prompt read at
            # every turn stays short.
            pre_tokenizers.Split(Regex(spelled_word_pattern(whole_words)), behavior="isolated"),
            # A run of digits is cut into groups of `digit_group` from its left, so an identifier
            # tokenises the same wherever it appears. With one digit a token, a zip or an order id
            # is a string over ten symbols that repeat, and a tiny policy copying it loses its
            # place (writes 34425 for 43325); groups of two make each token of a 7-digit order id
            # one of a hundred, so the token after the one just copied is rarely ambiguous.
            pre_tokenizers.Split(Regex(rf"\d{{1,{digit_group}}}"), behavior="isolated")
            if digit_group > 1
            else pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS) + list(MARKUP_TOKENS) + list(COPY_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=list(SPECIAL_TOKENS[1:]) + list(COPY_TOKENS),
    )
    fast.chat_template = qwen25_chat_template()
    return fast


def build_tiny_policy(
    out_dir: str | os.PathLike,
    records: Iterable[dict[str, Any]],
    spec: TinyModelSpec = TinyModelSpec(),
    extra_texts: Iterable[str] = (),
    *,
    isolated_phrases: Iterable[str] = (),
) -> Path:
    """Train the tokenizer, initialise a Qwen2 model, save both (safetensors) under `out_dir`.

    `isolated_phrases` goes to `train_tokenizer` (none by default, as the shipped agent is built)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records = list(records)
    tokenizer = train_tokenizer(
        list(corpus_from_records(records)) + list(extra_texts),
        spec.vocab_size,
        names=name_words(records),
        digit_group=spec.digit_group,
        domain=domain_of(records[0]) if records else DEFAULT_DOMAIN,
        isolated_phrases=isolated_phrases,
    )
    eos_id = tokenizer.convert_tokens_to_ids(EOS_TOKEN)
    pad_id = tokenizer.convert_tokens_to_ids(PAD_TOKEN)
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
        bos_token_id=None,
    )
    torch.manual_seed(spec.seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=eos_id, pad_token_id=pad_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return out


def ensure_base_policy(
    models_dir: str | os.PathLike,
    records: Iterable[dict[str, Any]],
    name: str | None = None,
    spec: TinyModelSpec = TinyModelSpec(),
    copy_steps: int = 0,
) -> Path:
    """The tiny base policy under `models_dir/name` (default `base-t<TOKENIZER_FORMAT>`), built once and reused.

    `copy_steps` > 0 adds copy pretraining (training.tiny.pretrain), done once, into `name-copy`.
    """
    records = list(records)
    domain = domain_of(records[0]) if records else DEFAULT_DOMAIN
    # One cached base per domain: its tokenizer is trained on that domain's policy and tools.
    name = name or (f"base-t{TOKENIZER_FORMAT}" if domain == DEFAULT_DOMAIN else f"{domain}-base-t{TOKENIZER_FORMAT}")
    out = Path(models_dir) / name
    if not ((out / "config.json").exists() and (out / "tokenizer.json").exists()):
        build_tiny_policy(out, records, spec)
    if copy_steps <= 0:
        return out

    copied = Path(models_dir) / f"{name}-copy{copy_steps}"
    if not (copied / "config.json").exists():
        copy_pretrain(out, copied, CopySettings(steps=copy_steps))
    return copied
