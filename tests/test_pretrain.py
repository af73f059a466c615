"""Copy pretraining: the batches teach copying (loss only on the repeat) and the result loads back."""

from __future__ import annotations

import random

import pytest

from tests.helpers_training import level1_records, tiny_spec


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, world):
    from training.tiny.bootstrap import build_tiny_policy

    return build_tiny_policy(tmp_path_factory.mktemp("models") / "base", level1_records(world, 30, seed=2), tiny_spec())


def test_identifier_tokens_are_digits_letters_and_capitalised_words(tiny_base):
    from training.checkpoints import load_tokenizer
    from training.tiny.pretrain import identifier_tokens

    tokenizer = load_tokenizer(tiny_base)
    texts = [
        tokenizer.convert_tokens_to_string([tokenizer.convert_ids_to_tokens(i)]) for i in identifier_tokens(tokenizer)
    ]
    assert {str(d) for d in range(10)} <= set(texts)
    assert all(len(t) == 1 and t.isalnum() or (t.isalpha() and t[0].isupper() and t[1:].islower()) for t in texts)
    assert any(len(t) > 1 for t in texts)  # the fixed words ("You", a city); names are spelled


def test_a_batch_repeats_the_marked_span_and_trains_only_on_the_repeat():
    from training.tiny.pretrain import CopySettings, copy_batch

    settings = CopySettings(batch_size=16, min_span=3, max_span=6)
    ids, labels, attention = copy_batch(random.Random(0), list(range(100, 140)), settings, mark=1, sep=2, pad=0)
    for row, lab, mask in zip(ids.tolist(), labels.tolist(), attention.tolist()):
        length = sum(mask)
        row, lab = row[:length], lab[:length]
        trained = [t for t in lab if t != -100]
        assert settings.min_span <= len(trained) <= settings.max_span
        assert row[-len(trained) :] == trained and row[-len(trained) - 1] == 2  # after the separator
        start = row.index(1) + 1  # the marker announces the span's first occurrence
        assert row[start : start + len(trained)] == trained
        assert all(t == -100 for t in lab[: -len(trained)])


def test_digit_spans_are_digit_runs_shown_among_other_digit_runs():
    from training.tiny.pretrain import CopySettings, copy_batch

    words, digits = list(range(100, 140)), list(range(10, 20))
    settings = CopySettings(batch_size=64, digit_share=0.5)
    ids, labels, attention = copy_batch(random.Random(1), words, settings, mark=1, sep=2, pad=0, digits=digits)
    numeric = 0
    for row, lab, mask in zip(ids.tolist(), labels.tolist(), attention.tolist()):
        length = sum(mask)
        trained = [t for t in lab[:length] if t != -100]
        if not set(trained) <= set(digits):
            continue
        numeric += 1
        assert 5 <= len(trained) <= 10
        context = row[: length - len(trained) - 1]  # before the separator
        span_at = context.index(1) + 1
        others = context[: span_at - 1] + context[span_at + len(trained) :]
        assert sum(t in digits for t in others) >= 10  # a distractor run before and after the span
    assert 16 <= numeric <= 48  # about half of 64
    plain = copy_batch(random.Random(1), words, CopySettings(batch_size=8), 1, 2, 0, digits)[0]
    assert not set(plain.flatten().tolist()) & set(digits)  # digit_share 0: as before


def test_copy_pretraining_saves_a_policy_that_loads_the_same_way(tiny_base, tmp_path):
    from training.checkpoints import load_policy
    from training.tiny.pretrain import CopySettings, copy_pretrain

    summary = copy_pretrain(tiny_base, tmp_path / "copy", CopySettings(steps=4, batch_size=4, torch_threads=1))
    assert summary["steps"] == 4 and summary["final_loss"] > 0
    model, tokenizer = load_policy(tmp_path / "copy")
    original, _ = load_policy(tiny_base)
    moved = [
        name
        for (name, p), (_, q) in zip(model.named_parameters(), original.named_parameters())
        if not p.detach().equal(q.detach())
    ]
    assert moved and len(tokenizer) == model.config.vocab_size


def test_the_copy_markers_are_tokens_of_their_own_not_the_chat_templates(tiny_base):
    from training.checkpoints import load_tokenizer
    from training.tiny.bootstrap import MARKUP_TOKENS, SPECIAL_TOKENS
    from training.tiny.pretrain import COPY_TOKENS, identifier_tokens

    tokenizer = load_tokenizer(tiny_base)
    ids = [tokenizer.convert_tokens_to_ids(token) for token in COPY_TOKENS]
    assert tokenizer.unk_token_id not in ids and len(set(ids)) == 2
    template = {tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS + MARKUP_TOKENS}
    assert not template & set(ids)
    # A marker is never a token to copy, and a rendered conversation never contains one.
    assert not set(ids) & set(identifier_tokens(tokenizer))
    rendered = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=True)
    assert not set(ids) & set(rendered if isinstance(rendered, list) else rendered["input_ids"])


def test_copy_pretraining_refuses_a_tokenizer_without_the_markers(tiny_base, tmp_path):
    import shutil

    from tokenizers import Tokenizer

    from training.tiny.pretrain import COPY_TOKENS, CopySettings, copy_pretrain

    # The same model with a tokenizer whose copy markers are renamed: an older build's tokenizer.
    older = tmp_path / "older"
    shutil.copytree(tiny_base, older)
    text = (older / "tokenizer.json").read_text()
    for token in COPY_TOKENS:
        text = text.replace(token, token.replace("|", "#"))
    Tokenizer.from_str(text).save(str(older / "tokenizer.json"))
    config = (older / "tokenizer_config.json").read_text()
    for token in COPY_TOKENS:
        config = config.replace(token, token.replace("|", "#"))
    (older / "tokenizer_config.json").write_text(config)
    with pytest.raises(ValueError, match="no copy markers"):
        copy_pretrain(older, tmp_path / "copy", CopySettings(steps=1, batch_size=2, torch_threads=1))
