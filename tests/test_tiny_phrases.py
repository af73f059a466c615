"""Phrase tokens added to a trained tiny model (`training.tiny.phrases.add_phrase_tokens`).

A tiny tokenizer trained on level-1 conversations cuts a cancel reason one way in the customer's
opening and another in the call; adding the reason as a token of its own must make both texts hold
that token, leave every other text cut as before and the model's existing outputs unchanged, and
survive a save and a load through the product's `from_pretrained` path. The shipped agent is
built so (its recipe's phrase stage).
"""

from __future__ import annotations

import pytest

from tests.helpers_training import level1_records, tiny_spec
from training.checkpoints import load_policy, save_final_model
from training.tiny.manifest import SHIPPED_AGENT_DIR
from training.tiny.phrases import PhraseTokenError, add_phrase_tokens

REASONS = ("no longer needed", "ordered by mistake")
OPENING = "Hi, I am Ava Li, zip code 12345. Please cancel order #W1234567, reason: {}."
CALL = '{{"name": "cancel_pending_order", "arguments": {{"order_id": "#W1234567", "reason": "{}"}}}}'
UNRELATED = 'I need no help, thanks. {"name": "get_order_details", "arguments": {"order_id": "#W7654321"}}'


def _ids(tokenizer, text: str) -> list[int]:
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def built(world, tmp_path_factory):
    """A tiny policy built from level-1 conversations, without phrase tokens (saved once)."""
    from training.tiny.bootstrap import build_tiny_policy

    return build_tiny_policy(tmp_path_factory.mktemp("phrases") / "base", level1_records(world, 40), tiny_spec())


@pytest.fixture()
def shipped(built):
    return load_policy(built)


def test_a_recipe_tokenizer_cuts_the_reason_differently_in_the_opening_and_the_call(shipped):
    # Why the module exists: the call's choice of reason is no token of the customer's opening.
    _, tokenizer = shipped
    for reason, other in (REASONS, reversed(REASONS)):
        said, called = _ids(tokenizer, OPENING.format(reason)), _ids(tokenizer, CALL.format(reason))
        choosing = set(called) - set(_ids(tokenizer, CALL.format(other)))
        assert choosing and not choosing & set(said), (reason, [tokenizer.decode([t]) for t in choosing])


def test_the_shipped_agent_holds_each_reason_as_one_token_of_the_opening_and_the_call():
    _, tokenizer = load_policy(SHIPPED_AGENT_DIR)
    for reason in REASONS:
        (token,) = _ids(tokenizer, reason)
        assert tokenizer.get_added_vocab()[reason] == token
        assert token in _ids(tokenizer, OPENING.format(reason)) and token in _ids(tokenizer, CALL.format(reason))


def test_each_phrase_becomes_one_token_held_by_the_opening_and_the_call(shipped):
    model, tokenizer = shipped
    ids = add_phrase_tokens(model, tokenizer, REASONS)
    assert len(set(ids.values())) == 2
    for reason, token in ids.items():
        assert _ids(tokenizer, reason) == [token]
        assert token in _ids(tokenizer, OPENING.format(reason))
        assert token in _ids(tokenizer, CALL.format(reason))


def test_other_text_is_cut_as_before_and_old_outputs_do_not_move(shipped):
    import torch

    model, tokenizer = shipped
    before_ids = _ids(tokenizer, UNRELATED)
    size = len(tokenizer)
    with torch.no_grad():
        before = model(torch.tensor([before_ids])).logits[0]
    add_phrase_tokens(model, tokenizer, REASONS)
    assert _ids(tokenizer, UNRELATED) == before_ids
    with torch.no_grad():
        after = model(torch.tensor([before_ids])).logits[0]
    assert after.shape[-1] == size + 2
    assert torch.allclose(after[:, :size], before, atol=1e-5)


def test_a_phrase_inside_a_longer_name_leaves_the_name_cut_as_before():
    """An order status as a token is cut out of a result and a message, never out of the tool names
    that contain it (`cancel_pending_order`), which the shipped agent learnt cut as they were, and
    the saved tokenizer keeps that."""
    model, tokenizer = load_policy(SHIPPED_AGENT_DIR)
    names = '{"name": "cancel_pending_order", "arguments": {}} modify_pending_order_items'
    before = _ids(tokenizer, names)
    (token,) = add_phrase_tokens(model, tokenizer, ["pending"]).values()
    assert _ids(tokenizer, names) == before and token not in before
    assert token in _ids(tokenizer, '"status": "pending", "user_id"')
    assert token in _ids(tokenizer, "Order #W1234567 is currently pending.")


def test_a_marker_is_cut_out_of_every_identifier_it_opens():
    """`within_words`: the order id's `#W`, merged by the shipped tokenizer with the words before it
    (differently in the customer's words and in a call), becomes the one token every mention of an
    order id starts with, then the id's digits cut as before."""
    model, tokenizer = load_policy(SHIPPED_AGENT_DIR)
    said = "Know the status of order #W8791360."
    called = '{"name": "get_order_details", "arguments": {"order_id": "#W8791360"}}'
    digits = _ids(tokenizer, "8791360")
    before_said, before_called = _ids(tokenizer, said), _ids(tokenizer, called)
    assert not set(before_said) & set(before_called) - set(digits)  # no token but the digits' in common
    (token,) = add_phrase_tokens(model, tokenizer, ["#W"], within_words=True).values()
    for text in (said, called, "Could you tell me the reason for cancelling order #W1234567?"):
        ids = _ids(tokenizer, text)
        assert token in ids, text
        number = text.split("#W")[1][:7]
        assert ids[ids.index(token) + 1 : ids.index(token) + 1 + len(_ids(tokenizer, number))] == _ids(
            tokenizer, number
        )
    # As a single word (the default, for phrases) it would stay inside the identifier.
    other, other_tokenizer = load_policy(SHIPPED_AGENT_DIR)
    (single,) = add_phrase_tokens(other, other_tokenizer, ["#W"]).values()
    assert single not in _ids(other_tokenizer, said) and single not in _ids(other_tokenizer, called)


def test_new_rows_are_distinct_draws_with_the_old_rows_spread(shipped):
    import torch

    model, tokenizer = shipped
    old = model.get_input_embeddings().weight.detach().clone()
    ids = add_phrase_tokens(model, tokenizer, REASONS, seed=3)
    rows = model.get_input_embeddings().weight.detach()
    assert torch.equal(rows[: old.shape[0]], old)
    first, second = (rows[i] for i in ids.values())
    cosine = float(torch.nn.functional.cosine_similarity(first, second, dim=0))
    assert cosine < 0.5, cosine  # mean resizing would give 1.0
    spread = float(old.float().std())
    assert 0.5 * spread < float(rows[list(ids.values())].std()) < 2 * spread


def test_adding_again_keeps_the_ids_and_the_vocabulary(shipped):
    model, tokenizer = shipped
    first = add_phrase_tokens(model, tokenizer, REASONS)
    size = len(tokenizer)
    assert add_phrase_tokens(model, tokenizer, reversed(REASONS)) == first
    assert len(tokenizer) == size == model.get_input_embeddings().weight.shape[0]


def test_saved_and_loaded_the_phrases_stay_whole(shipped, tmp_path):
    import torch

    model, tokenizer = shipped
    ids = add_phrase_tokens(model, tokenizer, REASONS)
    save_final_model(model, tokenizer, tmp_path / "phrased")
    loaded, loaded_tokenizer = load_policy(tmp_path / "phrased")
    assert {reason: _ids(loaded_tokenizer, reason) for reason in REASONS} == {r: [i] for r, i in ids.items()}
    text = _ids(loaded_tokenizer, OPENING.format(REASONS[1]))
    with torch.no_grad():
        assert torch.allclose(loaded(torch.tensor([text])).logits, model(torch.tensor([text])).logits, atol=1e-4)


@pytest.mark.parametrize("phrase", ["", "   ", None, 3])
def test_a_phrase_that_is_not_text_is_refused_by_name(shipped, phrase):
    model, tokenizer = shipped
    with pytest.raises(PhraseTokenError, match="non-empty string"):
        add_phrase_tokens(model, tokenizer, ["no longer needed", phrase])
