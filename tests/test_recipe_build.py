"""The shipped agent's recipe end to end at a toy size (`domains.retail.tiny_agent.build_agent`).

Every stage runs a few steps on a small generated shop, in the recipe's order (the optional shop
stages switched on, with the order statuses, `#W` and the customers' names tokens of their own); what ships is the model after the last stage, with the cancel reasons tokens
of their own, loadable through the product's `from_pretrained` path. A second build in the same work folder resumes every finished
stage instead of training it again.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from domains.retail.domain import ORDER_STATUSES
from domains.retail.tiny_agent import BUILD_SUMMARY, STAGE_MARKER, AgentRecipe, build_agent, shop_demonstrations
from domains.retail.tools_write import CANCEL_REASONS
from domains.retail.traffic.worldgen import FIRST_NAMES, LAST_NAMES
from training.checkpoints import load_policy
from training.tiny.manifest import SHIPPED_FILES

pytestmark = pytest.mark.slow

TOY = AgentRecipe(
    traffic=400,
    n_users=60,
    train_tasks=20,
    held_out_tasks=5,
    copy_steps=2,
    expert_stages=1,
    expert_steps=2,
    weakness_steps=2,
    decision_steps=2,
    phrase_steps=3,
    shop_traffic=60,
    shop_stages=2,
    shop_steps=2,
    hidden_size=32,
    layers=1,
)


def test_a_toy_build_runs_every_stage_and_ships_the_reasons_as_tokens(tmp_path):
    progress: list[dict] = []
    summary = build_agent(tmp_path / "out", tmp_path / "work", TOY, threads=1, progress=progress.append)
    stages = [s["stage"] for s in summary["stages"]]
    assert stages == ["copy", "expert1", "weakness2", "decision3", "phrases4", "shop5", "shop6"]
    assert [p["stage"] for p in progress if p.get("stage") != "tasks"] == stages
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(SHIPPED_FILES)
    assert json.loads((tmp_path / "work" / BUILD_SUMMARY).read_text())["stages"] == summary["stages"]

    model, tokenizer = load_policy(tmp_path / "out")
    added = tokenizer.get_added_vocab()
    for reason in CANCEL_REASONS:
        assert tokenizer(reason, add_special_tokens=False)["input_ids"] == [added[reason]]
    assert model.get_input_embeddings().weight.shape[0] == len(tokenizer)
    # The phrase stage trained with the reasons weighted, from the model that holds their tokens.
    marker = json.loads((tmp_path / "work" / "phrases4" / STAGE_MARKER).read_text())
    assert marker["key"]["settings"]["weighted_phrases"] == list(CANCEL_REASONS)
    assert marker["key"]["settings"]["tool_name_weight"] == TOY.tool_name_weight
    # The shop stage imitates whole-shop conversations in the served form: full tool results, and
    # hand-overs too (they never verify).
    shop = json.loads((tmp_path / "work" / "shop6" / STAGE_MARKER).read_text())["key"]["settings"]
    assert shop["compact"] is False and shop["verified_only"] is False
    weighted = shop["weighted_phrases"]
    assert weighted[: len(CANCEL_REASONS) + len(ORDER_STATUSES)] == list(CANCEL_REASONS) + list(ORDER_STATUSES)
    # ... and after them every customer name the stage's conversations know (AgentRecipe.shop_names).
    names = weighted[len(CANCEL_REASONS) + len(ORDER_STATUSES) :]
    assert names and set(names) <= set(FIRST_NAMES) | set(LAST_NAMES)
    assert shop["learning_rate"] == TOY.shop_lr
    # ... from the model that holds each order status as a single-word token: the tool names that
    # contain one are cut as the earlier stages learnt them.
    shop_base = load_policy(tmp_path / "work" / "shop-phrased")[1]
    phrased_base = load_policy(tmp_path / "work" / "phrased")[1]
    for status in ORDER_STATUSES:
        assert tokenizer(status, add_special_tokens=False)["input_ids"] == [shop_base.get_added_vocab()[status]]
    name = '{"name": "cancel_pending_order"}'
    assert shop_base(name)["input_ids"] == phrased_base(name)["input_ids"]
    # ... and the order id's marker as a token of its own, cut out of the words around it.
    marker = shop_base.get_added_vocab()["#W"]
    for text in ("Know the status of order #W1234567.", '{"order_id": "#W1234567"}'):
        assert marker in shop_base(text, add_special_tokens=False)["input_ids"]
    assert "#W" not in phrased_base.get_added_vocab()
    # Each name a single-word token: one token in the customer's words and in the call alike, while a
    # user id that spells it in lower case is cut as the earlier stages learnt it.
    first = names[0]
    token = shop_base.get_added_vocab()[first]
    for text in (f"Hi, I am {first}.", f'{{"first_name": "{first}"}}'):
        assert token in shop_base(text, add_special_tokens=False)["input_ids"]
    user_id = f'{{"user_id": "{first.lower()}_smith_1234"}}'
    assert shop_base(user_id)["input_ids"] == phrased_base(user_id)["input_ids"]
    assert 0 < summary["shop_conversations"] <= TOY.shop_traffic

    again = build_agent(tmp_path / "out2", tmp_path / "work", TOY, threads=1)
    assert again["stages"] == summary["stages"]  # every stage resumed: the same losses


def test_the_shipped_recipe_has_no_shop_stage(tmp_path):
    summary = build_agent(tmp_path / "out", tmp_path / "work", replace(TOY, shop_stages=0), threads=1)
    assert [s["stage"] for s in summary["stages"]][-1] == "phrases4"
    assert summary["shop_conversations"] == 0 and not (tmp_path / "work" / "shop-landing").exists()
    assert AgentRecipe().shop_stages == 0


def test_a_recipe_without_phrases_ships_the_tokenizer_it_trained(tmp_path):
    summary = build_agent(tmp_path / "out", tmp_path / "work", replace(TOY, phrases=()), threads=1)
    assert [s["stage"] for s in summary["stages"]][-3:] == ["decision3", "shop5", "shop6"]
    _, tokenizer = load_policy(tmp_path / "out")
    assert not set(CANCEL_REASONS) & set(tokenizer.get_added_vocab())


def test_the_shop_stage_draws_its_conversations_at_the_mix_it_is_given(tmp_path):
    # A rare intent the expert serves can be drawn more often than the production mix has it.
    handles = ("order_status", "cancel_order", "modify_order_payment")
    demos = shop_demonstrations(tmp_path, TOY, handles, intent_mix={"modify_order_payment": 1.0})
    assert demos and {demo["intent"] for demo in demos} == {"modify_order_payment"}
    # The expert serves it: every one of them ends with the payment change, none with a hand-over.
    for demo in demos:
        called = [call["name"] for m in demo["messages"] for call in m.get("tool_calls") or []]
        assert "modify_pending_order_payment" in called and "transfer_to_human_agents" not in called
    default = shop_demonstrations(tmp_path / "default", TOY, handles)
    assert len({demo["intent"] for demo in default}) > 3
