"""Served traffic is the whole shop: a person finishes what the model hands over, back-end calls
fail at the served fault rate, and the record keeps both parts with who did what (`handoff`)."""

from __future__ import annotations

import copy
import json
import re

import duckdb
import pytest

from dataplane.contract import ContractError, validate_record
from dataplane.settings import default_of
from domains.retail.level1 import LEVEL1_INTENTS
from domains.retail.traffic.simulate import TrafficConfigError, simulate
from evaluation.replay import judge_record, recorded_episode
from monitoring.watch import WatchSettings, watch_day
from tests.helpers_traffic import NOW, day_files, generated_world, ingest, read_records, validate_all
from training.policies import ScriptedPolicy
from training.rewards import verified_success
from training.sandbox.core import INJECTED_ERROR
from training.sandbox.environment import call_tool, environment_class
from training.traffic import simulate as engine_traffic
from training.traffic.handoff import HUMAN_AGENTS, resolved_demonstration
from training.traffic.simulate import ServedTraffic

HAND_OVER = {"name": "transfer_to_human_agents", "arguments": {"summary": "the customer needs a person"}}
_ANSWER = "I'm sorry, I cannot help with that."


def _always_hands_over() -> ScriptedPolicy:
    return ScriptedPolicy(lambda conversation: HAND_OVER, name="hands-over")


def _never_hands_over() -> ScriptedPolicy:
    """Reads a made-up order four times (each read reaches the back end), then gives up in text."""

    def play(conversation):
        reads = sum(1 for m in conversation if m.get("role") == "tool")
        if reads < 4:
            return {"name": "get_order_details", "arguments": {"order_id": "#W0000000"}}
        return _ANSWER

    return ScriptedPolicy(play, name="never-hands-over")


def _serve(out, policy, **options):
    args = {"days": 1, "per_day": 24, "seed": 7, "out_dir": out, "world": generated_world(), "start": "2026-11-02"}
    simulate(**{**args, "policy": policy, **options})
    return read_records(day_files(out))


@pytest.fixture(scope="module")
def handed_over(tmp_path_factory) -> list[dict]:
    return _serve(tmp_path_factory.mktemp("handed") / "landing", _always_hands_over())


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> list[dict]:
    return _serve(tmp_path_factory.mktemp("kept") / "landing", _never_hands_over())


# ---- the served day ----


def test_a_model_that_always_hands_over_has_every_conversation_finished_by_a_person(handed_over):
    assert len(handed_over) == 24
    # The whole shop by default: intents beyond the level-1 slice, and more than one persona.
    assert {r["intent"] for r in handed_over} - set(LEVEL1_INTENTS)
    assert len({r["user_scenario"]["persona"] for r in handed_over}) > 1
    for record in validate_all(handed_over):
        handoff = record["handoff"]
        at = handoff["at_message"]
        assert record["outcome"] == "escalated", "the record's outcome is the model's"
        assert handoff["by"] in HUMAN_AGENTS
        # The model's part ends with its hand-over and that call's result; the person's follows.
        assert record["messages"][at - 2]["tool_calls"][0]["name"] == "transfer_to_human_agents"
        assert record["messages"][at - 1]["role"] == "tool"
        human = record["messages"][at:]
        assert human and human[0]["role"] == "assistant"
        assert all(c["name"] != "transfer_to_human_agents" for m in human for c in m.get("tool_calls") or ())
        # The model made one call (the hand-over): the person's calls are not its actions.
        assert record["actions_taken"] == 1
    # Every request here can be done with the tools (a person retries what the back end refuses).
    assert {r["handoff"]["outcome"] for r in handed_over} == {"completed"}


def test_the_person_reads_the_record_each_change_touches_before_proposing_it(handed_over):
    """A generated scenario's gold is its writes alone; the person still reads the order (or the
    account) a change touches first, so the ids it copies appear before it, as the policy asks."""
    from domains.registry import load_domain

    domain = load_domain("retail")
    writes = 0
    for record in handed_over:
        person = record["messages"][record["handoff"]["at_message"] :]
        calls = [c for m in person for c in m.get("tool_calls") or ()]
        for index, call in enumerate(calls):
            spec = domain.spec(call["name"])
            if spec is None or spec.kind != "write":
                continue
            writes += 1
            key = call["arguments"][spec.record.argument]
            # A call the back end refused is made again: the read comes before the first try.
            before = [c for c in calls[:index] if c["name"] not in ("send_message_to_customer", call["name"])]
            assert before and before[-1]["arguments"] == {spec.record.argument: key}, record["interaction_id"]
            assert domain.spec(before[-1]["name"]).kind == "read"
    assert writes >= 5


def test_the_person_identifies_the_customer_the_agent_did_not_before_any_change(handed_over):
    """This agent hands over before asking who the customer is; the person asks and identifies them
    (a generated gold has no identification to replay) before changing anything."""
    from domains.registry import load_domain

    domain = load_domain("retail")
    changed = 0
    for record in handed_over:
        person = record["messages"][record["handoff"]["at_message"] :]
        specs = [domain.spec(c["name"]) for m in person for c in m.get("tool_calls") or ()]
        kinds = [spec.kind for spec in specs if spec is not None]  # a message to the customer is no domain tool
        if "write" in kinds:
            changed += 1
            assert "identify" in kinds[: kinds.index("write")], record["interaction_id"]
    assert changed >= 5


def test_what_a_change_needs_is_in_the_conversation_before_the_person_makes_it(handed_over):
    """The person asks the customer for a change's details (the address, the payment method, the
    items, the reason) before proposing it, so every value the call carries was said or read
    before it, and the customer agreed to the change proposed: what a model imitating the
    resolution can copy. New variants' item ids are the exception: they are a product's, which
    the person does not read."""
    from domains.registry import load_domain

    domain = load_domain("retail")
    checked = 0
    for record in handed_over:
        at = record["handoff"]["at_message"]
        messages = record["messages"]
        for index in range(at, len(messages)):
            for call in messages[index].get("tool_calls") or ():
                spec = domain.spec(call["name"])
                if spec is None or spec.kind != "write":
                    continue
                heard = " ".join(str(m.get("content")) for m in messages[:index] if m.get("role") in ("user", "tool"))
                assert "not what I asked for" not in messages[index - 1]["content"] + messages[index - 3]["content"]
                for argument, value in call["arguments"].items():
                    if argument == "new_item_ids":
                        continue
                    for one in value if isinstance(value, list) else [value]:
                        assert str(one) in heard, (record["interaction_id"], argument, one)
                        checked += 1
    assert checked >= 20


def test_the_person_proposes_and_confirms_a_change_in_the_shops_own_words(handed_over):
    """Retail words its changes as its own agent does (`Domain.change_phrases`), so a resolution
    reads as the conversations a model of the shop was built on."""
    from domains.registry import load_domain

    domain = load_domain("retail")
    checked = asked = 0
    for record in handed_over:
        said = [
            c["arguments"]["message"]
            for m in record["messages"][record["handoff"]["at_message"] :]
            for c in m.get("tool_calls") or ()
            if c["name"] == "send_message_to_customer"
        ]
        writes = [a for a in (record.get("gold") or {}).get("actions") or () if a["name"] in domain.tool_names("write")]
        for write in writes:
            proposal, confirmation = domain.change_phrases(write["name"], write["arguments"], record["initial_state"])
            assert proposal.endswith("Shall I proceed?") and proposal in said, record["interaction_id"]
            if record["handoff"]["outcome"] == "completed":
                assert confirmation in said
            checked += 1
            # What only the customer can say is asked as the shop's agent asks it, right before the
            # proposal (the asking expert of the recipe's shop stage: `ScriptedAgent(asks_details=True)`).
            question = domain.detail_question(write["name"], write["arguments"])
            if question is not None:
                assert said[said.index(proposal) - 1] == question, record["interaction_id"]
                asked += 1
    assert checked >= 5 and asked >= 3
    assert domain.change_phrases("get_order_details", {"order_id": "#W1"}, {}) is None


def test_a_model_that_never_hands_over_writes_no_handoff(kept):
    assert all("handoff" not in r for r in kept)
    assert {r["outcome"] for r in kept} == {"failed"}
    assert all(r["messages"][-1]["content"] == _ANSWER for r in kept)


def test_the_person_is_the_domains_rules_agent_when_it_has_one(tmp_path):
    summary = engine_traffic.simulate(
        "airline", days=1, per_day=6, seed=3, out_dir=tmp_path, policy=_always_hands_over(), n_users=40
    )
    records = read_records(summary["files"])
    assert summary["outcomes"] == {"escalated": 6}
    for record in validate_all(records):
        first = record["messages"][record["handoff"]["at_message"]]
        # The airline's rules agent opens by asking for the user id (the gold-replay person greets).
        assert first["tool_calls"][0]["arguments"]["message"] == "Could you tell me your user id, please?"
        assert record["handoff"]["outcome"] in ("completed", "failed")


def test_level_1_stays_the_fault_free_slice(tmp_path):
    records = _serve(
        tmp_path, _never_hands_over(), intent_mix={"order_status": 0.5, "cancel_order": 0.5}, level=1, per_day=12
    )
    assert {r["intent"] for r in records} <= set(LEVEL1_INTENTS)
    assert not any(m.get("content") == INJECTED_ERROR for r in records for m in r["messages"])


def test_resolution_and_faults_can_be_turned_off_and_are_the_models_only(tmp_path):
    records = _serve(tmp_path / "off", _always_hands_over(), resolve_handovers=False, tool_fault_rate=0.0)
    assert all("handoff" not in r for r in records)
    with pytest.raises(TrafficConfigError, match="tool_fault_rate"):
        simulate(days=1, per_day=2, out_dir=tmp_path / "scripted", world=generated_world(), tool_fault_rate=0.1)
    with pytest.raises(TrafficConfigError, match=r"tool_fault_rate=1\.5"):
        _serve(tmp_path / "bad", _always_hands_over(), tool_fault_rate=1.5)


# ---- faults ----


def test_the_served_fault_rate_is_a_declared_setting_of_eight_percent():
    assert default_of(ServedTraffic, "tool_fault_rate") == 0.08
    assert default_of(ServedTraffic, "resolve_handovers") is True


def test_served_traffic_shows_faulted_calls_as_tool_messages_and_is_reproducible(kept, tmp_path):
    results = [m["content"] for r in kept for m in r["messages"] if m["role"] == "tool"]
    assert len(results) == 24 * 4
    assert 0 < results.count(INJECTED_ERROR) < len(results) / 4
    again = _serve(tmp_path / "again", _never_hands_over())
    assert again == kept
    clean = _serve(tmp_path / "clean", _never_hands_over(), tool_fault_rate=0.0)
    assert not any(m.get("content") == INJECTED_ERROR for r in clean for m in r["messages"])


def _faults(seed: int, rate: float, calls: int) -> list[bool]:
    env = environment_class("retail")()
    world = generated_world()
    env.reset(initial_state=world, seed=seed, tool_fault_rate=rate)
    order = next(iter(world["orders"]))
    return [call_tool(env, "get_order_details", {"order_id": order}) == INJECTED_ERROR for _ in range(calls)]


def test_the_fault_share_over_many_calls_is_near_the_rate_and_fixed_by_the_seed():
    runs = {seed: _faults(seed, 0.08, 100) for seed in range(50)}
    share = sum(sum(r) for r in runs.values()) / 5000
    assert 0.065 <= share <= 0.095
    assert _faults(3, 0.08, 100) == runs[3]
    assert runs[3] != runs[4]
    assert not any(_faults(3, 0.0, 100))


# ---- the record contract ----


def test_records_without_handoff_validate_and_ingest_as_before(world, reference_tasks, kept, handed_over, tmp_path):
    from tests.helpers_data import NOW as TASKS_NOW
    from tests.helpers_data import build_records

    for record in build_records(world, reference_tasks, 4):
        assert "handoff" not in validate_record(record, now=TASKS_NOW)
    path = tmp_path / "day.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [*kept[:4], *handed_over[4:8]]) + "\n", encoding="utf-8")
    summary = ingest(tmp_path, [path])
    assert summary["accepted"] == 8 and summary["quarantined"] == 0, summary["quarantined_by_rule"]
    with duckdb.connect(str(tmp_path / "ingest.duckdb"), read_only=True) as con:
        stored = [json.loads(text) for (text,) in con.execute("SELECT record FROM interactions").fetchall()]
    assert sum("handoff" in r for r in stored) == 4
    assert all(r["handoff"]["at_message"] < len(r["messages"]) for r in stored if "handoff" in r)


@pytest.mark.parametrize(
    "change,detail",
    [
        ({"handoff": {"at_message": 4, "by": "human:sim-agent-01"}}, "handoff"),
        ({"handoff": {"at_message": 4, "by": "human:sim-agent-01", "outcome": "won"}}, "handoff.outcome"),
        ({"handoff": {"at_message": 0, "by": "human:sim-agent-01", "outcome": "failed"}}, "handoff.at_message"),
        ({"handoff": {"at_message": 4, "by": "a person", "outcome": "failed"}}, "handoff.by"),
        ({"handoff": {"at_message": 4, "by": "h", "outcome": "failed", "note": 1}}, "handoff"),
        ({"handoff": {"at_message": 999, "by": "h", "outcome": "failed"}}, "at_message=999"),
        ({"handoff": {"at_message": 2, "by": "h", "outcome": "failed"}}, "hand-over call"),
        ({"outcome": "completed"}, "outcome='completed'"),
    ],
)
def test_a_malformed_handoff_breaks_the_bad_handoff_rule(handed_over, change, detail):
    record = handed_over[0]
    assert record["handoff"]["at_message"] == 4
    with pytest.raises(ContractError) as info:
        validate_record({**copy.deepcopy(record), **change}, now=NOW)
    assert info.value.rule == "bad_handoff" and detail in str(info.value)


def test_a_malformed_handoff_is_quarantined_under_its_rule(handed_over, tmp_path):
    bad = {**handed_over[0], "handoff": {**handed_over[0]["handoff"], "outcome": "escalated"}}
    path = tmp_path / "day.jsonl"
    path.write_text(json.dumps(bad) + "\n" + json.dumps(handed_over[1]) + "\n", encoding="utf-8")
    summary = ingest(tmp_path, [path])
    assert summary["accepted"] == 1 and summary["quarantined"] == 1
    with duckdb.connect(str(tmp_path / "ingest.duckdb"), read_only=True) as con:
        [(rule, detail)] = con.execute("SELECT rule, detail FROM quarantine").fetchall()
    assert rule == "bad_handoff" and "handoff.outcome" in detail


def test_the_person_id_is_checked_for_pii(handed_over):
    bad = {**handed_over[0], "handoff": {**handed_over[0]["handoff"], "by": "human:4111111111111111"}}
    with pytest.raises(ContractError) as info:
        validate_record(bad, now=NOW)
    assert info.value.rule == "pii_in_id"


def test_the_persons_messages_are_scrubbed_like_any_other(handed_over):
    from dataplane.store import prepare_row

    record = copy.deepcopy(handed_over[0])
    at = record["handoff"]["at_message"]
    record["messages"][at + 1]["content"] = "Call me on 415-555-0100 please."
    text = prepare_row(validate_record(record, now=NOW)).values[13]
    assert "415-555-0100" not in text and '"handoff"' in text


# ---- judging served traffic ----


def test_replay_judges_only_the_models_part(handed_over):
    record = next(r for r in handed_over if r["gold"] is not None and r["handoff"]["outcome"] == "completed")
    episode = recorded_episode(record)
    assert [e.tool for e in episode.audit_log] == ["transfer_to_human_agents"]
    assert episode.transferred and not verified_success(episode)
    judged = judge_record(record)
    assert judged.trial is not None and judged.trial.messages == record["messages"][: record["handoff"]["at_message"]]


def test_the_live_watch_counts_the_models_calls_not_the_persons(handed_over):
    watch = watch_day("2026-11-02", "retail-agent/1", handed_over, None, None, [], WatchSettings(min_interactions=5))
    assert watch.interactions == 24 and not watch.skipped
    assert watch.tool_mix == {"transfer_to_human_agents": 1.0}
    assert watch.failure_modes is not None


def test_a_recorded_fault_is_refused_again_on_replay(handed_over):
    record = next(r for r in handed_over if r["gold"] is not None and r["intent"] == "cancel_order")
    write = next(a for a in record["gold"]["actions"] if a["name"] == "cancel_pending_order")
    faulted = {
        **record,
        "messages": [
            *record["messages"][:2],
            {"role": "assistant", "content": "", "tool_calls": [write]},
            {"role": "tool", "name": write["name"], "content": INJECTED_ERROR},
            {"role": "assistant", "content": "Your order is cancelled."},
        ],
        "outcome": "failed",
    }
    faulted.pop("handoff")
    episode = recorded_episode(faulted)
    assert [e.error for e in episode.audit_log] == [True]
    assert episode.final_state == episode.initial_state


# ---- the demonstration SFT learns from ----


def _record(outcome: str | None) -> dict:
    messages = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "Cancel order #W1."},
        {"role": "assistant", "content": "Let me get a colleague.", "tool_calls": [HAND_OVER]},
        {"role": "tool", "name": "transfer_to_human_agents", "content": "Transfer successful"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "cancel_pending_order", "arguments": {}}]},
        {"role": "tool", "name": "cancel_pending_order", "content": "{}"},
        {"role": "assistant", "content": "Done."},
    ]
    record = {"interaction_id": "x", "domain": "retail", "messages": messages, "outcome": "escalated"}
    if outcome is not None:
        record["handoff"] = {"at_message": 4, "by": "human:sim-agent-01", "outcome": outcome}
    return record


def test_a_completed_handoff_becomes_a_demonstration_without_the_hand_over():
    record = _record("completed")
    assert resolved_demonstration(record) == [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "Cancel order #W1."},
        {"role": "assistant", "content": "Let me get a colleague.", "tool_calls": []},
        *record["messages"][4:],
    ]
    # A hand-over turn that said nothing else is dropped whole.
    record["messages"][2]["content"] = ""
    assert resolved_demonstration(record) == [*record["messages"][:2], *record["messages"][4:]]
    assert record["messages"][3]["role"] == "tool", "the record itself is left as it was"


def _say(text: str) -> dict:
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"name": "send_message_to_customer", "arguments": {"message": text}}],
    }


def _heard(text: str) -> dict:
    return {"role": "tool", "name": "send_message_to_customer", "content": text}


def _identified_then_handed_over(person_finds: str) -> dict:
    """The agent identifies the customer and hands over; the person greets, asks who the customer
    is again, identifies (finding `person_finds`), reads and cancels."""
    find = {"name": "find_user_id_by_email", "arguments": {"email": "a@b.c"}}
    agent = [
        {"role": "system", "content": "policy"},
        {"role": "user", "content": "Hi, I need to return something."},
        _say("Could you give me your email?"),
        _heard("It is a@b.c."),
        {"role": "assistant", "content": "", "tool_calls": [find]},
        {"role": "tool", "name": "find_user_id_by_email", "content": "user_1"},
        {"role": "assistant", "content": "", "tool_calls": [HAND_OVER]},
        {"role": "tool", "name": "transfer_to_human_agents", "content": "Transfer successful"},
    ]
    person = [
        _say("Hello, this is a member of the support team."),
        _heard("Hi."),
        _say("To verify your identity, could you please provide your email?"),
        _heard("a@b.c"),
        {"role": "assistant", "content": "", "tool_calls": [find]},
        {"role": "tool", "name": "find_user_id_by_email", "content": "Error: the back end timed out"},
        {"role": "assistant", "content": "", "tool_calls": [find]},
        {"role": "tool", "name": "find_user_id_by_email", "content": person_finds},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"name": "get_order_details", "arguments": {"order_id": "#W1"}}],
        },
        {"role": "tool", "name": "get_order_details", "content": "{}"},
        _say("Done."),
    ]
    return {
        "interaction_id": "y",
        "domain": "retail",
        "messages": agent + person,
        "outcome": "escalated",
        "handoff": {"at_message": len(agent), "by": "human:sim-agent-01", "outcome": "completed"},
    }


def test_a_person_identifying_again_whom_the_agent_identified_is_left_out_of_the_demonstration():
    record = _identified_then_handed_over("user_1")
    demo = resolved_demonstration(record)
    # The agent's part without the hand-over, then the person's from after the identification
    # that found the same customer (its greeting, the identity asked again, the failed try: gone).
    assert demo == [*record["messages"][:6], *record["messages"][-3:]]
    # A person who found someone else is kept whole: the agent's identification is not the person's.
    other = _identified_then_handed_over("user_2")
    assert resolved_demonstration(other) == [*other["messages"][:6], *other["messages"][8:]]


def test_no_demonstration_from_a_failed_or_unresolved_handoff():
    assert resolved_demonstration(_record("failed")) is None
    assert resolved_demonstration(_record(None)) is None


def test_a_served_days_completed_handoffs_make_demonstrations_with_no_hand_over(handed_over):
    for record in handed_over:
        demo = resolved_demonstration(record)
        assert demo is not None and demo[:2] == record["messages"][:2]
        calls = [c["name"] for m in demo for c in m.get("tool_calls") or ()]
        assert "transfer_to_human_agents" not in calls
        assert not any(m.get("role") == "tool" and m.get("name") == "transfer_to_human_agents" for m in demo)
        # The desk's greeting and the customer's answer to it go; the person's work follows the
        # customer's opening as the agent's own would.
        at = record["handoff"]["at_message"]
        assert re.match(r"Hello, this is a member", record["messages"][at]["tool_calls"][0]["arguments"]["message"])
        assert demo == [*record["messages"][:2], *record["messages"][at + 2 :]]


def test_retrain_simulate_takes_level_and_fault_rate_only_for_a_served_day(tmp_path, capsys):
    from orchestration.cli import main

    args = ["simulate", "--days", "1", "--per-day", "2", "--out", str(tmp_path)]
    assert main([*args, "--level", "1"]) == 2
    assert main([*args, "--tool-fault-rate", "0.2"]) == 2
    assert main([*args, "--tool-list", "level1"]) == 2
    assert "--served-by" in capsys.readouterr().err and not day_files(tmp_path)


def test_retrain_simulate_serves_with_the_tool_list_asked_for(tmp_path, monkeypatch):
    from orchestration.cli import commands, main

    asked = []

    def serving_policy(*args):
        asked.append(args)
        raise ValueError("stop before any model loads")

    monkeypatch.setattr(commands, "serving_policy", serving_policy)
    args = ["simulate", "--days", "1", "--per-day", "2", "--out", str(tmp_path), "--served-by", "m"]
    assert main([*args, "--tool-list", "level1"]) == 2
    assert main([*args, "--level", "1"]) == 2
    assert asked == [("m", "retail", None, "level1"), ("m", "retail", 1, "by_level")]


def test_the_published_schema_takes_a_handoff_and_refuses_a_malformed_one(handed_over):
    import jsonschema

    from dataplane.record_schema import record_json_schema

    validator = jsonschema.Draft202012Validator(record_json_schema())
    assert all(not list(validator.iter_errors(r)) for r in handed_over)
    bad = {**handed_over[0], "handoff": {"at_message": 4, "by": "human:sim-agent-01", "outcome": "escalated"}}
    assert list(validator.iter_errors(bad))


def test_the_weeks_supervised_step_learns_from_what_the_person_finished(handed_over):
    """Every conversation the model handed over and a person completed is a good episode of the
    weekly update, with the person's calls and without the hand-over; unresolved ones are not."""
    from training.episode_update import good_episodes

    everyone_trains = (1.0, 0.0, 0.0)  # every customer in the training split
    episodes = good_episodes(handed_over, level=4, fractions=everyone_trains)
    with_gold = [r for r in handed_over if r.get("gold")]
    # A conversation a rater labelled a failure is never imitated, whoever finished it.
    unlabelled = [r for r in with_gold if (r.get("human_label") or {}).get("task_success") is not False]
    assert unlabelled and len(episodes) == len(unlabelled) < len(with_gold)
    for episode in episodes:
        assert "handoff" not in episode
        calls = [c["name"] for m in episode["messages"] for c in m.get("tool_calls") or ()]
        assert calls and "transfer_to_human_agents" not in calls
    # The same conversations with the person's part failed teach nothing.
    failed = [{**r, "handoff": {**r["handoff"], "outcome": "failed"}} for r in with_gold]
    assert good_episodes(failed, level=4, fractions=everyone_trains) == []


def test_a_hand_over_the_gold_asks_for_is_the_agents_own_success_and_is_imitated(handed_over):
    """When the task's gold hands the conversation to a person (a request no tool serves), the
    agent's hand-over is its success: the step imitates the agent's part, hand-over included, and
    not the person's. Left out, a step at a teaching rate unlearnt handing over altogether."""
    from training.episode_update import good_episodes

    everyone_trains = (1.0, 0.0, 0.0)
    summary = {"summary": "the customer needs a person"}
    record = next(
        r for r in handed_over if r.get("gold") and (r.get("human_label") or {}).get("task_success") is not False
    )
    asks_for_a_person = {
        **record,
        "gold": {"actions": [{"name": HAND_OVER["name"], "arguments": summary}], "outputs": []},
    }
    for outcome in ("completed", "failed"):  # whatever the person then did
        handed = {**asks_for_a_person, "handoff": {**record["handoff"], "outcome": outcome}}
        [episode] = good_episodes([handed], level=4, fractions=everyone_trains)
        calls = [c["name"] for m in episode["messages"] for c in m.get("tool_calls") or ()]
        assert calls[-1] == "transfer_to_human_agents", calls
        agent_part = record["messages"][: record["handoff"]["at_message"]]
        assert episode["messages"] == agent_part[: len(episode["messages"])], "the agent's own turns, as recorded"
    # The same conversation when its gold is work a tool does: the person's resolution, no hand-over.
    [resolved] = good_episodes([record], level=4, fractions=everyone_trains)
    assert "transfer_to_human_agents" not in [
        c["name"] for m in resolved["messages"] for c in m.get("tool_calls") or ()
    ]


def test_at_level_1_a_persons_resolution_is_restated_in_the_levels_form(handed_over):
    """At curriculum level 1 a completed hand-over teaches the level-1 demonstration of its task,
    not the desk's greeting and proposals (a form the level's agent never writes: the step then
    stopped handing over without learning the task, bench/handover_learning.py)."""
    from domains.retail.level1 import as_level1, level1_demonstration
    from training.episode_update import good_episodes

    everyone_trains = (1.0, 0.0, 0.0)
    level1 = [r for r in handed_over if r.get("gold") and as_level1(r) is not None]
    labelled_bad = [r for r in level1 if (r.get("human_label") or {}).get("task_success") is False]
    assert len(level1) > len(labelled_bad), "the served day has level-1 tasks a person completed"
    episodes = good_episodes(handed_over, level=1, fractions=everyone_trains)
    assert len(episodes) == len(level1) - len(labelled_bad)
    by_id = {r["interaction_id"]: r for r in level1}
    for episode in episodes:
        expected = level1_demonstration(as_level1(by_id[episode["interaction_id"]]))
        calls = [c for m in episode["messages"] for c in m.get("tool_calls") or ()]
        wanted = [c for m in expected["messages"] for c in m.get("tool_calls") or ()]
        assert calls == wanted[: len(calls)] and calls
        assert "handoff" not in episode
        assert not any(re.match(r"Hello, this is a member", c["arguments"].get("message", "")) for c in calls)
    # Above level 1 the person's work is kept as it was written (without the desk's greeting).
    (above,) = good_episodes([by_id[episodes[0]["interaction_id"]]], level=4, fractions=everyone_trains)
    calls = [c for m in above["messages"] for c in m.get("tool_calls") or ()]
    assert not any(re.match(r"Hello, this is a member", c["arguments"].get("message", "")) for c in calls)
    gold = [a for a in by_id[above["interaction_id"]]["gold"]["actions"] if a["name"] != "transfer_to_human_agents"]
    assert all(a in [{"name": c["name"], "arguments": c["arguments"]} for c in calls] for a in gold) and gold
