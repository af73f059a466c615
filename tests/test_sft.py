"""SFT warm start on verified trajectories: the tiny policy learns to emit parseable tool calls."""

from __future__ import annotations

import pytest

from tests.helpers_training import level1_records, tiny_spec

pytestmark = pytest.mark.slow


def test_replayed_trajectories_are_verified_and_use_environment_results(world):
    from training.sft import replay_trajectory, sft_rows

    records = level1_records(world, 6, seed=3)
    messages = replay_trajectory(records[0])
    assert messages[0]["role"] == "system" and messages[1]["content"] == records[0]["messages"][1]["content"]
    tool_results = [m["content"] for m in messages if m["role"] == "tool"]
    assert "(recorded)" not in tool_results  # the environment's results, not the recorded placeholders
    broken = dict(
        records[1],
        gold={
            "actions": [
                {"name": "cancel_pending_order", "arguments": {"order_id": "#W0", "reason": "no longer needed"}}
            ],
            "outputs": [],
        },
    )
    assert replay_trajectory(broken) is None  # does not verify: left out of SFT
    assert len(sft_rows(records + [broken])) == len(records)


def test_a_records_own_compact_field_picks_its_form_whatever_the_settings(world):
    from training.sft import replay_trajectory

    record = level1_records(world, 1, seed=4)[0]

    def order_result(rec, compact):
        messages = replay_trajectory(rec, compact=compact)
        return next(m["content"] for m in messages if m.get("name") == "get_order_details")

    short, full = order_result(record, True), order_result(record, False)
    assert len(short) < len(full)  # the two forms differ, so the check below can tell them apart
    assert order_result({**record, "compact": True}, False) == short
    assert order_result({**record, "compact": False}, True) == full


def test_short_sft_makes_greedy_output_a_tool_call(tmp_path, world):
    """After a short SFT the greedy reply opens a well-formed call of a real tool.

    What is asserted is the call's frame (`<tool_call>` + a JSON object naming a real tool): a
    160-step SFT of the test-sized model does not yet copy a new customer's email reliably, so the
    arguments may be wrong (bench/learning.py measures full verified success instead). 100 steps
    were on the edge: a change of tokenizer rules alone (other merges, so other initial weights)
    left the reply at `<tool_call>` repeated; at 160 all four replies open a call.
    """
    import re

    from training.checkpoints import load_policy
    from training.sandbox.prompting import initial_messages, tool_schemas
    from training.sft import SFTSettings, warm_start
    from training.tiny.bootstrap import build_tiny_policy

    records = level1_records(world, 70, seed=5)
    train, held_out = records[:60], records[60:]
    base = build_tiny_policy(tmp_path / "base", train, tiny_spec())
    summary = warm_start(
        base, train, tmp_path / "sft", SFTSettings(steps=160, batch_size=8, learning_rate=3e-3, torch_threads=1)
    )
    assert summary["trajectories"] == 60 and summary["train_loss"] > 0
    model, tokenizer = load_policy(tmp_path / "sft")
    parsed = 0
    for record in held_out[:4]:
        inputs = tokenizer.apply_chat_template(
            initial_messages(record),
            tools=list(tool_schemas()),
            add_generation_prompt=True,
            return_tensors="pt",
            return_dict=True,
        )
        output = model.generate(**inputs, max_new_tokens=60, do_sample=False)
        text = tokenizer.decode(output[0][inputs["input_ids"].shape[1] :])
        names = {s["function"]["name"] for s in tool_schemas()}
        frame = re.match(r'\s*<tool_call>\s*\{"name": "(\w+)", "arguments": \{', text)
        parsed += bool(frame) and frame.group(1) in names
    assert parsed >= 3


def test_the_labelled_positions_loss_equals_trls_fused_loss(tmp_path, world):
    """The SFT trainer's own loss (LM head on the labelled positions only) is TRL's loss, gradient
    included, on the same batch: it changes how much is computed, not what is learnt."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from training.checkpoints import load_policy
    from training.sft import _trainer_class, sft_rows, tokenized_rows
    from training.tiny.bootstrap import build_tiny_policy

    records = level1_records(world, 8, seed=2)
    base = build_tiny_policy(tmp_path / "base", records, tiny_spec())
    model, tokenizer = load_policy(base)
    dataset = Dataset.from_list(tokenized_rows(tokenizer, sft_rows(records)))
    args = SFTConfig(
        output_dir=str(tmp_path / "work"), per_device_train_batch_size=8, use_cpu=True, report_to="none", max_steps=1
    )
    ours, theirs = (
        cls(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        for cls in (_trainer_class(), SFTTrainer)
    )
    prepared = ours.train_dataset  # labels built from the assistant masks
    batch = ours._prepare_inputs(ours.data_collator([prepared[i] for i in range(8)]))
    assert (batch["labels"] != -100).sum() < batch["input_ids"].numel() / 2  # most positions carry no loss
    model.train()
    losses, grads = [], []
    for trainer in (ours, theirs):
        model.zero_grad()
        loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
        losses.append(loss.item())
        grads.append(model.get_input_embeddings().weight.grad.clone())
    assert losses[0] == pytest.approx(losses[1], rel=1e-4)
    assert torch.allclose(grads[0], grads[1], rtol=1e-3, atol=1e-6)
    assert ours._metrics["train"]["mean_token_accuracy"] and ours._metrics["train"]["entropy"]


def _labelled_token_losses(model, batch):
    """(cross-entropy of each labelled token, the labelled positions of the shifted targets), in eval mode."""
    import torch.nn.functional as F

    model.eval()
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    target = batch["labels"][:, 1:]
    keep = target != -100
    return F.cross_entropy(logits[keep], target[keep], reduction="none"), keep


def test_the_tool_name_weight_counts_each_token_naming_a_tool_that_many_times(world):
    """Weight K: the loss is the labelled tokens' cross-entropy mean with the tokens that open a
    tool call and name its tool counted K times (found by decoding, however the tokenizer cut
    them); weight 1 is the plain mean. A weight <= 0 is refused."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig

    from training.checkpoints import load_policy
    from training.sft import SFTSettings, _trainer_class, sft_rows, tokenized_rows, tool_name_positions
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    records = level1_records(world, 8, seed=2)
    # A trained model, so the tokens' losses differ and the weighting shows.
    model, tokenizer = load_policy(SHIPPED_AGENT_DIR)
    dataset = Dataset.from_list(tokenized_rows(tokenizer, sft_rows(records)))
    args = SFTConfig(
        output_dir="unused-sft", per_device_train_batch_size=8, use_cpu=True, report_to="none", max_steps=1
    )
    trainers = {
        k: _trainer_class(k)(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        for k in (1.0, 20.0)
    }
    plain_trainer = trainers[1.0]
    batch = plain_trainer._prepare_inputs(
        plain_trainer.data_collator([plain_trainer.train_dataset[i] for i in range(8)])
    )
    marked = tool_name_positions(batch["input_ids"], tokenizer)
    calls = [tokenizer.decode(batch["input_ids"][row][marked[row]]) for row in range(8)]
    for row, text in enumerate(calls):
        # Every tool the demonstration calls is named in the marked tokens, in order.
        names = [
            m["tool_calls"][0]["function"]["name"] for m in sft_rows(records)[row]["messages"] if m.get("tool_calls")
        ]
        positions = [text.index(f'"name": "{name}"') for name in names]
        assert positions == sorted(positions) and text.count("<tool_call>") >= len(names)
    with torch.no_grad():
        ce, keep = _labelled_token_losses(model, batch)
        named = marked[:, 1:][keep]
        assert 8 <= int(named.sum()) < len(named) / 3  # a few labelled tokens per call, not all
        weights = 1.0 + 19.0 * named.float()
        plain, weighted = (trainers[k].compute_loss(model, dict(batch)) for k in (1.0, 20.0))
    assert plain.item() == pytest.approx(ce.mean().item(), rel=1e-4)
    assert weighted.item() == pytest.approx(((ce * weights).sum() / weights.sum()).item(), rel=1e-4)
    assert abs(weighted.item() - plain.item()) > 0.01
    for bad in (0, -1.0, True):
        with pytest.raises(ValueError, match="tool_name_weight"):
            SFTSettings(tool_name_weight=bad)


def test_message_opening_marks_a_messages_first_word_beside_the_tool_name(world):
    """With `message_opening`, a call of the message tool is marked through its message's first
    word (what the agent says first is a decision where two intents reach the same call); other
    calls keep the name's span. The setting is refused where nothing would weigh it."""
    import torch

    from training.checkpoints import load_policy
    from training.sandbox.episode import MESSAGE_TOOL
    from training.sft import SFTSettings, sft_rows, tokenized_rows, tool_name_positions
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    records = level1_records(world, 4, seed=2)
    _, tokenizer = load_policy(SHIPPED_AGENT_DIR)
    rows = sft_rows(records)
    for row, tokenized in zip(rows, tokenized_rows(tokenizer, rows)):
        ids = torch.tensor([tokenized["input_ids"]])
        names = tool_name_positions(ids, tokenizer)[0]
        opened = tool_name_positions(ids, tokenizer, message_opening=True)[0]
        assert bool((opened | names).eq(opened).all()) and int(opened.sum()) > int(names.sum())
        extra = (opened & ~names).nonzero().flatten().tolist()
        said = [
            m["tool_calls"][0]["function"]["arguments"]["message"]
            for m in row["messages"]
            if m.get("tool_calls") and m["tool_calls"][0]["function"]["name"] == MESSAGE_TOOL
        ]
        # Each message's marked tokens run from the name's end into its first word, and no further
        # than a few tokens; the marked text reads as the opening of the message.
        runs = [run for run in _runs(extra)]
        assert len(runs) == len(said)
        for run, message in zip(runs, said):
            text = tokenizer.decode(ids[0, run[0] : run[-1] + 1])
            first = message.split()[0]
            assert first[:2] in text and len(run) <= 8, (text, message)
    # The trainer's loss counts the marked tokens K times.
    model, _ = load_policy(SHIPPED_AGENT_DIR)
    trainer, batch = _weighted_trainer_batch(model, tokenizer, rows, message_opening=True)
    with torch.no_grad():
        ce, keep = _labelled_token_losses(model, batch)
        marked = tool_name_positions(batch["input_ids"][:, 1:], tokenizer, message_opening=True)[keep]
        weights = 1.0 + 19.0 * marked.float()
        loss = trainer.compute_loss(model, dict(batch)).item()
    assert loss == pytest.approx(((ce * weights).sum() / weights.sum()).item(), rel=1e-4)
    with pytest.raises(ValueError, match="weighted_message_opening"):
        SFTSettings(weighted_message_opening=True)
    assert SFTSettings(weighted_message_opening=True, tool_name_weight=20.0).weighted_message_opening


def _weighted_trainer_batch(model, tokenizer, rows: list[dict], **weighted):
    """(a trainer whose loss counts the tokens `weighted` marks 20 times, its first batch of all
    `rows`), for comparing its loss with the weighted mean computed here."""
    from datasets import Dataset
    from trl import SFTConfig

    from training.sft import _trainer_class, tokenized_rows

    args = SFTConfig(
        output_dir="unused-sft", per_device_train_batch_size=len(rows), use_cpu=True, report_to="none", max_steps=1
    )
    trainer = _trainer_class(20.0, (), **weighted)(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(tokenized_rows(tokenizer, rows)),
        processing_class=tokenizer,
    )
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(rows))])
    return trainer, trainer._prepare_inputs(batch)


def _runs(positions: list[int]) -> list[list[int]]:
    """Consecutive positions grouped into runs."""
    runs: list[list[int]] = []
    for p in positions:
        if runs and p == runs[-1][-1] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def test_weighted_phrases_count_with_the_tool_names_weight(world):
    """A phrase made a token of its own (a cancel reason) counts `tool_name_weight` times wherever
    a labelled token is it, beside the tokens naming the tool; a phrase the tokenizer cuts into
    several tokens is refused by name, as is a bare string for the tuple."""
    import torch
    from datasets import Dataset
    from trl import SFTConfig

    from training.checkpoints import load_policy
    from training.sft import (
        SFTSettings,
        _trainer_class,
        phrase_token_ids,
        sft_rows,
        tokenized_rows,
        tool_name_positions,
    )
    from training.tiny.manifest import SHIPPED_AGENT_DIR
    from training.tiny.phrases import add_phrase_tokens

    reasons = ("no longer needed", "ordered by mistake")
    records = level1_records(world, 8, seed=2)
    model, tokenizer = load_policy(SHIPPED_AGENT_DIR)  # a trained model, so the weighting shows
    with pytest.raises(ValueError, match=r"\['no longer'\] are not tokens of their own"):
        phrase_token_ids(tokenizer, ("no longer needed", "no longer"))
    ids = phrase_token_ids(tokenizer, add_phrase_tokens(model, tokenizer, reasons))
    dataset = Dataset.from_list(tokenized_rows(tokenizer, sft_rows(records)))
    args = SFTConfig(
        output_dir="unused-sft", per_device_train_batch_size=8, use_cpu=True, report_to="none", max_steps=1
    )
    names_only, with_phrases = (
        _trainer_class(20.0, phrases)(model=model, args=args, train_dataset=dataset, processing_class=tokenizer)
        for phrases in ((), ids)
    )
    batch = names_only._prepare_inputs(names_only.data_collator([names_only.train_dataset[i] for i in range(8)]))
    with torch.no_grad():
        ce, keep = _labelled_token_losses(model, batch)
        target = batch["labels"][:, 1:]
        named = tool_name_positions(batch["input_ids"][:, 1:], tokenizer)[keep]
        phrased = (target[keep] == ids[0]) | (target[keep] == ids[1])
        assert int(phrased.sum()) >= 1 and not (named & phrased).any()  # some call gives a reason
        expected = {
            "names": 1.0 + 19.0 * named.float(),
            "both": 1.0 + 19.0 * (named | phrased).float(),
        }
        losses = {
            key: trainer.compute_loss(model, dict(batch)).item()
            for key, trainer in (("names", names_only), ("both", with_phrases))
        }
    for key, weights in expected.items():
        assert losses[key] == pytest.approx(((ce * weights).sum() / weights.sum()).item(), rel=1e-4)
    assert losses["names"] != pytest.approx(losses["both"], rel=1e-3)
    for bad in ("no longer needed", ("",), (None,)):
        with pytest.raises(ValueError, match="weighted_phrases"):
            SFTSettings(weighted_phrases=bad, tool_name_weight=20.0)
    with pytest.raises(ValueError, match="tool_name_weight is 1"):
        SFTSettings(weighted_phrases=reasons)


def test_rows_cut_counts_conversations_longer_than_max_length_and_refuses_a_prompt_that_fills_it():
    from training.sft import ConversationLengthError, rows_cut

    def row(prompt: int, said: int) -> dict[str, list[int]]:
        return {"input_ids": [7] * (prompt + said), "assistant_masks": [0] * prompt + [1] * said}

    assert rows_cut([row(10, 5), row(10, 21), row(25, 10)], 30) == 2  # two longer than 30, one fits
    assert rows_cut([row(10, 5)], 15) == 0  # exactly max_length is whole
    with pytest.raises(ConversationLengthError, match="max_length 30: none of 2 conversations .* token 30"):
        rows_cut([row(30, 5), row(40, 5)], 30)


def test_a_warm_start_whose_prompt_fills_max_length_is_refused_before_training(tmp_path, world):
    """The shipped tiny agent offered every retail tool (about 460 tokens of policy and schemas)
    with a max_length of 300: TRL would cut every conversation before the agent's first turn. The
    step says so by name instead of training on nothing; with level 1's six tools (about 160
    tokens) the same records start within it."""
    from training.checkpoints import load_tokenizer
    from training.curriculum import tools_for_levels
    from training.sft import ConversationLengthError, SFTSettings, rows_cut, sft_rows, tokenized_rows, warm_start
    from training.tiny.manifest import shipped_agent_path

    records = level1_records(world, 2, seed=6)
    every_tool = SFTSettings(steps=1, tools=None, max_length=300, torch_threads=1)
    with pytest.raises(ConversationLengthError, match="max_length 300: none of 2 conversations .* offer fewer tools"):
        warm_start(shipped_agent_path(), records, tmp_path / "sft", every_tool)
    assert not (tmp_path / "sft").exists()  # refused before anything was trained or written
    six = tools_for_levels({"1": 1.0})
    tokenized = tokenized_rows(load_tokenizer(shipped_agent_path()), sft_rows(records, tools=six))
    # Both conversations start within 300 tokens and run past them (cut), and fit SFT's default whole.
    assert (rows_cut(tokenized, 300), rows_cut(tokenized, SFTSettings().max_length)) == (2, 0)


def test_argument_ends_are_the_commas_and_brace_between_a_calls_arguments():
    """An argument ends at a `,` between two arguments or at the `}` closing them; commas, braces
    and escaped quotes inside a value are not ends, nor anything before the arguments."""
    import json

    from training.sft import argument_ends

    call = json.dumps(
        {
            "name": "exchange_delivered_order_items",
            "arguments": {"order_id": '#W1, "}', "item_ids": ["1", "2"], "details": {"a": 1, "b": 2}, "n": 3},
        }
    )
    ends = argument_ends(call)
    assert [call[at] for at in ends] == [",", ",", ",", "}"]
    # Each end closes one argument: what follows it is the next key, or the call's last brace.
    assert [call[at + 1 :][:12] for at in ends] == [' "item_ids":', ' "details": ', ' "n": 3}}', "}"]
    assert argument_ends(json.dumps({"name": "think", "arguments": {}})) == [len('{"name": "think", "arguments": {')]
    assert argument_ends('{"name": "get_order_details", "arguments": {"order_id": "#W12') == []  # cut off
    assert argument_ends('{"name": "respond"}') == []


def test_argument_end_positions_mark_the_token_that_goes_on_or_closes_the_call(world):
    """In rendered demonstrations, each call's marked tokens are one per argument, and each holds
    that argument's end: a cancellation's order id is followed by a marked token that goes on to
    the reason; the trainer counts them `tool_name_weight` times with `argument_end`."""
    import torch

    from training.checkpoints import load_policy
    from training.sft import (
        SFTSettings,
        argument_end_positions,
        sft_rows,
        tokenized_rows,
        tool_name_positions,
    )
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    records = level1_records(world, 8, seed=2)
    model, tokenizer = load_policy(SHIPPED_AGENT_DIR)
    rows = sft_rows(records)
    cancellations = 0
    for row, tokenized in zip(rows, tokenized_rows(tokenizer, rows)):
        ids = torch.tensor([tokenized["input_ids"]])
        marked = argument_end_positions(ids, tokenizer)[0].nonzero().flatten().tolist()
        calls = [m["tool_calls"][0]["function"] for m in row["messages"] if m.get("tool_calls")]
        assert len(marked) == sum(max(1, len(call["arguments"])) for call in calls)
        texts = [tokenizer.decode(ids[0, at]) for at in marked]
        assert all("," in text or "}" in text for text in texts), texts
        cancels = sum(call["name"] == "cancel_pending_order" for call in calls)
        assert sum('"reason"' in text for text in texts) == cancels  # the id's end opens the reason
        cancellations += cancels
    assert cancellations >= 1  # the records hold a cancellation, so its reason's token was checked
    trainer, batch = _weighted_trainer_batch(model, tokenizer, rows, argument_end=True)
    with torch.no_grad():
        ce, keep = _labelled_token_losses(model, batch)
        shifted = batch["input_ids"][:, 1:]
        names = tool_name_positions(shifted, tokenizer)[keep]
        ends = argument_end_positions(shifted, tokenizer)[keep]
        assert int(ends.sum()) >= 8 and not (names & ends).any()
        weights = 1.0 + 19.0 * (names | ends).float()
        loss = trainer.compute_loss(model, dict(batch)).item()
    assert loss == pytest.approx(((ce * weights).sum() / weights.sum()).item(), rel=1e-4)
    with pytest.raises(ValueError, match="weighted_argument_ends"):
        SFTSettings(weighted_argument_ends=True)
    assert SFTSettings(weighted_argument_ends=True, tool_name_weight=20.0).weighted_argument_ends


def test_a_call_the_back_end_refused_is_refused_again_in_the_replay(tmp_path):
    """A logged conversation that met a back-end fault is replayed with that call refused as it was,
    so the retry after it reads as the answer to a fault, and the replay verifies as the log did. (A replay
    that answered the refused call would show the same call made twice after a success.)"""
    import json
    from pathlib import Path

    from domains.retail.traffic.agents import EXPERT_RATES, ScriptedAgent
    from domains.retail.traffic.simulate import simulate
    from tests.helpers_traffic import generated_world
    from training.sandbox.core import INJECTED_ERROR
    from training.sft import replay_trajectory

    summary = simulate(
        days=1,
        per_day=40,
        seed=5,
        out_dir=tmp_path,
        world=generated_world(),
        verified_share=1.0,
        agent=ScriptedAgent(EXPERT_RATES, tool_fault_rate=0.3),
    )
    records = [json.loads(line) for path in summary["files"] for line in Path(path).read_text().splitlines() if line]
    faulted = 0
    for record in records:
        logged = [m["content"] for m in record["messages"] if m["role"] == "tool"]
        if INJECTED_ERROR not in logged:
            continue
        replayed = replay_trajectory(record, compact=False, verified_only=False)
        # A conversation the expert finished verifies on replay (four faults in a row, where it
        # gives the call up, fail both times).
        verified = replay_trajectory(record, compact=False) is not None
        assert verified == (record["outcome"] == "completed"), record["interaction_id"]
        results = [m["content"] for m in replayed if m["role"] == "tool"]
        # The same results in the same places: the refusals where the log has them, and the
        # answers after (a message's result is the customer's reply, simulated again).
        assert [r == INJECTED_ERROR for r in results] == [r == INJECTED_ERROR for r in logged]
        faulted += 1
    assert faulted >= 5
