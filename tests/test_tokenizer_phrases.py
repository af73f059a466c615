"""Isolated phrases in the tiny tokenizer (`train_tokenizer(isolated_phrases=...)`).

A tool schema's enumerated value (a cancel reason) must be the same tokens where the customer says
it and where the call carries it, or choosing it is an association rather than a copy; and the
default must stay the shipped tokenizer, byte for byte.
"""

from __future__ import annotations

import json

import pytest

from training.tiny.bootstrap import enum_values, phrase_pattern, train_tokenizer

REASONS = ("no longer needed", "ordered by mistake")
VOCAB = 1000


def _corpus() -> list[str]:
    """Openings and cancel calls enough alike that BPE fuses a reason into the JSON around it."""
    texts = []
    for i in range(60):
        for reason in REASONS:
            order_id = f"#W{1000000 + 7919 * i:07d}"
            texts.append(f"Hi. Please cancel order {order_id}, reason: {reason}.")
            call = {"name": "cancel_pending_order", "arguments": {"order_id": order_id, "reason": reason}}
            texts.append(json.dumps(call))
    return texts


@pytest.fixture(scope="module")
def corpus() -> list[str]:
    return _corpus()


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def _contains(ids: list[int], part: list[int]) -> bool:
    return any(ids[i : i + len(part)] == part for i in range(len(ids) - len(part) + 1))


def test_a_phrase_is_the_same_tokens_in_the_message_and_in_the_call(corpus):
    tokenizer = train_tokenizer(corpus, VOCAB, digit_group=2, isolated_phrases=REASONS)
    for reason in REASONS:
        phrase = _ids(tokenizer, reason)
        said = _ids(tokenizer, f"Hi. Please cancel order #W1234567, reason: {reason}.")
        called = _ids(tokenizer, f'{{"order_id": "#W1234567", "reason": "{reason}"}}}}')
        assert _contains(said, phrase) and _contains(called, phrase), (reason, phrase, said, called)


def test_without_phrases_the_call_fuses_the_reason_into_its_json(corpus):
    # The reason the option exists: on this corpus the default merges the reason with its quotes.
    tokenizer = train_tokenizer(corpus, VOCAB, digit_group=2)
    called = _ids(tokenizer, '{"order_id": "#W1234567", "reason": "ordered by mistake"}}')
    assert not _contains(called, _ids(tokenizer, "ordered by mistake"))


def test_the_default_is_the_tokenizer_trained_without_the_argument(corpus):
    plain = train_tokenizer(corpus, VOCAB, digit_group=2)
    default = train_tokenizer(corpus, VOCAB, digit_group=2, isolated_phrases=())
    assert default.backend_tokenizer.to_str() == plain.backend_tokenizer.to_str()


def test_a_short_phrase_does_not_cut_longer_words():
    import re

    pattern = re.compile(phrase_pattern(["no", "no longer needed"]))
    assert [m.group() for m in pattern.finditer("no, not now: no longer needed")] == ["no", "no longer needed"]
    assert phrase_pattern([]) == ""


def test_enum_values_come_from_anywhere_in_the_schemas():
    schemas = [
        {"function": {"parameters": {"properties": {"reason": {"type": "string", "enum": ["b", "a"]}}}}},
        {"function": {"parameters": {"properties": {"cabins": {"type": "array", "items": {"enum": ["a", "c", 1]}}}}}},
        {"function": {"parameters": {"properties": {"order_id": {"type": "string"}}}}},
    ]
    assert enum_values(schemas) == ["a", "b", "c"]
