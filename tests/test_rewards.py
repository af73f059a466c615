"""Reward terms: the verifiable core, shaping, weights, and the TRL adapters."""

from __future__ import annotations

import doctest
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import training.rewards.core
import training.rewards.efficiency
import training.rewards.outcome
import training.rewards.process
import training.rewards.terms
from tests.helpers_retail import RetailEnvironment
from tests.helpers_rewards import auth_call, entry, first_task, run_calls, solving_calls, status_task, task_world
from training.rewards import (
    REWARD_TERMS,
    RewardConfigError,
    RewardWeights,
    outcome_of,
    score_episode,
    total_reward,
    trl_reward_functions,
    verified_success,
)
from training.rewards.core import mentions, normalise_text
from training.rewards.efficiency import quick_completion, too_many_actions
from training.rewards.outcome import escalated_necessary, escalated_unnecessary, sentiment, sentiment_shaped
from training.rewards.process import looping, skipped_verification, step_order, unauthenticated_reads
from training.sandbox.environment import call_tool
from training.sandbox.episode import Episode

EMPTY = {"users": {}, "orders": {}, "products": {}}
TRANSFER = entry("transfer_to_human_agents", {"summary": "s"}, "Transfer successful")


@pytest.mark.parametrize(
    "module",
    [
        training.rewards.core,
        training.rewards.outcome,
        training.rewards.efficiency,
        training.rewards.process,
        training.rewards.terms,
    ],
)
def test_docstring_examples_hold(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0


# --- text matching -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("told", "output", "expected"),
    [
        ("Your refund is $1,234.50", "1234.5", True),
        ("Your refund is 1234.50 dollars", "$1,234.50", True),
        ("The status is PENDING.", "pending", True),
        ("Total: 10.00", "10", True),
        ("Total: 100", "10", False),
        ("Total: 10.5", "10", False),
        ("items 1,2,3", "123", False),
        ("nothing here", "pending", False),
    ],
)
def test_mentions(told, output, expected):
    assert mentions(told, output) is expected


def test_normalise_keeps_leading_zeros_of_ids():
    assert normalise_text("Item 0012 costs $5.10") == "item 0012 costs 5.1"


# --- verifiable core through the real environment -------------------------------------------------


@pytest.fixture(scope="module")
def cancel_task(reference_tasks, world):
    return first_task(reference_tasks, world, "cancel_pending_order", max_actions=1)


def test_solving_trajectory_is_verified(world, cancel_task):
    episode = run_calls(world, cancel_task, solving_calls(world, cancel_task))
    assert verified_success(episode) and outcome_of(episode) == "completed"


def test_doing_nothing_fails_a_write_task(world, cancel_task):
    episode = run_calls(world, cancel_task, [])
    assert not verified_success(episode) and outcome_of(episode) == "failed"


def test_one_extra_change_breaks_the_exact_state_match(world, cancel_task):
    calls = solving_calls(world, cancel_task)
    user_id = cancel_task["user_id"]
    address = dict(world["users"][user_id]["address"], address1="1 Elsewhere Road")
    episode = run_calls(world, cancel_task, calls + [("modify_user_address", {"user_id": user_id, **address})])
    assert not verified_success(episode)


def test_gold_calls_that_fail_in_the_reference_are_replayed_as_failures(reference_tasks, world):
    task = next(t for t in reference_tasks if t["gold_action_errors"] and len(t["actions"]) <= 3)
    episode = run_calls(world, task, solving_calls(world, task))
    assert verified_success(episode)


def test_read_only_task_needs_the_evidence_and_the_output(world):
    task = status_task(world)
    order_id = task["actions"][0]["arguments"]["order_id"]
    tell = ("send_message_to_customer", {"message": f"Order {order_id} is {task['outputs'][0]}."})
    read = ("get_order_details", {"order_id": order_id})
    assert not verified_success(run_calls(world, task, []))  # a reward hole: nothing done, nothing changed
    assert not verified_success(run_calls(world, task, [tell]))  # the right words without the lookup
    assert not verified_success(run_calls(world, task, [read]))  # the lookup without telling
    assert verified_success(run_calls(world, task, [read, tell]))
    wrong = ("get_order_details", {"order_id": "#W0000000"})
    assert not verified_success(run_calls(world, task, [wrong, tell]))


def test_no_gold_or_empty_gold_is_never_a_success():
    assert not verified_success(Episode(EMPTY, EMPTY, [], gold=None))
    assert not verified_success(Episode(EMPTY, EMPTY, [], gold={"actions": [], "outputs": []}))


# --- outcome, efficiency, sentiment ----------------------------------------------------------------


@pytest.mark.parametrize(("necessary", "expected"), [(True, (1.0, 0.0)), (False, (0.0, 1.0)), (None, (0.0, 1.0))])
def test_escalation_terms_follow_the_flag(necessary, expected):
    episode = Episode(EMPTY, EMPTY, [TRANSFER], gold=None, escalation_was_necessary=necessary)
    assert (escalated_necessary(episode), escalated_unnecessary(episode)) == expected
    assert outcome_of(episode) == "escalated"


def test_verified_success_wins_over_a_transfer(world, cancel_task):
    calls = solving_calls(world, cancel_task) + [("transfer_to_human_agents", {"summary": "done"})]
    episode = run_calls(world, cancel_task, calls, escalation_was_necessary=False)
    assert outcome_of(episode) == "completed" and escalated_unnecessary(episode) == 0.0


@given(
    st.lists(st.sampled_from(["get_order_details", "think", "send_message_to_customer", "calculate"]), max_size=14),
    st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_outcome_terms_partition_and_action_counting(tools, transferred):
    log = [entry(tool, {"n": i}) for i, tool in enumerate(tools)] + ([TRANSFER] if transferred else [])
    episode = Episode(EMPTY, EMPTY, log, gold=None)
    indicators = [
        REWARD_TERMS[name](episode) for name in ("completed", "failed", "escalated_necessary", "escalated_unnecessary")
    ]
    assert sum(indicators) == 1.0
    # Thinking and arithmetic (kind think) and talking are not actions.
    counted = sum(t not in ("think", "calculate", "send_message_to_customer") for t in tools) + transferred
    assert too_many_actions(episode) == (1.0 if counted > 10 else 0.0)


def test_quick_completion_needs_success_and_fewer_than_three_actions(world, cancel_task):
    order_id = cancel_task["actions"][0]["arguments"]["order_id"]
    action = cancel_task["actions"][0]
    two = [("get_order_details", {"order_id": order_id}), (action["name"], action["arguments"])]
    assert quick_completion(run_calls(world, cancel_task, two)) == 1.0
    assert quick_completion(run_calls(world, cancel_task, solving_calls(world, cancel_task))) == 0.0  # 3 actions
    assert quick_completion(run_calls(world, cancel_task, two[:1])) == 0.0  # quick but not done


def _with_mood(episode: Episode, delta: float) -> Episode:
    return Episode(
        episode.initial_state, episode.final_state, episode.audit_log, episode.told, episode.gold, sentiment_delta=delta
    )


def test_sentiment_pays_the_playbook_bonus_only_above_the_bar_on_success(world, cancel_task):
    solved = run_calls(world, cancel_task, solving_calls(world, cancel_task))
    assert solved.sentiment_delta > 0.2 and sentiment(solved) == 1.0
    assert score_episode(solved)["sentiment"] == 0.5  # +0.5, not 0.5 x the mood change
    assert sentiment(_with_mood(solved, 0.2)) == 0.0 and sentiment(_with_mood(solved, 0.21)) == 1.0
    unsolved = Episode(EMPTY, EMPTY, [], gold=None, sentiment_delta=0.9)
    assert sentiment(unsolved) == 0.0
    grumpy = _with_mood(solved, -0.7)
    assert sentiment(grumpy) == 0.0 and verified_success(grumpy)


def test_shaped_sentiment_is_an_option_off_by_default(world, cancel_task):
    solved = run_calls(world, cancel_task, solving_calls(world, cancel_task))
    assert sentiment_shaped(solved) == solved.sentiment_delta
    assert sentiment_shaped(Episode(EMPTY, EMPTY, [], gold=None, sentiment_delta=0.9)) == 0.0
    assert sentiment_shaped(_with_mood(solved, -0.7)) == 0.0
    assert score_episode(solved)["sentiment_shaped"] == 0.0
    shaped = score_episode(_with_mood(solved, 0.3), {"sentiment": 0.0, "sentiment_shaped": 0.5})
    assert shaped["sentiment"] == 0.0 and shaped["sentiment_shaped"] == pytest.approx(0.15)


# --- process penalties ---------------------------------------------------------------------------

STATE = {
    "users": {"ann_1": {}, "bob_2": {}},
    "orders": {"#W1": {"user_id": "ann_1"}, "#W2": {"user_id": "bob_2"}},
    "products": {},
}
AUTH_ANN = entry("find_user_id_by_email", {"email": "ann@x.com"}, "ann_1")
AUTH_BOB = entry("find_user_id_by_email", {"email": "bob@x.com"}, "bob_2")
READ_W1 = entry("get_order_details", {"order_id": "#W1"})
READ_W2 = entry("get_order_details", {"order_id": "#W2"})
FAILED_READ_W1 = entry("get_order_details", {"order_id": "#W1"}, "Error: order not found", error=True)
CANCEL_W1 = entry("cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"}, "{}", changed=True)


def ep(*log):
    return Episode(STATE, STATE, list(log))


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ((AUTH_ANN, READ_W1, CANCEL_W1), 0.0),
        ((AUTH_ANN, CANCEL_W1), 1.0),
        ((AUTH_ANN, READ_W2, CANCEL_W1), 1.0),  # reading another order justifies nothing
        ((AUTH_ANN, FAILED_READ_W1, CANCEL_W1), 1.0),
        ((AUTH_ANN, CANCEL_W1, READ_W1), 1.0),  # reading afterwards is too late
        ((CANCEL_W1, CANCEL_W1), 2.0),
        ((entry("modify_user_address", {"user_id": "ann_1"}),), 1.0),
        ((entry("get_user_details", {"user_id": "ann_1"}), entry("modify_user_address", {"user_id": "ann_1"})), 0.0),
    ],
)
def test_step_order(log, expected):
    assert step_order(ep(*log)) == expected


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ((AUTH_ANN, READ_W1, CANCEL_W1), 0.0),
        ((READ_W1, CANCEL_W1), 1.0),
        ((AUTH_BOB, READ_W1, CANCEL_W1), 1.0),  # identified somebody else
        ((READ_W1, CANCEL_W1, AUTH_ANN), 1.0),  # identified too late
        ((entry("find_user_id_by_email", {"email": "ann@x.com"}, "Error: user not found", error=True), CANCEL_W1), 1.0),
        ((AUTH_BOB, AUTH_ANN, CANCEL_W1), 0.0),
        ((entry("cancel_pending_order", {"order_id": "#W9"}, "Error: order not found", error=True),), 1.0),
        ((AUTH_ANN, entry("cancel_pending_order", {"order_id": "#W9"}, "Error: order not found", error=True)), 0.0),
    ],
)
def test_skipped_verification(log, expected):
    assert skipped_verification(ep(*log)) == expected


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ((AUTH_ANN, READ_W1), 0.0),
        ((READ_W1, AUTH_ANN, READ_W1), 1.0),
        ((AUTH_ANN, READ_W2), 1.0),  # Bob's order, Ann identified
        ((AUTH_ANN, entry("get_user_details", {"user_id": "bob_2"})), 1.0),
        ((entry("get_order_details", {"order_id": "#W9"}, "Error: order not found", error=True),), 0.0),
        ((entry("get_product_details", {"product_id": "1"}),), 0.0),  # not a customer's record
    ],
)
def test_unauthenticated_reads(log, expected):
    assert unauthenticated_reads(ep(*log)) == expected


@pytest.mark.parametrize(
    ("log", "expected"),
    [
        ((READ_W1, READ_W2, READ_W1), 1.0),
        ((READ_W1, CANCEL_W1, READ_W1), 0.0),  # re-reading after a change is checking
        (
            (
                READ_W1,
                CANCEL_W1,
                entry("cancel_pending_order", CANCEL_W1.arguments, "Error: non-pending order", error=True),
            ),
            1.0,
        ),  # a repeated write loops even after its own change
        ((entry("send_message_to_customer", {"message": "hi"}),) * 3, 2.0),
        ((entry("think", {"thought": "x"}),) * 3, 0.0),
    ],
)
def test_looping(log, expected):
    assert looping(ep(*log)) == expected


# --- weights, scoring, TRL adapters ----------------------------------------------------------------


def test_default_weights_are_the_playbook():
    weights = RewardWeights()
    assert (
        weights.completed,
        weights.failed,
        weights.escalated_necessary,
        weights.escalated_unnecessary,
        weights.too_many_actions,
        weights.quick_completion,
        weights.sentiment,
    ) == (10, -5, 2, -1, -0.5, 1, 0.5)
    assert set(weights.to_dict()) == set(REWARD_TERMS)


def test_unknown_weight_names_are_rejected_with_the_valid_ones():
    with pytest.raises(RewardConfigError, match="unknown_reward_term.*completd.*'completed'") as info:
        RewardWeights.from_dict({"completd": 3})
    assert info.value.rule == "unknown_reward_term"
    with pytest.raises(RewardConfigError, match="bad_reward_weight"):
        RewardWeights.from_dict({"looping": True})
    with pytest.raises(RewardConfigError, match="bad_reward_weight"):
        RewardWeights.from_dict({"looping": float("nan")})
    with pytest.raises(RewardConfigError, match="unknown_reward_term"):
        trl_reward_functions(["completed", "nope"])


def test_score_episode_weights_each_term_and_total_sums(world, cancel_task):
    calls = solving_calls(world, cancel_task)
    episode = run_calls(world, cancel_task, calls[:1] + calls[1:2] * 2 + calls[2:])  # one looping read
    scores = score_episode(episode)
    assert list(scores) == list(REWARD_TERMS)
    assert scores["completed"] == 10.0 and scores["looping"] == -1.0
    assert total_reward(episode) == pytest.approx(sum(scores.values()))
    doubled = score_episode(episode, {"looping": -2.0, "completed": 20})
    assert doubled["looping"] == -2.0 and doubled["completed"] == 20.0


def _envs(world, task, trajectories):
    envs = []
    for calls in trajectories:
        env = RetailEnvironment()
        env.reset(
            initial_state=task_world(world, task),
            gold={"actions": task["actions"], "outputs": []},
            user_scenario={"instruction": task["instruction"], "known_info": {}, "persona": "polite"},
        )
        for name, arguments in calls:
            call_tool(env, name, arguments)
        envs.append(env)
    return envs


def test_trl_functions_read_environments_not_completions(world, cancel_task):
    envs = _envs(world, cancel_task, [solving_calls(world, cancel_task), []])
    functions = trl_reward_functions()
    assert len({f.__name__ for f in functions}) == len(REWARD_TERMS)
    columns = {f.__name__: f(["<tool_call>...</tool_call>", "I did it!"], environments=envs) for f in functions}
    assert columns["reward_completed"] == [10.0, 0.0] and columns["reward_failed"] == [0.0, -5.0]
    swapped = {f.__name__: f(["anything", "else"], environments=envs) for f in functions}
    assert swapped == columns
    for i, env in enumerate(envs):
        assert sum(column[i] for column in columns.values()) == pytest.approx(env.get_reward())


def test_trl_functions_refuse_missing_or_misaligned_environments(world, cancel_task):
    function = trl_reward_functions(["completed"])[0]
    with pytest.raises(ValueError, match="environment_factory"):
        function(["x"])
    with pytest.raises(ValueError, match="2 environments for 1 completions"):
        function(["x"], environments=_envs(world, cancel_task, [[], []]))


def test_tally_logs_the_summed_reward_and_success_per_intent_and_persona_and_scores_nothing(world, cancel_task):
    from training.rewards.tally import RewardTally

    solved, idle = solving_calls(world, cancel_task), []
    envs = _envs(world, cancel_task, [solved, idle, solved, idle])
    functions = trl_reward_functions()
    logged: dict[str, list[float]] = {}
    tally = RewardTally(functions)
    out = tally(
        ["a", "b", "c", "d"],
        environments=envs,
        intent=["cancel_order", "cancel_order", "order_status", "cancel_order"],
        persona=["polite", "angry", "angry", "angry"],
        log_metric=lambda name, value: logged.setdefault(name, []).append(value),
    )
    assert out == [None] * 4  # TRL leaves None out of the trained sum
    totals = [sum(f(["x"], environments=[env])[0] for f in functions) for env in envs]
    assert totals[0] > 0 > totals[1]
    assert logged["by_intent/cancel_order/reward"] == [pytest.approx((totals[0] + 2 * totals[1]) / 3)]
    assert logged["by_intent/cancel_order/success"] == [pytest.approx(1 / 3)]
    assert logged["by_intent/cancel_order/rollouts"] == [3.0]
    assert logged["by_intent/order_status/reward"] == [pytest.approx(totals[2])]
    assert logged["by_intent/order_status/success"] == [1.0]
    assert logged["by_persona/angry/reward"] == [pytest.approx((totals[1] + totals[2] + totals[3]) / 3)]
    assert logged["by_persona/polite/success"] == [1.0]
    # Only the terms trained on are summed: a tally over one term logs that term alone.
    only = RewardTally(trl_reward_functions(["completed"]))
    logged.clear()
    only(
        ["a", "b"], environments=envs[:2], intent=["x", "x"], log_metric=lambda n, v: logged.setdefault(n, []).append(v)
    )
    assert logged["by_intent/x/reward"] == [5.0]
    # Labels from an imported log may be any text; each is a name part MLflow accepts.
    logged.clear()
    tally(
        ["a", "b"],
        environments=envs[:2],
        persona=["", "angry?/x"],
        log_metric=lambda n, v: logged.setdefault(n, []).append(v),
    )
    assert {"by_persona/none/reward", "by_persona/angry__x/reward"} <= set(logged)
    from mlflow.utils.validation import _validate_metric_name

    for name in logged:
        _validate_metric_name(name)
    with pytest.raises(ValueError, match="log_metric"):
        tally(["a"], environments=envs[:1], intent=["x"])
    with pytest.raises(ValueError, match="2 environments for 1 completions"):
        tally(["a"], environments=envs[:2], log_metric=lambda n, v: None)


def test_trl_functions_pickle_and_keep_their_weight():
    function = trl_reward_functions(["looping"], {"looping": -3})[0]
    clone = pickle.loads(pickle.dumps(function))
    assert clone.__name__ == "reward_looping" and clone.weight == -3.0


def test_gold_that_changes_nothing_requires_reading_the_order(reference_tasks, world):
    task = next(
        t for t in reference_tasks if not t["expected_changes"].get("orders") and not t["expected_changes"].get("users")
    )
    order_id = task["actions"][0]["arguments"]["order_id"]
    auth = auth_call(world, task)
    assert not verified_success(run_calls(world, task, [auth]))
    assert not verified_success(run_calls(world, task, [auth, ("get_order_details", {"order_id": "#W0000000"})]))
    assert verified_success(run_calls(world, task, [auth, ("get_order_details", {"order_id": order_id})]))
