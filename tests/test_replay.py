"""evaluation.replay: recorded conversations rebuilt from simulated production traffic, judged by
the training rewards, and compared with human labels (reward alignment)."""

from __future__ import annotations

import copy
import random

import pytest

from domains.retail.traffic.agents import EXPERT_RATES
from domains.retail.traffic.simulate import record_outcome, simulate
from evaluation.replay import (
    RecordedCustomer,
    RecordExhaustedError,
    ReplayError,
    proxy_reward,
    record_verified_success,
    recorded_episode,
    replay_record,
    reward_alignment,
)
from tests.helpers_retail import WRITE_TOOLS, RetailEnvironment
from tests.helpers_traffic import generated_world, read_records
from training.rewards import outcome_of, total_reward, verified_success
from training.sandbox.episode import MESSAGE_TOOL

EMPTY_WORLD = {"users": {}, "orders": {}, "products": {}}


@pytest.fixture(scope="module")
def traffic(tmp_path_factory):
    """One day of ordinary traffic (default mistake rates), every record labelled without rater noise."""
    out = tmp_path_factory.mktemp("traffic")
    summary = simulate(
        days=1,
        per_day=150,
        seed=11,
        out_dir=out,
        world=generated_world(),
        verified_share=0.8,
        label_share=1.0,
        label_flip_rate=0.0,
    )
    return read_records(summary["files"])


@pytest.fixture(scope="module")
def expert(tmp_path_factory):
    out = tmp_path_factory.mktemp("expert")
    summary = simulate(
        days=1, per_day=40, seed=5, out_dir=out, world=generated_world(), verified_share=1.0, mistake_rates=EXPERT_RATES
    )
    return read_records(summary["files"])


def _with_gold(records):
    return [r for r in records if r["gold"] is not None]


# ---- replay fidelity ----


def test_replay_reproduces_every_recorded_tool_result_and_outcome(traffic):
    gold = _with_gold(traffic)
    assert len(gold) > 80 and {r["outcome"] for r in gold} >= {"completed", "failed", "escalated"}
    for record in gold:
        replayed = replay_record(record)
        assert replayed.divergences == [], record["interaction_id"]
        assert replayed.unanswered_calls == 0
        assert record_outcome(replayed.episode) == record["outcome"], record["interaction_id"]
        assert len(replayed.episode.actions) == record["actions_taken"]
        assert replayed.episode.sentiment_delta == record["customer_sentiment_delta"]
        assert replayed.episode.user_id == record["customer_id"]


def test_replayed_expert_conversations_are_verified_successful(expert):
    assert {r["intent"] for r in expert} >= {"cancel_order", "order_status", "return_items", "modify_user_address"}
    for record in expert:
        assert record_verified_success(record) is True, record["interaction_id"]
        assert proxy_reward(record) >= 10.0  # completed, no process penalty outweighs it


def test_replay_reaches_the_recorded_final_state(expert):
    record = next(r for r in expert if r["intent"] == "cancel_order")
    episode = recorded_episode(record)
    order_id = next(a["arguments"]["order_id"] for a in record["gold"]["actions"] if a["name"] in WRITE_TOOLS)
    assert episode.initial_state["orders"][order_id]["status"] == "pending"
    assert episode.final_state["orders"][order_id]["status"] == "cancelled"
    assert record["initial_state"]["orders"][order_id]["status"] == "pending"  # the record is not modified


def test_dropping_the_write_from_a_transcript_fails_verification(expert):
    record = copy.deepcopy(next(r for r in expert if r["intent"] == "return_items"))
    messages = record["messages"]
    at = next(i for i, m in enumerate(messages) if any(c["name"] in WRITE_TOOLS for c in m.get("tool_calls") or []))
    del messages[at : at + 2]  # the write and its result
    assert record_verified_success(record) is False
    assert outcome_of(recorded_episode(record)) == "failed"


def _status_record(expert):
    return copy.deepcopy(next(r for r in expert if r["intent"] == "order_status" and r["gold"]["outputs"]))


def _telling_index(record):
    """The send_message call that told the customer the gold output (the order status)."""
    output = record["gold"]["outputs"][0]
    return next(
        i
        for i, m in enumerate(record["messages"])
        if any(c["name"] == MESSAGE_TOOL and output in c["arguments"]["message"] for c in m.get("tool_calls") or [])
    )


def test_assistant_text_counts_as_told_to_the_customer(expert):
    record = _status_record(expert)
    at = _telling_index(record)
    text = record["messages"][at]["tool_calls"][0]["arguments"]["message"]
    # The same words as plain assistant text (a model talking without the tool); the customer's
    # reply to them is then a user message, which the environment never sees.
    record["messages"][at] = {"role": "assistant", "content": text}
    record["messages"][at + 1] = {"role": "user", "content": record["messages"][at + 1]["content"]}
    episode = recorded_episode(record)
    assert text in episode.told
    assert verified_success(episode) is True
    record["messages"][at]["content"] = "Let me know if there is anything else."
    assert record_verified_success(record) is False


def test_told_keeps_conversation_order(expert):
    record = _status_record(expert)
    sent = [
        c["arguments"]["message"]
        for m in record["messages"]
        for c in m.get("tool_calls") or []
        if c["name"] == MESSAGE_TOOL
    ]
    record["messages"][2] = {**record["messages"][2], "content": "Hello there."}
    assert recorded_episode(record).told[:2] == ["Hello there.", sent[0]]
    assert recorded_episode(record).told[1:] == sent


def test_record_without_gold_has_undefined_verified_success(traffic):
    record = next(r for r in traffic if r["gold"] is None)
    assert record_verified_success(record) is None
    assert isinstance(proxy_reward(record), float)


def test_a_changed_initial_state_shows_up_as_divergence(expert):
    record = copy.deepcopy(next(r for r in expert if r["intent"] == "cancel_order"))
    order_id = next(a["arguments"]["order_id"] for a in record["gold"]["actions"] if a["name"] in WRITE_TOOLS)
    record["initial_state"]["orders"][order_id]["status"] = "delivered"
    replayed = replay_record(record)
    assert {d.tool for d in replayed.divergences} >= {"get_order_details", "cancel_pending_order"}
    write = next(d for d in replayed.divergences if d.tool == "cancel_pending_order")
    assert write.replayed.startswith("Error: non-pending order") and not write.recorded.startswith("Error")
    assert replayed.episode.final_state["orders"][order_id]["status"] == "delivered"


def test_proxy_reward_is_the_training_reward_of_the_replay(traffic):
    for record in _with_gold(traffic)[:20]:
        assert proxy_reward(record) == total_reward(recorded_episode(record))
    completed = next(r for r in traffic if r["gold"] is not None and r["outcome"] == "completed")
    assert proxy_reward(completed) - proxy_reward(completed, weights={"completed": 0.0}) == pytest.approx(10.0)


# ---- the recorded customer ----


def test_recorded_customer_hands_back_replies_in_order_then_leaves():
    customer = RecordedCustomer("Hi", ["one", "two"], sentiment_delta=0.25)
    env = RetailEnvironment()
    env.reset(initial_state=EMPTY_WORLD, simulator=customer)
    assert customer.opening_message() == "Hi" and not customer.finished
    assert env.send_message_to_customer(message="a") == "one"
    assert env.send_message_to_customer(message="b") == "two"
    assert customer.finished and env.done
    assert env.send_message_to_customer(message="c").startswith("Error: the customer has already left")
    assert env.told == ["a", "b"] and env.episode.sentiment_delta == 0.25
    with pytest.raises(RecordExhaustedError):
        customer.reply("more")


def test_refused_sends_are_refused_again_and_not_told():
    left = "Error: the customer has already left the conversation"
    record = {
        "interaction_id": "x1",
        "initial_state": EMPTY_WORLD,
        "customer_sentiment_delta": -0.5,
        "messages": [
            {"role": "user", "content": "help"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": MESSAGE_TOOL, "arguments": {"message": "hi"}}],
            },
            {"role": "tool", "name": MESSAGE_TOOL, "content": "bye"},
            {"role": "assistant", "content": "", "tool_calls": [{"name": MESSAGE_TOOL, "arguments": {"msg": "oops"}}]},
            {
                "role": "tool",
                "name": MESSAGE_TOOL,
                "content": "Error: unexpected argument 'msg' for tool send_message_to_customer",
            },
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": MESSAGE_TOOL, "arguments": '{"message": "hello?"}'}],
            },
            {"role": "tool", "name": MESSAGE_TOOL, "content": left},
        ],
    }
    replayed = replay_record(record)
    assert replayed.divergences == []
    assert replayed.episode.told == ["hi"]
    assert [e.result for e in replayed.episode.audit_log][-1] == left
    assert replayed.episode.sentiment_delta == -0.5


# ---- errors ----


@pytest.mark.parametrize(
    "change, rule",
    [
        ({"messages": []}, "empty_messages"),
        ({"messages": "[not json"}, "bad_messages"),
        ({"initial_state": None}, "bad_initial_state"),
        ({"initial_state": {"users": {}, "orders": {}}}, "bad_initial_state"),
        (
            {
                "messages": [
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"name": "think", "arguments": {"thought": "x"}}],
                    },
                    {"role": "tool", "name": "calculate", "content": ""},
                ]
            },
            "tool_result_mismatch",
        ),
        ({"messages": ["hello"]}, "bad_message"),
    ],
)
def test_unreplayable_records_raise_replay_error_with_rule(change, rule):
    record = {
        "interaction_id": "bad-1",
        "initial_state": EMPTY_WORLD,
        "messages": [{"role": "user", "content": "hi"}],
        **change,
    }
    with pytest.raises(ReplayError) as info:
        replay_record(record)
    assert info.value.rule == rule and info.value.interaction_id == "bad-1"


# ---- reward alignment ----


def test_alignment_on_faithful_labels(traffic):
    report = reward_alignment(traffic)
    gold = _with_gold(traffic)
    assert report["n"] == len(traffic) and report["n_agreement"] == len(gold)
    # Labels follow the outcome judged with gold, so verified success agrees with every one of them.
    assert report["agreement"] == 1.0
    assert report["auc"] > 0.9
    no_gold = {s["interaction_id"] for s in report["skipped"] if s["scope"] == "agreement"}
    assert no_gold == {r["interaction_id"] for r in traffic if r["gold"] is None}
    assert not [s for s in report["skipped"] if s["scope"] == "all"]


def test_wrong_labels_lower_agreement_and_auc(traffic):
    records = copy.deepcopy(traffic)
    gold = [r for r in records if r["gold"] is not None]
    flipped = random.Random(0).sample(gold, k=len(gold) // 4)
    for record in flipped:
        record["human_label"]["task_success"] = not record["human_label"]["task_success"]
    clean, noisy = reward_alignment(traffic), reward_alignment(records)
    assert noisy["agreement"] == pytest.approx(1.0 - len(flipped) / len(gold))
    assert noisy["auc"] < clean["auc"] - 0.1


def test_alignment_skips_unlabelled_and_unreplayable_records_with_why(traffic):
    records = copy.deepcopy(traffic[:30])
    records[0]["human_label"] = None
    records[1]["messages"] = []
    report = reward_alignment(records)
    assert report["n"] == 28
    reasons = {s["interaction_id"]: s["reason"] for s in report["skipped"] if s["scope"] == "all"}
    assert reasons[records[0]["interaction_id"]] == "no human_label.task_success"
    assert "empty_messages" in reasons[records[1]["interaction_id"]]


def test_alignment_auc_undefined_with_one_class(expert):
    records = copy.deepcopy(expert[:10])
    for record in records:
        record["human_label"] = {"task_success": True, "rater": "r", "labeled_at": "2026-11-03T00:00:00+00:00"}
    report = reward_alignment(records)
    assert report["auc"] is None and "both classes" in report["auc_undefined"]
    assert report["agreement"] == 1.0 and report["n"] == 10
    assert reward_alignment([])["auc_undefined"] == "no labelled record could be replayed"
