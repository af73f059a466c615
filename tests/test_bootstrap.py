"""The tiny policy builds and loads offline, exactly as a real checkpoint would."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers_training import level1_records, tiny_spec


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, world):
    from training.tiny.bootstrap import build_tiny_policy

    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    out = tmp_path_factory.mktemp("models") / "base"
    return build_tiny_policy(out, level1_records(world, 40, seed=1), tiny_spec())


def test_folder_is_a_loadable_checkpoint(tiny_base):
    from transformers import PreTrainedTokenizerFast

    from training.checkpoints import load_policy
    from training.tiny.bootstrap import qwen25_chat_template

    assert (tiny_base / "model.safetensors").exists()
    model, tokenizer = load_policy(tiny_base)
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    # byte-identical to TRL's shipped template, so its tool-call parser recognises it
    assert tokenizer.chat_template == qwen25_chat_template()
    assert model.config.vocab_size == len(tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    assert 50_000 < n_params < 20_000_000
    assert model.config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert json.loads((tiny_base / "config.json").read_text())["model_type"] == "qwen2"


def test_digits_are_single_tokens_and_text_round_trips(tiny_base):
    from training.checkpoints import load_tokenizer

    tokenizer = load_tokenizer(tiny_base)
    text = 'Order #W6067464: {"order_id": "#W6067464"} costs $1,234.50'
    ids = tokenizer(text)["input_ids"]
    pieces = tokenizer.convert_ids_to_tokens(ids)
    assert all(len(p.strip("Ġ")) == 1 for p in pieces if any(c.isdigit() for c in p))
    assert tokenizer.decode(ids) == text
    email = tokenizer.convert_ids_to_tokens(tokenizer("my email is zoe.nguyen42@example.com")["input_ids"])
    assert "".join(email[-13:-1]) == "zoe.nguyen42" and all(len(p) == 1 for p in email[-13:-1])
    for special in ("<|im_start|>", "<|im_end|>", "<tool_call>", "</tool_call>"):
        assert len(tokenizer(special)["input_ids"]) == 1


def test_digit_groups_cut_every_run_from_its_left_the_same_in_the_message_and_the_call(world):
    from training.tiny.bootstrap import corpus_from_records, name_words, train_tokenizer

    records = level1_records(world, 20, seed=3)
    tokenizer = train_tokenizer(corpus_from_records(records), 6000, names=name_words(records), digit_group=2)
    # Every group of two digits is one token, whatever the corpus happened to contain.
    assert all(len(tokenizer(f"{n:02d}")["input_ids"]) == 1 for n in range(100))
    said = "Hi, zip code 60501. Please cancel order #W6067464, reason: no longer needed."
    call = '{"order_id": "#W6067464", "zip": "60501"}'
    for run, groups in (("6067464", ["60", "67", "46", "4"]), ("60501", ["60", "50", "1"])):
        for text in (said, call):
            pieces = [tokenizer.decode([i]) for i in tokenizer(text)["input_ids"]]
            assert any(pieces[i : i + len(groups)] == groups for i in range(len(pieces))), (run, text, pieces)
        assert tokenizer.decode(tokenizer(said)["input_ids"]) == said
    with pytest.raises(ValueError, match="digit_group must be at least 1"):
        train_tokenizer(["x"], 100, digit_group=0)


def test_a_customers_name_is_the_same_tokens_in_the_message_and_in_the_call(tiny_base):
    # Merges may span spaces, but never into a name: otherwise a frequent customer's name fuses
    # with the call's JSON scaffolding and no other customer's call can reuse those tokens.
    from training.checkpoints import load_tokenizer

    tokenizer = load_tokenizer(tiny_base)
    call = '{"name": "find_user_id_by_name_zip", "arguments": {"first_name": "Nora", "last_name": "Dubois"'
    said = "Hi, I am Nora Dubois, zip code 60501."
    for name in ("Nora", "Dubois"):
        pieces = tokenizer.convert_ids_to_tokens(tokenizer(name)["input_ids"])
        for text in (call, said):
            tokens = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
            assert any(tokens[i : i + len(pieces)] == pieces for i in range(len(tokens))), (name, text, tokens)


def test_names_are_spelled_a_letter_a_token_while_the_policys_fixed_words_stay_whole(tiny_base, world):
    # A name copies like digits only if it is made of the same few tokens whoever the customer is:
    # a training customer's name and one the tokenizer never saw are both spelled. The system
    # policy's words are not, or every prompt would grow by a token a letter.
    from tests.helpers_retail import SYSTEM_POLICY
    from training.checkpoints import load_tokenizer
    from training.tiny.bootstrap import name_words

    tokenizer = load_tokenizer(tiny_base)
    known = sorted(name_words(level1_records(world, 40, seed=1)))
    assert known, "the records name their customers"
    for name in (known[0], "Qwyzzel"):
        text = f'Hi, I am {name}. {{"first_name": "{name}"'
        pieces = tokenizer.convert_ids_to_tokens(tokenizer(text)["input_ids"])
        letters = [p for p in pieces if p in set(name)]
        assert "".join(letters).count(name) == 2, (name, pieces)
    policy = tokenizer.convert_ids_to_tokens(tokenizer(SYSTEM_POLICY)["input_ids"])
    assert "You" in policy and "Rules" in policy
    assert tokenizer.decode(tokenizer("Qwyzzel Ng of Phoenix")["input_ids"]) == "Qwyzzel Ng of Phoenix"


def test_trl_parses_tool_calls_with_this_tokenizer(tiny_base):
    from trl.chat_template_utils import add_response_schema, parse_response

    from training.checkpoints import load_tokenizer

    tokenizer = add_response_schema(load_tokenizer(tiny_base))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "status of #W1?"}], add_generation_prompt=True, tokenize=True
    )["input_ids"]
    answer = '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W1"}}\n</tool_call><|im_end|>'
    parsed = parse_response(tokenizer, tokenizer(answer)["input_ids"], prefix=list(prompt))
    assert parsed["tool_calls"][0]["function"] == {"name": "get_order_details", "arguments": {"order_id": "#W1"}}


def test_missing_local_path_is_a_clear_error(tmp_path):
    from training.checkpoints import ModelLoadError, load_policy

    with pytest.raises(ModelLoadError, match="not a folder"):
        load_policy(tmp_path / "nope")


def test_ensure_base_policy_reuses_the_folder(tmp_path, world):
    from training.tiny.bootstrap import ensure_base_policy

    records = level1_records(world, 10, seed=2)
    first = ensure_base_policy(tmp_path, records, spec=tiny_spec())
    stamp = (first / "model.safetensors").stat().st_mtime_ns
    assert ensure_base_policy(tmp_path, records, spec=tiny_spec()) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp


def test_ensure_base_policy_with_copy_pretraining_builds_once_on_top_of_the_base(tmp_path, world):
    from safetensors.torch import load_file

    from training.tiny.bootstrap import TOKENIZER_FORMAT, ensure_base_policy

    records = level1_records(world, 10, seed=2)
    copied = ensure_base_policy(tmp_path, records, spec=tiny_spec(), copy_steps=3)
    base = tmp_path / f"base-t{TOKENIZER_FORMAT}"
    assert copied == tmp_path / f"{base.name}-copy3" and (base / "model.safetensors").exists()
    before, after = load_file(str(base / "model.safetensors")), load_file(str(copied / "model.safetensors"))
    assert set(before) == set(after) and any(not before[k].equal(after[k]) for k in before)
    stamp = (copied / "model.safetensors").stat().st_mtime_ns
    assert ensure_base_policy(tmp_path, records, spec=tiny_spec(), copy_steps=3) == copied
    assert (copied / "model.safetensors").stat().st_mtime_ns == stamp
