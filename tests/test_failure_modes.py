"""Failure modes from real audit logs of scripted conversations, and week-over-week jumps."""

from __future__ import annotations

import copy

import pytest

from evaluation.failure_modes import (
    MODES,
    compare_weeks,
    failure_mode_shares,
    failure_modes,
    hallucinated_facts,
    policy_violations,
    primary_failure_mode,
)
from evaluation.gates import GateConfig
from tests.helpers_eval import expert_steps, record_with_intent, scripted_trial


@pytest.fixture(scope="module")
def cancel():
    return record_with_intent("cancel_order")


@pytest.fixture(scope="module")
def status():
    return record_with_intent("order_status")


def _order_id(record):
    return record["gold"]["actions"][-1]["arguments"]["order_id"]


def _auth(record):
    return expert_steps(record)[0]


def test_expert_has_no_failure_and_no_violation(cancel, status):
    for record in (cancel, status):
        trial = scripted_trial(record, expert_steps(record))
        assert trial.success
        assert failure_modes(trial) == [] and primary_failure_mode(trial) is None
        assert policy_violations(trial) == [] and hallucinated_facts(trial) == []


def test_write_without_authentication_is_a_policy_violation(cancel):
    gold = cancel["gold"]["actions"][0]
    trial = scripted_trial(cancel, [{"name": "get_order_details", "arguments": {"order_id": _order_id(cancel)}}, gold])
    assert [v.rule for v in policy_violations(trial)] == ["unauthenticated_write"]
    # The state is right, yet the rules were broken: a violation even on a verified success.
    assert trial.success


def test_write_without_read_is_a_policy_violation(cancel):
    trial = scripted_trial(cancel, [_auth(cancel), cancel["gold"]["actions"][0]])
    assert [v.rule for v in policy_violations(trial)] == ["write_without_read"]


def test_write_on_a_non_eligible_order_is_a_policy_violation(cancel):
    order_id = _order_id(cancel)
    order = cancel["initial_state"]["orders"][order_id]
    assert order["status"] == "pending"
    # Returning items of a pending order: authenticated and read first, yet not allowed.
    wrong = {
        "name": "return_delivered_order_items",
        "arguments": {
            "order_id": order_id,
            "item_ids": [order["items"][0]["item_id"]],
            "payment_method_id": order["payment_history"][0]["payment_method_id"],
        },
    }
    trial = scripted_trial(cancel, expert_steps(cancel)[:-1] + [wrong])
    assert [v.rule for v in policy_violations(trial)] == ["ineligible_record"]
    assert not trial.success
    assert failure_modes(trial) == ["policy_violation", "wrong_tool", "gave_up"]


def test_wrong_tool(cancel):
    steps = expert_steps(cancel)
    order_id = _order_id(cancel)
    steps[-1] = {
        "name": "modify_pending_order_address",
        "arguments": {
            "order_id": order_id,
            "address1": "1 Main St",
            "address2": "",
            "city": "Austin",
            "state": "TX",
            "country": "USA",
            "zip": "73301",
        },
    }
    trial = scripted_trial(cancel, steps)
    assert primary_failure_mode(trial) == "wrong_tool"


def test_wrong_arguments(cancel):
    steps = copy.deepcopy(expert_steps(cancel))
    reason = steps[-1]["arguments"]["reason"]
    steps[-1]["arguments"]["reason"] = "ordered by mistake" if reason == "no longer needed" else "no longer needed"
    trial = scripted_trial(cancel, steps)
    assert not trial.success
    assert primary_failure_mode(trial) == "wrong_arguments"


def test_hallucinated_number_and_status(status):
    order_id = _order_id(status)
    true_status = status["initial_state"]["orders"][order_id]["status"]
    false_status = "cancelled" if true_status != "cancelled" else "delivered"
    steps = expert_steps(status)[:-1] + [
        {
            "name": "send_message_to_customer",
            "arguments": {"message": f"Your order {order_id} is {false_status} and you will get $987.65 back."},
        }
    ]
    trial = scripted_trial(status, steps)
    assert not trial.success
    assert set(hallucinated_facts(trial)) == {false_status, "987.65"}
    assert primary_failure_mode(trial) == "hallucinated_fact"


def test_facts_from_tools_and_customer_are_not_hallucinations(status):
    order_id = _order_id(status)
    order = status["initial_state"]["orders"][order_id]
    price = order["items"][0]["price"]
    steps = expert_steps(status)[:-1] + [
        {
            "name": "send_message_to_customer",
            "arguments": {
                "message": f"Order {order_id} is {order['status']}; the first item cost ${price:,.2f}. I see 2 items."
            },
        }
    ]
    trial = scripted_trial(status, steps)
    assert hallucinated_facts(trial) == []
    assert trial.success


def test_looping(status):
    read = {"name": "get_order_details", "arguments": {"order_id": _order_id(status)}}
    trial = scripted_trial(status, [_auth(status), read, read, read])
    assert primary_failure_mode(trial) == "looping"


def test_gave_up(cancel, status):
    trial = scripted_trial(
        cancel, [_auth(cancel), {"name": "get_order_details", "arguments": {"order_id": _order_id(cancel)}}]
    )
    assert failure_modes(trial) == ["gave_up"]
    # Read everything but never told the customer the fact they asked for.
    trial = scripted_trial(status, expert_steps(status)[:-1])
    assert failure_modes(trial) == ["gave_up"]


def test_unnecessary_escalation_and_necessary_one(cancel):
    handoff = {"name": "transfer_to_human_agents", "arguments": {"summary": "help"}}
    trial = scripted_trial(cancel, [_auth(cancel), handoff])
    assert failure_modes(trial) == ["unnecessary_escalation"]
    other = record_with_intent("other")
    assert other["escalation_was_necessary"] is True
    # A necessary transfer without the identification the gold requires fails, but not as escalation.
    trial = scripted_trial(other, [handoff])
    assert not trial.success and "unnecessary_escalation" not in failure_modes(trial)


def test_shares_are_over_all_trials(cancel):
    good = scripted_trial(cancel, expert_steps(cancel))
    bad = scripted_trial(cancel, [_auth(cancel)])
    shares = failure_mode_shares([good, good, good, bad])
    assert set(shares) == set(MODES)
    assert shares["gave_up"] == 0.25 and sum(shares.values()) == 0.25


def test_week_over_week_flags_rises_of_more_than_ten_points():
    previous = {"looping": 0.05, "gave_up": 0.30, "wrong_tool": 0.20, "hallucinated_fact": 0.10}
    current = {"looping": 0.16, "gave_up": 0.40, "wrong_tool": 0.05, "policy_violation": 0.11}
    jumps = compare_weeks(previous, current, GateConfig().failure_mode_jump)
    assert [(j.mode, round(j.jump, 6)) for j in jumps] == [("policy_violation", 0.11), ("looping", 0.11)]
    # Exactly ten points (0.30 -> 0.40, 0.4 - 0.3 > 0.1 in floats) is not more than ten points.
    assert "gave_up" not in {j.mode for j in jumps}
    assert compare_weeks(previous, previous, 0.10) == []
    assert [j.mode for j in compare_weeks({"looping": 0.0}, {"looping": 0.06}, threshold=0.05)] == ["looping"]
