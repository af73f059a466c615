"""Unit tests of the retail sandbox: each tool's semantics on a hand-checked world, the TRL seam,
reset, the episode, and the world helpers."""

from __future__ import annotations

import inspect
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from domains.retail.world import WorldError, touched_subset
from tests.helpers_environment import FakeCustomer, fresh_env, tiny_world
from tests.helpers_retail import TOOL_NAMES, WRITE_TOOLS, RetailEnvironment
from training.sandbox.environment import EnvironmentSetupError, call_tool
from training.sandbox.episode import Episode


def order_of(env, order_id):
    return env.state["orders"][order_id]


def balance(env, user="ann_lee_1", card="gift_card_1"):
    return env.state["users"][user]["payment_methods"][card]["balance"]


# ---- the TRL seam ----
def test_public_functions_are_exactly_the_tools_plus_reset_and_get_reward():
    # The rule GRPOTrainer applies (trl/trainer/grpo_trainer.py, environment_factory probe).
    public = {
        n for n, _ in inspect.getmembers(RetailEnvironment, predicate=inspect.isfunction) if not n.startswith("_")
    }
    assert public == set(TOOL_NAMES) | {"reset", "get_reward"}
    assert set(TOOL_NAMES) >= WRITE_TOOLS
    assert len(TOOL_NAMES) == 17


@pytest.mark.parametrize("name", TOOL_NAMES)
def test_every_tool_has_a_json_schema_with_described_parameters(name):
    from transformers.utils import get_json_schema

    method = getattr(RetailEnvironment(), name)
    schema = get_json_schema(method)["function"]
    params = list(inspect.signature(method).parameters)
    assert schema["name"] == name and schema["description"]
    assert list(schema["parameters"]["properties"]) == params
    assert schema["parameters"].get("required", []) == params
    assert all(p.get("description") for p in schema["parameters"]["properties"].values())


def test_a_tool_subset_is_all_trl_sees_and_all_that_can_be_called():
    from tests.helpers_retail import retail_environment_class as environment_class
    from training.sandbox.prompting import tool_schemas

    offered = ("send_message_to_customer", "get_order_details")  # any order: the environment's is kept
    subset = environment_class(offered)
    public = {n for n, _ in inspect.getmembers(subset, predicate=inspect.isfunction) if not n.startswith("_")}
    assert public == {"get_order_details", "send_message_to_customer", "reset", "get_reward"}
    assert subset is environment_class(reversed(offered)) and environment_class(None) is RetailEnvironment
    assert [s["function"]["name"] for s in tool_schemas(offered)] == ["get_order_details", "send_message_to_customer"]
    env = subset()
    env.reset(initial_state=tiny_world())
    assert call_tool(env, "get_order_details", {"order_id": "#W1"}) == json.dumps(tiny_world()["orders"]["#W1"])
    withheld = call_tool(env, "cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"})
    assert withheld == "Error: unknown tool 'cancel_pending_order'"
    assert env.state == tiny_world() and env.audit_log[-1].error
    with pytest.raises(ValueError, match="unknown tool names \\['rm_rf'\\]"):
        environment_class(["get_order_details", "rm_rf"])


def test_direct_call_with_extra_argument_is_an_audited_error_not_a_type_error():
    env = fresh_env()
    result = env.get_order_details(order_id="#W1", verbose="yes")
    assert result.startswith("Error: unexpected argument 'verbose'")
    assert env.audit_log[-1].error and env.audit_log[-1].tool == "get_order_details"
    assert env.get_order_details("#W1") == json.dumps(tiny_world()["orders"]["#W1"])


# ---- reads ----
def test_find_user_by_email_is_case_insensitive():
    env = fresh_env()
    assert env.find_user_id_by_email(email="ann.lee@EXAMPLE.com") == "ann_lee_1"
    assert env.find_user_id_by_email(email="nobody@example.com") == "Error: user not found"


def test_find_user_by_name_zip_names_fold_case_zip_exact():
    env = fresh_env()
    assert env.find_user_id_by_name_zip(first_name="ANN", last_name="lee", zip="10001") == "ann_lee_1"
    assert env.find_user_id_by_name_zip(first_name="Ann", last_name="Lee", zip="10002") == "Error: user not found"


@pytest.mark.parametrize(
    "tool,kind,key,missing",
    [
        ("get_user_details", "users", "bob_kim_2", "Error: user not found"),
        ("get_order_details", "orders", "#W4", "Error: order not found"),
        ("get_product_details", "products", "P2", "Error: product not found"),
    ],
)
def test_details_are_the_record_as_json(tool, kind, key, missing):
    env = fresh_env()
    argument = {"users": "user_id", "orders": "order_id", "products": "product_id"}[kind]
    assert json.loads(call_tool(env, tool, {argument: key})) == tiny_world()[kind][key]
    assert call_tool(env, tool, {argument: "nope"}) == missing


def test_product_types_sorted_by_name():
    listed = json.loads(fresh_env().list_all_product_types())
    assert list(listed.items()) == [("Mug", "P2"), ("T-Shirt", "P1")]


def test_think_changes_nothing_and_says_nothing():
    env = fresh_env()
    assert env.think(thought="the order is pending") == ""
    assert env.state == tiny_world() and not env.audit_log[-1].changed


@settings(max_examples=200, deadline=None)
@given(
    st.recursive(
        st.integers(0, 10**6).map(str) | st.floats(0, 1e4).map(lambda f: f"{f:.3f}"),
        lambda inner: (
            st.tuples(inner, st.sampled_from("+-*/"), inner).map(" ".join)
            | inner.map(lambda e: f"({e})")
            | inner.map(lambda e: f"-{e}")
        ),
        max_leaves=8,
    )
)
def test_calculate_agrees_with_python_arithmetic(expression):
    try:
        expected = str(round(float(eval(expression, {"__builtins__": {}}, {})), 2))  # test oracle only
    except (ZeroDivisionError, OverflowError) as exc:
        expected = f"Error: {exc}"
    assert fresh_env().calculate(expression=expression) == expected


# ---- writes ----
def test_cancel_refunds_gift_card_at_once():
    env = fresh_env()
    result = json.loads(env.cancel_pending_order(order_id="#W1", reason="ordered by mistake"))
    order = order_of(env, "#W1")
    assert result == order and order["status"] == "cancelled" and order["cancel_reason"] == "ordered by mistake"
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 30.0,
        "payment_method_id": "gift_card_1",
    }
    assert balance(env) == 80.0 and env.audit_log[-1].changed


@pytest.mark.parametrize(
    "order_id,reason,error",
    [
        ("#W1", "changed my mind", "Error: invalid reason"),
        ("#W3", "no longer needed", "Error: non-pending order cannot be cancelled"),
        ("#W9", "no longer needed", "Error: order not found"),
    ],
)
def test_cancel_refusals_change_nothing(order_id, reason, error):
    env = fresh_env()
    assert env.cancel_pending_order(order_id=order_id, reason=reason) == error
    assert env.state == tiny_world() and not env.audit_log[-1].changed and env.audit_log[-1].error


def test_address_changes_replace_the_whole_object():
    env = fresh_env()
    address = dict(address1="9 Elm", address2="", city="Reno", state="NV", country="USA", zip="89501")
    env.modify_pending_order_address(order_id="#W4", **address)
    env.modify_user_address(user_id="bob_kim_2", **address)
    assert order_of(env, "#W4")["address"] == address == env.state["users"]["bob_kim_2"]["address"]
    assert env.modify_pending_order_address(order_id="#W2", **address) == "Error: non-pending order cannot be modified"
    assert env.modify_user_address(user_id="zed", **address) == "Error: user not found"


def test_modify_items_charges_difference_to_gift_card_once():
    env = fresh_env()
    env.modify_pending_order_items(
        order_id="#W1", item_ids=["I1"], new_item_ids=["I2"], payment_method_id="gift_card_1"
    )
    order = order_of(env, "#W1")
    assert order["items"][0] | {} == {
        "name": "T-Shirt",
        "product_id": "P1",
        "item_id": "I2",
        "price": 25.5,
        "options": {"color": "blue"},
    }
    assert order["payment_history"][-1] == {
        "transaction_type": "payment",
        "amount": 5.5,
        "payment_method_id": "gift_card_1",
    }
    assert balance(env) == 44.5 and order["status"] == "pending (item modified)"
    again = env.modify_pending_order_items(
        order_id="#W1", item_ids=["M1"], new_item_ids=["M2"], payment_method_id="gift_card_1"
    )
    assert again == "Error: non-pending order cannot be modified"


def test_modify_items_refund_for_cheaper_variants_of_duplicates():
    env = fresh_env()
    env.modify_pending_order_items(
        order_id="#W5", item_ids=["I2", "I2"], new_item_ids=["I1", "I1"], payment_method_id="credit_card_1"
    )
    order = order_of(env, "#W5")
    assert [i["item_id"] for i in order["items"]] == ["I1", "I1"]
    assert order["payment_history"][-1] == {
        "transaction_type": "refund",
        "amount": 11.0,
        "payment_method_id": "credit_card_1",
    }


@pytest.mark.parametrize(
    "items,new,method,error",
    [
        (["I1"], ["I3"], "gift_card_1", "Error: new item I3 not found or available"),
        (["I1"], ["M2"], "gift_card_1", "Error: new item M2 not found or available"),
        (["I1", "I1"], ["I2", "I2"], "gift_card_1", "Error: I1 not found"),
        (["I1"], ["I2", "I2"], "gift_card_1", "Error: the number of items to be exchanged should match"),
        (["I1"], ["I2"], "paypal_2", "Error: payment method not found"),
        (["I1"], ["I4"], "gift_card_1", "Error: insufficient gift card balance to pay for the new item"),
    ],
)
def test_modify_items_refusals(items, new, method, error):
    env = fresh_env()
    assert (
        env.modify_pending_order_items(order_id="#W1", item_ids=items, new_item_ids=new, payment_method_id=method)
        == error
    )
    assert env.state == tiny_world()


def test_modify_payment_moves_both_gift_card_balances():
    env = fresh_env()
    env.modify_pending_order_payment(order_id="#W1", payment_method_id="credit_card_1")
    assert order_of(env, "#W1")["payment_history"][1:] == [
        {"transaction_type": "payment", "amount": 30.0, "payment_method_id": "credit_card_1"},
        {"transaction_type": "refund", "amount": 30.0, "payment_method_id": "gift_card_1"},
    ]
    assert balance(env) == 80.0
    assert (
        env.modify_pending_order_payment(order_id="#W1", payment_method_id="paypal_1")
        == "Error: there should be exactly one payment for a pending order"
    )
    assert (
        fresh_env().modify_pending_order_payment(order_id="#W5", payment_method_id="gift_card_1")
        == "Error: insufficient gift card balance to pay for the order"
    )  # 51.00 due, 50.00 on the card
    assert (
        env.modify_pending_order_payment(order_id="#W5", payment_method_id="credit_card_1")
        == "Error: the new payment method should be different from the current one"
    )


def test_return_sorts_items_and_checks_refund_method():
    env = fresh_env()
    assert (
        env.return_delivered_order_items(order_id="#W2", item_ids=["M2", "I1"], payment_method_id="paypal_1")
        == "Error: payment method should be either the original payment method or a gift card"
    )
    assert (
        env.return_delivered_order_items(order_id="#W2", item_ids=["I1", "I1", "I1"], payment_method_id="gift_card_1")
        == "Error: some item not found"
    )
    assert (
        env.return_delivered_order_items(order_id="#W1", item_ids=["I1"], payment_method_id="gift_card_1")
        == "Error: non-delivered order cannot be returned"
    )
    env.return_delivered_order_items(order_id="#W2", item_ids=["M2", "I1"], payment_method_id="credit_card_1")
    order = order_of(env, "#W2")
    assert (order["status"], order["return_items"], order["return_payment_method_id"]) == (
        "return requested",
        ["I1", "M2"],
        "credit_card_1",
    )


def test_exchange_records_rounded_difference_without_paying_yet():
    env = fresh_env()
    assert (
        env.exchange_delivered_order_items(
            order_id="#W2",
            item_ids=["I1", "I1", "M2"],
            new_item_ids=["I4", "I4", "M1"],
            payment_method_id="gift_card_1",
        )
        == "Error: insufficient gift card balance to pay for the price difference"
    )
    env.exchange_delivered_order_items(
        order_id="#W2", item_ids=["M2", "I1"], new_item_ids=["M1", "I2"], payment_method_id="gift_card_1"
    )
    order = order_of(env, "#W2")
    assert order["exchange_items"] == ["I1", "M2"] and order["exchange_new_items"] == ["I2", "M1"]
    assert order["exchange_price_difference"] == 3.5 and order["status"] == "exchange requested"
    assert balance(env) == 50.0 and order["payment_history"] == tiny_world()["orders"]["#W2"]["payment_history"]


def test_compact_results_are_short_but_state_semantics_identical():
    full, short = fresh_env(), fresh_env(compact=True)
    compact_order = json.loads(short.get_order_details(order_id="#W1"))
    assert set(compact_order) == {"order_id", "status", "items", "payment_method_ids"}
    assert compact_order["items"][0] == {"item_id": "I1", "name": "T-Shirt", "price": 20.0}
    assert len(short.get_user_details(user_id="ann_lee_1")) < len(full.get_user_details(user_id="ann_lee_1")) / 2
    for env in (full, short):
        env.modify_pending_order_items(
            order_id="#W1", item_ids=["I1"], new_item_ids=["I2"], payment_method_id="gift_card_1"
        )
    assert full.state == short.state


def test_a_compact_order_shows_ids_only_to_a_policy_offered_a_tool_that_takes_them():
    from domains.retail.level1 import LEVEL1_TOOLS
    from tests.helpers_retail import retail_environment_class as environment_class

    level1 = environment_class(LEVEL1_TOOLS)()
    level1.reset(initial_state=tiny_world(), compact=True)
    order = json.loads(level1.get_order_details(order_id="#W1"))
    names = [item["name"] for item in tiny_world()["orders"]["#W1"]["items"]]
    assert order == {"order_id": "#W1", "status": "pending", "items": names}
    cancelled = json.loads(level1.cancel_pending_order(order_id="#W1", reason="no longer needed"))
    assert cancelled == {**order, "status": "cancelled"}
    # Offering one tool that takes item ids brings them back; a full (non-compact) read keeps everything.
    with_items = environment_class(LEVEL1_TOOLS + ("return_delivered_order_items",))()
    with_items.reset(initial_state=tiny_world(), compact=True)
    assert json.loads(with_items.get_order_details(order_id="#W1"))["items"][0]["item_id"] == "I1"
    level1.reset(initial_state=tiny_world())
    assert json.loads(level1.get_order_details(order_id="#W1")) == tiny_world()["orders"]["#W1"]


@pytest.mark.parametrize("seed", range(6))
def test_injected_outage_fails_one_early_system_call_and_changes_nothing(seed):
    env = fresh_env(inject_tool_errors=True, seed=seed)
    env.think(thought="exempt")
    results = [env.cancel_pending_order(order_id="#W1", reason="no longer needed") for _ in range(3)]
    outages = [r for r in results if r == "Error: the system timed out; please try again"]
    assert len(outages) == 1 and json.loads(next(r for r in results if not r.startswith("Error:")))
    assert order_of(env, "#W1")["status"] == "cancelled" and balance(env) == 80.0  # refunded exactly once
    assert not fresh_env(seed=seed).get_order_details(order_id="#W1").startswith("Error:")


# ---- conversation: transfer, customer, episode, reward ----
def test_transfer_ends_the_episode():
    env = fresh_env()
    assert env.transfer_to_human_agents(summary="wants a manager") == "Transfer successful" and env.done
    assert env.cancel_pending_order(order_id="#W1", reason="no longer needed").startswith("Error:")
    assert env.state == tiny_world() and env.episode.transferred and len(env.audit_log) == 2


def test_messages_go_to_the_simulator_and_are_told():
    customer = FakeCustomer(patience=2, mood=-0.5)
    env = fresh_env(simulator=customer)
    assert env.send_message_to_customer(message="hi") == "you said: hi"
    assert env.send_message_to_customer(message="bye") == "you said: bye" and env.done
    assert env.send_message_to_customer(message="still there?").startswith("Error:")
    assert env.told == ["hi", "bye"] == customer.heard and env.episode.sentiment_delta == -0.5
    assert fresh_env().send_message_to_customer(message="anyone?").startswith("Error:")


def test_reset_with_scenario_builds_the_persona_simulator():
    env = fresh_env(
        user_scenario=json.dumps(
            {"instruction": "cancel #W1", "known_info": {"order_ids": ["#W1"]}, "persona": "polite"}
        ),
        seed=3,
    )
    assert env.simulator is not None and not env.send_message_to_customer(message="How can I help?").startswith(
        "Error:"
    )


def test_reset_copies_accepts_json_ignores_extra_keys_and_clears_history():
    world = tiny_world()
    env = RetailEnvironment()
    assert env.reset(initial_state=json.dumps(world), prompt=[{"role": "user"}], anything=1) is None
    env.cancel_pending_order(order_id="#W1", reason="no longer needed")
    assert world == tiny_world()
    env.reset(initial_state=world)
    assert env.audit_log == [] and env.state == world and env.state is not world
    with pytest.raises(EnvironmentSetupError):
        env.reset(prompt="no state")
    with pytest.raises(WorldError):
        env.reset(initial_state={"users": {}, "orders": {"#W1": {"items": []}}, "products": {}})


def test_episode_is_a_copy_with_gold_and_customer():
    gold = {
        "actions": [{"name": "cancel_pending_order", "arguments": {"order_id": "#W4", "reason": "no longer needed"}}],
        "outputs": [],
    }
    env = fresh_env(gold=gold, escalation_was_necessary=False, customer_id="bob_kim_2")
    call_tool(env, "cancel_pending_order", gold["actions"][0]["arguments"])
    ep = env.episode
    assert isinstance(ep, Episode) and ep.user_id == "bob_kim_2" and ep.gold == gold
    assert ep.initial_state == tiny_world() and ep.final_state == env.state
    ep.final_state["orders"].clear()
    assert env.state["orders"] and [e.changed for e in ep.audit_log] == [True]


def test_episode_user_falls_back_to_the_authenticated_customer():
    env = fresh_env()
    env.find_user_id_by_email(email="bob@example.com")
    assert env.episode.user_id == "bob_kim_2"
    solo = touched_subset(tiny_world(), "bob_kim_2")
    assert fresh_env(solo).episode.user_id == "bob_kim_2"


def test_get_reward_is_the_rewards_total():
    from training.rewards import total_reward

    gold = {
        "actions": [{"name": "cancel_pending_order", "arguments": {"order_id": "#W4", "reason": "no longer needed"}}],
        "outputs": [],
    }
    env = fresh_env(touched_subset(tiny_world(), "bob_kim_2"), gold=gold)
    env.find_user_id_by_email(email="bob@example.com")
    before = env.get_reward()
    env.get_order_details(order_id="#W4")
    env.cancel_pending_order(order_id="#W4", reason="no longer needed")
    assert env.get_reward() == total_reward(env.episode) and env.get_reward() > before
