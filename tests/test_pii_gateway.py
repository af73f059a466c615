"""The PII gateway of served models: the model sees pseudonyms, the world and the record the truth."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dataplane.scrub import PSEUDONYM_RE, scanner_for, using_pii_key
from training.policies import ScriptedPolicy, assistant_message
from training.sandbox.pii_gateway import PseudonymisedPolicy
from training.sandbox.rollout import Conversation, RolloutError, roll_out
from training.traffic.simulate import simulate

KEY = "pii-gateway-test-key-0123456789"
TOKEN = re.compile(r"user_[0-9a-f]{16}@masked\.invalid")


def test_pseudonymise_scrubs_as_scan_and_maps_each_pseudonym_to_the_address_as_written():
    scanner = scanner_for(())
    # A zero-width space inside the address and a card: only the address is reversible.
    text = "Mail Ann.Lee@Example.com or a\u200bnn@x.org, card 4111 1111 1111 1111."
    with using_pii_key(KEY):
        scrubbed, written = scanner.pseudonymise(text)
        assert scrubbed == scanner.scan(text)[0]
        assert "[CARD]" in scrubbed and "@example.com" not in scrubbed.lower()
        assert sorted(written.values()) == ["Ann.Lee@Example.com", "a\u200bnn@x.org"]
        assert set(written) == set(TOKEN.findall(scrubbed))
        assert scanner.pseudonymise("no pii here") == ("no pii here", {})


def test_the_policy_sees_pseudonyms_and_its_reply_is_given_back_as_written():
    seen: list[list[dict]] = []

    def agent(conversation):
        seen.append(conversation)
        found = TOKEN.search(conversation[-1]["content"])
        if found is None:
            return "ok"
        token = found.group(0)
        return assistant_message(f"Noted {token}.", [{"name": "lookup", "arguments": {"who": [token]}}])

    policy = PseudonymisedPolicy(ScriptedPolicy(agent), "retail")
    conversation = [{"role": "user", "content": "I am bo@shop.example, hello"}]
    with using_pii_key(KEY):
        reply = policy.act([conversation])[0]
        assert reply["content"] == "Noted bo@shop.example."
        assert reply["tool_calls"][0]["arguments"] == {"who": ["bo@shop.example"]}
        assert "bo@shop.example" not in json.dumps(seen[0])
        # The next turn scrubs only what is new, into the same view (a per-conversation cache holds).
        conversation += [reply, {"role": "tool", "content": "found bo@shop.example"}, {"role": "user", "content": "ok"}]
        assert policy.act([conversation])[0]["content"] == "ok"
        assert policy.view_of(conversation) == list(seen[1])
    assert seen[1] is seen[0] and len(seen[1]) == 4
    assert "bo@shop.example" not in json.dumps(seen[1])
    assert TOKEN.search(seen[1][1]["tool_calls"][0]["arguments"]["who"][0])


def test_ended_conversations_drop_their_views():
    policy = PseudonymisedPolicy(ScriptedPolicy(lambda c: "hi"), "retail")
    first, second = [{"role": "user", "content": "a@b.co"}], [{"role": "user", "content": "c@d.co"}]
    with using_pii_key(KEY):
        policy.act([first, second])
        policy.act([second])
    assert list(policy._views) == [id(second)]


def test_served_level1_traffic_reaches_the_tools_with_real_addresses(tmp_path: Path):
    """A policy that only knows pseudonyms (as the shipped agent, trained on stored records) serves
    e-mail customers: the world gets the real address, and the record stores what happened."""
    raw_seen: list[str] = []

    def agent(conversation):
        text = json.dumps(conversation)
        raw_seen.extend(re.findall(r"[\w.]+@example\.com", text))
        last = conversation[-1]
        if last["role"] == "user" and len(conversation) == 2:
            token = TOKEN.search(last["content"])
            if token:
                return {"name": "find_user_id_by_email", "arguments": {"email": token.group(0)}}
        return "Thank you, goodbye."

    with using_pii_key(KEY):
        summary = simulate(
            days=1,
            per_day=12,
            seed=3,
            out_dir=tmp_path,
            policy=PseudonymisedPolicy(ScriptedPolicy(agent), "retail"),
            level=1,
            policy_version="retail-agent/1",
        )
    records = [json.loads(line) for f in summary["files"] for line in Path(f).read_text().splitlines()]
    looked_up = [
        (call["arguments"]["email"], messages[i + 1]["content"])
        for messages in (r["messages"] for r in records)
        for i, m in enumerate(messages)
        for call in m.get("tool_calls") or ()
        if call["name"] == "find_user_id_by_email"
    ]
    assert looked_up, "no served customer gave an e-mail address"
    assert raw_seen == []
    for email, result in looked_up:
        assert email.endswith("@example.com") and not PSEUDONYM_RE.search(email)
        assert not result.startswith("Error"), result


def test_a_policy_that_miscounts_its_replies_is_named_by_the_rollout():
    policy = PseudonymisedPolicy(ScriptedPolicy(lambda c: "hi", name="counts-wrong"), "retail")
    policy.policy.act = lambda conversations: []  # no reply at all
    with pytest.raises(RolloutError, match="counts-wrong"):
        roll_out(policy, [Conversation([{"role": "user", "content": "hello"}])], max_turns=2)


def test_the_view_keeps_what_a_scripted_policy_reads_besides_the_text():
    seen = []
    policy = PseudonymisedPolicy(
        ScriptedPolicy(lambda c: seen.append((c.task_id, c.trial, c.intent)) or "hi"), "retail"
    )
    with using_pii_key(KEY):
        policy.act([Conversation([{"role": "user", "content": "a@b.co"}], task_id="t-1", trial=2, intent="x")])
    assert seen == [("t-1", 2, "x")]
