"""Simulated production traffic: world generator, scenarios, production agent, daily files, drift."""

from __future__ import annotations

import collections
import json
import math
import random
from datetime import UTC

import pytest

from domains.retail.traffic.agents import (
    EXPERT_RATES,
    MISTAKES,
    AgentConfigError,
    ScriptedAgent,
    mistake_applicable,
    run_policy,
)
from domains.retail.traffic.scenarios import INTENTS, ScenarioError, sample_scenario, sample_scenarios
from domains.retail.traffic.simulate import Drift, TrafficConfigError, WorldNotFoundError, measure_throughput, simulate
from domains.retail.traffic.worldgen import WorldGenError, generate_world
from domains.retail.world import validate_world
from tests.helpers_retail import AUTH_TOOLS, WRITE_TOOLS, replay_actions
from tests.helpers_traffic import KNOWN_INFO_KEYS, day_files, generated_world, ingest, read_records, validate_all
from tracking.registry import DEFAULT_MODEL_NAME
from training.customers import PERSONAS
from training.episode_update import served_by
from training.policies import ScriptedPolicy, assistant_turns
from training.rewards import outcome_of, verified_success

ORDER_STATUS_FOR = {
    "cancel_order": "pending",
    "modify_order_items": "pending",
    "modify_order_address": "pending",
    "modify_order_payment": "pending",
    "return_items": "delivered",
    "exchange_items": "delivered",
}


def test_generated_world_is_deterministic_complete_and_unambiguous():
    world = generate_world(n_users=120, seed=5)
    validate_world(world)
    assert json.dumps(world) == json.dumps(generate_world(n_users=120, seed=5))
    assert json.dumps(world) != json.dumps(generate_world(n_users=120, seed=6))
    assert len(world["users"]) == 120
    assert {o["status"] for o in world["orders"].values()} == {"pending", "processed", "delivered", "cancelled"}
    cards = [m for u in world["users"].values() for m in u["payment_methods"].values() if m["source"] == "gift_card"]
    assert cards and all(isinstance(m["balance"], int | float) for m in cards)
    emails = [u["email"] for u in world["users"].values()]
    name_zips = [
        (u["name"]["first_name"], u["name"]["last_name"], u["address"]["zip"]) for u in world["users"].values()
    ]
    assert len(set(emails)) == len(emails) and len(set(name_zips)) == len(name_zips)
    for order_id, order in world["orders"].items():
        assert order_id in world["users"][order["user_id"]]["orders"]
        assert (order["fulfillments"] == []) == (order["status"] == "pending")
        for item in order["items"]:
            variant = world["products"][item["product_id"]]["variants"][item["item_id"]]
            assert (variant["price"], variant["options"]) == (item["price"], item["options"])
    with pytest.raises(WorldGenError):
        generate_world(n_users=0)


@pytest.mark.parametrize("source", ["generated", "reference"])
def test_scenarios_cover_every_intent_with_clean_gold(source, world):
    the_world = generated_world() if source == "generated" else world
    rng = random.Random(11)
    for intent in INTENTS:
        for _ in range(6):
            s = sample_scenario(the_world, intent, rng)
            assert s.intent == intent and s.user_id in s.initial_state["users"]
            final, errors = replay_actions(s.initial_state, s.gold["actions"])
            assert errors == []
            writes = [a for a in s.gold["actions"] if a["name"] in WRITE_TOOLS]
            assert (final != s.initial_state) == bool(writes)
            if intent in ORDER_STATUS_FOR:
                assert s.initial_state["orders"][s.order_id]["status"] == ORDER_STATUS_FOR[intent]
            if intent == "order_status":
                assert s.gold["outputs"] == [s.initial_state["orders"][s.order_id]["status"]]
            if intent == "other":
                assert s.gold["actions"][-1]["name"] == "transfer_to_human_agents"
                assert s.escalation_was_necessary is True
            info = s.user_scenario["known_info"]
            assert set(info) <= KNOWN_INFO_KEYS and info["intent"] == intent
            assert "email" in info or {"first_name", "last_name", "zip"} <= set(info)
            assert s.user_scenario["persona"] in PERSONAS


def test_expert_is_verified_successful_on_every_sampled_scenario(world):
    expert = ScriptedAgent(EXPERT_RATES)
    batches = [sample_scenarios(generated_world(), 150, seed=seed) for seed in (1, 2)]
    batches.append(sample_scenarios(world, 120, seed=3))
    failures, seen = [], collections.Counter()
    for batch in batches:
        for index, scenario in enumerate(batch):
            conversation = expert.run(scenario, seed=index)
            seen[scenario.intent] += 1
            if not verified_success(conversation.episode):
                failures.append((scenario.intent, scenario.user_scenario["persona"]))
            assert conversation.episode.transferred == (scenario.intent == "other")
    assert failures == []
    assert set(seen) == set(INTENTS)


@pytest.mark.parametrize("mistake", MISTAKES)
def test_mistakes_happen_at_their_rate_and_cause_failures(mistake):
    rate = 0.3
    agent = ScriptedAgent({name: (rate if name == mistake else 0.0) for name in MISTAKES})
    scenarios = [s for s in sample_scenarios(generated_world(), 300, seed=21) if mistake_applicable(mistake, s)]
    assert len(scenarios) >= 60
    made = 0
    for index, scenario in enumerate(scenarios):
        conversation = agent.run(scenario, seed=index)
        outcome = outcome_of(conversation.episode)
        if not conversation.mistakes:
            assert outcome == "completed"
            continue
        made += 1
        log = conversation.episode.audit_log
        if mistake == "skipped_authentication":
            assert not any(e.tool in AUTH_TOOLS for e in log)
            # The state check alone passes a write without verification; a told fact or a
            # transfer needs the identification as evidence.
            assert (outcome == "completed") == (scenario.intent not in ("order_status", "other"))
        elif mistake == "unnecessary_escalation":
            assert outcome == "escalated" and scenario.escalation_was_necessary is None
        else:
            assert outcome == "failed"
    n = len(scenarios)
    assert abs(made / n - rate) < 4 * math.sqrt(rate * (1 - rate) / n)


def test_an_agent_that_handles_some_intents_hands_the_rest_over_after_identifying():
    handles = ("order_status", "cancel_order")
    agent = ScriptedAgent(EXPERT_RATES, handles=handles, asks_details=True)
    seen = collections.Counter()
    for index, scenario in enumerate(sample_scenarios(generated_world(), 200, seed=5)):
        conversation = agent.run(scenario, seed=index)
        episode, calls = conversation.episode, [e.tool for e in conversation.episode.audit_log]
        seen[scenario.intent] += 1
        assert any(tool in AUTH_TOOLS for tool in calls)  # every customer identified first
        if scenario.intent in handles:
            assert verified_success(episode) and not episode.transferred
        else:
            assert episode.transferred and not set(calls) & WRITE_TOOLS
            assert verified_success(episode) == (scenario.intent == "other")
    assert set(seen) == set(INTENTS)  # every intent was drawn, so every branch above ran


def test_an_agent_that_asks_the_reason_cancels_with_the_reason_it_heard():
    agent = ScriptedAgent(EXPERT_RATES, asks_details=True)
    cancellations = [s for s in sample_scenarios(generated_world(), 200, seed=6) if s.intent == "cancel_order"]
    assert len(cancellations) >= 10
    for index, scenario in enumerate(cancellations):
        conversation = agent.run(scenario, seed=index)
        said = [
            m["tool_calls"][0]["arguments"].get("message", "") for m in conversation.messages if m.get("tool_calls")
        ]
        asked = next(i for i, text in enumerate(said) if "reason for cancelling" in text)
        reason = scenario.user_scenario["known_info"]["reason"]
        answer = conversation.messages[2 * asked + 3]["content"]  # the customer's reply to that question
        assert reason in answer.lower()
        cancel = next(e for e in conversation.episode.audit_log if e.tool == "cancel_pending_order")
        assert cancel.arguments["reason"] == reason and verified_success(conversation.episode)


def test_an_expert_that_asks_for_details_writes_only_what_the_conversation_said_before():
    # A demonstration a model can learn from: each argument of each change is, before the call, in
    # the customer's words or a tool's result (the payment method and the new address used to come
    # from the scenario's gold alone, so imitating them taught a guess).
    # Exchanges and item changes are left out: the new variant is the scenario's choice, which no
    # customer in these conversations names.
    handles = (
        "order_status",
        "cancel_order",
        "return_items",
        "modify_order_payment",
        "modify_order_address",
        "modify_user_address",
    )
    agent = ScriptedAgent(EXPERT_RATES, handles=handles, asks_details=True)
    writes = collections.Counter()
    for index, scenario in enumerate(sample_scenarios(generated_world(), 400, seed=8)):
        if scenario.intent not in handles:
            continue
        conversation = agent.run(scenario, seed=index)
        assert verified_success(conversation.episode), scenario.intent
        heard, answers, read, called = "", [], False, ""
        for message in conversation.messages:
            if message["role"] in ("user", "tool"):
                heard += " " + str(message.get("content") or "")
                if called == "send_message_to_customer":  # the customer's reply
                    answers.append((read, str(message.get("content"))))
                continue
            for call in message.get("tool_calls") or []:
                called = call["name"]
                read |= called in ("get_order_details", "get_user_details")
                if call["name"] in WRITE_TOOLS:
                    writes[call["name"]] += 1
                    for argument, value in call["arguments"].items():
                        for part in value if isinstance(value, list) else [value]:
                            assert str(part) in heard, (scenario.intent, argument, part)
                    # What only the customer could say was asked after the read (a cancellation's
                    # reason before it), and answered in the message before the proposal (the
                    # last answer is the customer's "yes").
                    read_before, answer = answers[-2]
                    detail = {
                        k: v for k, v in call["arguments"].items() if k not in ("order_id", "user_id", "item_ids")
                    }
                    assert read_before == (call["name"] != "cancel_pending_order"), scenario.intent
                    assert detail and all(str(v) in answer for v in detail.values() if v)
    assert min(writes.values()) >= 5 and len(writes) == 5, writes


def test_an_expert_meeting_back_end_faults_retries_each_and_still_succeeds():
    from training.sandbox.core import INJECTED_ERROR

    agent = ScriptedAgent(EXPERT_RATES, tool_fault_rate=0.3)
    faults = unfinished = 0
    for index, scenario in enumerate(sample_scenarios(generated_world(), 120, seed=7)):
        conversation = agent.run(scenario, seed=index)
        messages = conversation.messages
        in_a_row = longest = 0
        for at, message in enumerate(messages):
            if message.get("role") != "tool":
                continue
            if message["content"] != INJECTED_ERROR:
                in_a_row = 0
                continue
            faults += 1
            in_a_row += 1
            longest = max(longest, in_a_row)
            if at + 1 < len(messages) and in_a_row <= 3:  # the same call again, as the error asks
                assert messages[at + 1]["tool_calls"] == messages[at - 1]["tool_calls"]
        if longest > 3:  # four faults in a row: the expert gives that call up
            unfinished += 1
            continue
        assert verified_success(conversation.episode), (scenario.intent, index)
    assert faults >= 50 and unfinished <= 6
    # At rate 0 (the default) nothing changes: no fault is ever drawn.
    plain = ScriptedAgent(EXPERT_RATES).run(sample_scenarios(generated_world(), 1, seed=7)[0], seed=0)
    assert not any(m.get("content") == INJECTED_ERROR for m in plain.messages)


def test_mistake_rates_are_validated():
    with pytest.raises(AgentConfigError):
        ScriptedAgent({"typo": 0.1})
    with pytest.raises(AgentConfigError):
        ScriptedAgent({"looping": 1.5})
    with pytest.raises(AgentConfigError, match="refund_everything"):
        ScriptedAgent(EXPERT_RATES, handles=("order_status", "refund_everything"))
    for rate in (-0.1, 1.5, True, "0.1"):
        with pytest.raises(AgentConfigError, match="tool_fault_rate"):
            ScriptedAgent(EXPERT_RATES, tool_fault_rate=rate)


def test_simulated_files_pass_the_contract_and_ingest_with_zero_quarantine(tmp_path):
    out = tmp_path / "landing"
    summary = simulate(days=2, per_day=60, seed=3, out_dir=out, world=generated_world(), verified_share=0.8)
    json.dumps(summary)  # the CLI prints it
    files = day_files(out)
    assert [f.parent.name for f in files] == ["2026-11-02", "2026-11-03"]
    records = read_records(files)
    assert len(records) == summary["interactions"] == 120
    validate_all(records)
    report = ingest(tmp_path, [out])
    assert (report["accepted"], report["quarantined"], report["duplicates"]) == (120, 0, 0)
    for record in records:
        assert record["started_at"][:10] == record["ended_at"][:10]
        assert record["started_at"] <= record["ended_at"]
        transferred = any(
            c["name"] == "transfer_to_human_agents"
            for m in record["messages"]
            if m["role"] == "assistant"
            for c in m.get("tool_calls", [])
        )
        assert (record["escalation_was_necessary"] is not None) == transferred
        if record["outcome"] == "escalated":
            assert transferred
        if record["escalation_was_necessary"] is not None:
            assert record["escalation_was_necessary"] == (record["intent"] == "other")
        assert record["messages"][0]["role"] == "system" and record["messages"][1]["role"] == "user"
    assert 0.65 < sum(r["gold"] is not None for r in records) / 120 < 0.95
    assert summary["completed_rate"] > 0.75


def test_simulation_is_deterministic_per_seed(tmp_path):
    a = simulate(days=2, per_day=25, seed=9, out_dir=tmp_path / "a", world=generated_world())
    b = simulate(days=2, per_day=25, seed=9, out_dir=tmp_path / "b", world=generated_world())
    simulate(days=2, per_day=25, seed=10, out_dir=tmp_path / "c", world=generated_world())
    assert a["outcomes"] == b["outcomes"]
    for fa, fb, fc in zip(day_files(tmp_path / "a"), day_files(tmp_path / "b"), day_files(tmp_path / "c")):
        assert fa.read_bytes() == fb.read_bytes()
        assert fa.read_bytes() != fc.read_bytes()


def test_default_world_keeps_customers_stable_across_days_and_runs(tmp_path):
    simulate(days=3, per_day=40, seed=1, out_dir=tmp_path / "a")
    simulate(days=1, per_day=40, seed=2, out_dir=tmp_path / "b", start="2026-11-09")
    by_day = [{r["customer_id"] for r in read_records([f])} for f in day_files(tmp_path / "a")]
    later = {r["customer_id"] for r in read_records(day_files(tmp_path / "b"))}
    assert by_day[0] & by_day[1] and by_day[1] & by_day[2]
    assert later & set().union(*by_day)


def test_intent_mix_drift_changes_only_the_days_from_x(tmp_path):
    base = simulate(days=4, per_day=40, seed=4, out_dir=tmp_path / "base", world=generated_world())
    drift = {"from_day": 2, "intent_mix": {"modify_user_address": 1.0}}
    drifted = simulate(days=4, per_day=40, seed=4, out_dir=tmp_path / "drift", world=generated_world(), drift=drift)
    base_files, drift_files = day_files(tmp_path / "base"), day_files(tmp_path / "drift")
    for day in (0, 1):
        assert base_files[day].read_bytes() == drift_files[day].read_bytes()
    for day in (2, 3):
        assert {r["intent"] for r in read_records([drift_files[day]])} == {"modify_user_address"}
    assert len({r["intent"] for r in read_records(base_files[2:])}) >= 6
    assert drifted["drift"] == [
        {
            "from_day": 2,
            "until_day": None,
            "intent_mix": {"modify_user_address": 1.0},
            "mistake_rates": None,
            "policy_version": None,
        }
    ]
    assert base["drift"] == []


def test_degraded_agent_drift_lowers_success_from_day_x(tmp_path):
    drift = Drift(
        from_day=2, mistake_rates={"unnecessary_escalation": 0.4, "looping": 0.2}, policy_version="retail-agent/2"
    )
    summary = simulate(days=4, per_day=50, seed=6, out_dir=tmp_path, world=generated_world(), drift=drift)
    rates = [day["completed_rate"] for day in summary["per_day_summary"]]
    assert min(rates[:2]) - max(rates[2:]) > 0.2
    versions = [{r["policy_version"] for r in read_records([f])} for f in day_files(tmp_path)]
    # The scripted agent's own label until the drift's version takes over.
    assert versions == [{"retail-rules/1"}] * 2 + [{"retail-agent/2"}] * 2


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_human_labels_follow_the_outcome_with_rater_noise(tmp_path, flip):
    simulate(
        days=1,
        per_day=80,
        seed=8,
        out_dir=tmp_path,
        world=generated_world(),
        label_share=0.5,
        label_flip_rate=flip,
        mistake_rates={"unnecessary_escalation": 0.3},
    )
    labelled = [r for r in read_records(day_files(tmp_path)) if r["human_label"] is not None]
    assert 20 < len(labelled) < 60
    for record in labelled:
        # A necessary transfer is the task done right: the record says escalated, the rater says success.
        succeeded = record["outcome"] == "completed" or (
            record["outcome"] == "escalated" and record["escalation_was_necessary"] is True
        )
        agrees = record["human_label"]["task_success"] == succeeded
        assert agrees == (flip == 0.0)
        assert record["human_label"]["labeled_at"] > record["ended_at"]


def test_model_policy_path_records_what_the_policy_did(tmp_path):
    class TransferEverything:
        name = "transfer-everything"

        def act(self, conversations):
            return [
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"name": "transfer_to_human_agents", "arguments": {"summary": "help"}}],
                }
                for _ in conversations
            ]

    summary = simulate(
        days=1,
        per_day=20,
        seed=2,
        out_dir=tmp_path,
        world=generated_world(),
        policy=TransferEverything(),
        policy_version="candidate/7",
    )
    records = validate_all(read_records(day_files(tmp_path)))
    assert {r["outcome"] for r in records} == {"escalated"} and summary["outcomes"] == {"escalated": 20}
    assert all(r["actions_taken"] == 1 and r["policy_version"] == "candidate/7" for r in records)
    assert all(r["escalation_was_necessary"] == (r["intent"] == "other") for r in records)


def test_scripted_traffic_is_never_recorded_as_the_registered_models_own(tmp_path):
    """At the defaults, the rules agent's conversations carry a label of their own: the weekly
    supervised step learns only from conversations the registered model served (`served_by`), and
    scripted ones under its name were imitated as if the model had held them."""

    class Greeter:
        name = "greeter"

        def act(self, conversations):
            return [{"role": "assistant", "content": "Hello, how can I help?"} for _ in conversations]

    simulate(days=1, per_day=6, seed=3, out_dir=tmp_path / "scripted", world=generated_world())
    simulate(days=1, per_day=6, seed=3, out_dir=tmp_path / "served", world=generated_world(), policy=Greeter())
    scripted = read_records(day_files(tmp_path / "scripted"))
    served = read_records(day_files(tmp_path / "served"))
    assert {r["policy_version"] for r in scripted} == {"retail-rules/1"}
    assert not any(served_by(r, DEFAULT_MODEL_NAME) for r in scripted)
    # A model serving is recorded as the registered model's first version, as the shipped one becomes.
    assert {r["policy_version"] for r in served} == {f"{DEFAULT_MODEL_NAME}/1"}
    assert all(served_by(r, DEFAULT_MODEL_NAME) for r in served)


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"days": 0}, TrafficConfigError),
        ({"per_day": -1}, TrafficConfigError),
        ({"label_share": 2}, TrafficConfigError),
        ({"start": "not-a-date"}, TrafficConfigError),
        ({"world": "/nonexistent/world"}, WorldNotFoundError),
        ({"intent_mix": {"refund_everything": 1.0}}, ScenarioError),
        ({"drift": {"intent_mix": {}}}, TrafficConfigError),
        ({"drift": {"from_day": -1}}, TrafficConfigError),
        ({"policy_version": ""}, TrafficConfigError),
        ({"agent": ScriptedAgent(EXPERT_RATES), "mistake_rates": {"looping": 0.5}}, TrafficConfigError),
        ({"agent": ScriptedAgent(EXPERT_RATES), "drift": {"mistake_rates": {"looping": 0.5}}}, TrafficConfigError),
    ],
)
def test_bad_arguments_raise_specific_errors(tmp_path, kwargs, error):
    arguments = {"days": 1, "per_day": 2, "seed": 0, "out_dir": tmp_path, **kwargs}
    with pytest.raises(error):
        simulate(**arguments)
    assert not list(tmp_path.iterdir())  # nothing half-written


def test_world_folder_in_reference_format_is_used(tmp_path, world_dir, world):
    simulate(days=1, per_day=15, seed=0, out_dir=tmp_path, world=world_dir)
    assert {r["customer_id"] for r in read_records(day_files(tmp_path))} <= set(world["users"])


def test_action_drift_day_over_escalates_on_that_day_only(tmp_path):
    """`retrain simulate --drift-day 1`: day 1's agent hands conversations over; days 0 and 2 are the
    bytes an undrifted run writes."""
    kwargs = {"days": 3, "per_day": 40, "seed": 3, "world": generated_world()}
    simulate(out_dir=tmp_path / "base", **kwargs)
    drifted = simulate(out_dir=tmp_path / "drift", drift={"action_drift_day": 1}, **kwargs)
    assert [(d["from_day"], d["until_day"]) for d in drifted["drift"]] == [(1, 2)]
    base_files, drift_files = day_files(tmp_path / "base"), day_files(tmp_path / "drift")
    for day in (0, 2):
        assert base_files[day].read_bytes() == drift_files[day].read_bytes()

    def escalated(path) -> int:
        return sum(r["outcome"] == "escalated" for r in read_records([path]))

    assert escalated(drift_files[1]) >= escalated(base_files[1]) + 10


def test_measure_throughput_reports_a_rate():
    figures = measure_throughput(n=40, seed=0)
    assert figures["interactions"] == 40 and figures["interactions_per_second"] > 0


def test_cli_drift_presets_and_start_relative_to_today(tmp_path):
    from datetime import datetime, timedelta

    from domains.retail.traffic.simulate import DEGRADED_MISTAKE_RATES, SHIFTED_INTENT_MIX

    summary = simulate(
        days=3,
        per_day=60,
        seed=5,
        out_dir=tmp_path,
        world=generated_world(),
        start=None,
        drift={"intent_mix_from_day": 1, "degraded_agent_from_day": 2},
    )
    today = datetime.now(UTC).date()
    assert summary["start"] == (today - timedelta(days=3)).isoformat()
    assert summary["drift"] == [
        {
            "from_day": 1,
            "until_day": None,
            "intent_mix": SHIFTED_INTENT_MIX,
            "mistake_rates": None,
            "policy_version": None,
        },
        {
            "from_day": 2,
            "until_day": None,
            "intent_mix": None,
            "mistake_rates": DEGRADED_MISTAKE_RATES,
            "policy_version": None,
        },
    ]
    days = [read_records([f]) for f in day_files(tmp_path)]
    share = [sum(r["intent"] in ("return_items", "exchange_items") for r in day) / len(day) for day in days]
    assert min(share[1:]) > share[0]
    from dataplane.contract import validate_record

    for record in (r for day in days for r in day):
        validate_record(record)  # now = the real clock: days that ended yesterday are ingestible today


def test_run_policy_drives_an_evaluation_policy_like_the_expert():
    for index, scenario in enumerate(sample_scenarios(generated_world(), 40, seed=4)):
        expert = ScriptedAgent(EXPERT_RATES).run(scenario, seed=index)
        steps = [m for m in expert.messages if m["role"] == "assistant"]
        policy = ScriptedPolicy(
            lambda conv, steps=steps: steps[assistant_turns(conv)] if assistant_turns(conv) < len(steps) else "Goodbye."
        )
        replayed = run_policy(policy, scenario, seed=index)
        assert replayed.messages == expert.messages
        assert verified_success(replayed.episode)


def test_malformed_model_calls_still_make_contract_records(tmp_path):
    class Garbled:
        def act(self, conversations):
            return [
                {
                    "role": "assistant",
                    "content": "hm",
                    "tool_calls": [{"name": "cancel_pending_order", "arguments": ["not", "an", "object"]}],
                }
                for _ in conversations
            ]

    simulate(days=1, per_day=5, seed=1, out_dir=tmp_path, world=generated_world(), policy=Garbled())
    records = validate_all(read_records(day_files(tmp_path)))
    tool_results = [m["content"] for r in records for m in r["messages"] if m["role"] == "tool"]
    assert tool_results and all(t.startswith("Error") for t in tool_results)
    assert {r["outcome"] for r in records} == {"failed"}
