"""Rollouts: scripted characters behave as they should, seeds pair trials, turns are batched."""
from __future__ import annotations

import json

import pytest

from evaluation.failure_modes import primary_failure_mode
from evaluation.metrics import paired_outcomes, success_rate
from evaluation.policy import Conversation, ScriptedPolicy, ScriptError
from evaluation.rollout import RolloutError, record_id_of, run_rollouts, trial_seed
from evaluation.stats import mcnemar_exact
from tests.helpers_eval import (
    RecordingPolicy,
    escalator_policy,
    expert_policy,
    make_records,
    random_policy,
)


@pytest.fixture(scope="module")
def records():
    return make_records(16)


def test_expert_from_gold_succeeds_everywhere(records):
    trials = run_rollouts(expert_policy(records), records, k=2, seed=0)
    assert len(trials) == 2 * len(records)
    assert [t.key for t in trials] == [(r["interaction_id"], i) for r in records for i in range(2)]
    assert all(t.success for t in trials), [(t.record_id, t.ended_by) for t in trials if not t.success]
    assert all(t.reward_terms["completed"] > 0 and t.reward > 0 for t in trials)
    # The transcript is the chat a model would have seen: opening, then assistant/tool turns.
    first = trials[0].messages
    assert [m["role"] for m in first[:2]] == ["system", "user"]
    assert first[2]["role"] == "assistant" and first[3]["role"] == "tool"
    assert first[3]["name"] == first[2]["tool_calls"][0]["name"]


def test_random_policy_mostly_fails(records):
    trials = run_rollouts(random_policy(), records, k=2, seed=0)
    assert success_rate(trials) <= 0.2
    assert all(t.turns <= 7 for t in trials)


def test_escalator_is_an_unnecessary_escalation(records):
    necessary = {r["interaction_id"] for r in records if r["escalation_was_necessary"]}
    trials = run_rollouts(escalator_policy(), records, k=1, seed=0)
    for t in trials:
        assert t.ended_by == "done" and t.turns == 1 and t.episode.transferred
        if t.record_id not in necessary:
            assert not t.success
            assert primary_failure_mode(t) == "unnecessary_escalation"


def test_identical_policies_pair_up_identically(records):
    a = run_rollouts(random_policy("a"), records, k=3, seed=11)
    b = run_rollouts(random_policy("b"), list(reversed(records)), k=3, seed=11)
    b_by_key = {t.key: t for t in b}
    for t in a:
        twin = b_by_key[t.key]
        assert (t.seed, t.success, t.messages) == (twin.seed, twin.success, twin.messages)
    candidate, champion = paired_outcomes(a, b)
    assert mcnemar_exact(candidate, champion).discordant == 0


def test_seed_changes_the_customers():
    """The simulator seed reaches the customer: another seed, other customer lines somewhere."""
    records = make_records(16)
    openings = {seed: [t.messages[1]["content"] for t in run_rollouts(escalator_policy(), records, seed=seed)]
                for seed in (0, 1)}
    assert openings[0] != openings[1]
    assert trial_seed(0, "r1", 0) == trial_seed(0, "r1", 0)
    assert len({trial_seed(0, "r1", 0), trial_seed(1, "r1", 0), trial_seed(0, "r1", 1), trial_seed(0, "r2", 0)}) == 4


def test_one_act_call_per_round_with_every_live_conversation(records):
    policy = RecordingPolicy(expert_policy(records))
    trials = run_rollouts(policy, records, k=2, seed=0)
    assert policy.batch_sizes[0] == 2 * len(records)
    # One call per round, not per conversation: as many calls as the longest conversation has turns.
    assert len(policy.batch_sizes) == max(t.turns for t in trials)
    assert sum(policy.batch_sizes) == sum(t.turns for t in trials)
    assert policy.batch_sizes == sorted(policy.batch_sizes, reverse=True)
    # Each round's batch holds exactly the conversations still running.
    for round_index, batch in enumerate(policy.batches):
        assert sorted(batch) == sorted(t.key for t in trials if t.turns > round_index)


def test_turns_are_bounded(records):
    thinker = ScriptedPolicy(lambda conv: {"name": "think", "arguments": {"thought": "still thinking"}})
    trials = run_rollouts(thinker, records[:3], k=1, max_turns=4)
    assert all(t.turns == 4 and t.ended_by == "max_turns" and not t.success for t in trials)
    assert all(primary_failure_mode(t) == "looping" for t in trials)
    assert thinker.calls == 4


def test_several_calls_in_one_message_run_in_order(records):
    record = records[0]
    steps = [[{"name": "think", "arguments": {"thought": "a"}},
              {"name": "calculate", "arguments": {"expression": "2 + 3"}}]]
    policy = ScriptedPolicy.from_table({record["interaction_id"]: steps})
    trial = run_rollouts(policy, [record])[0]
    tools = [m for m in trial.messages if m["role"] == "tool"]
    assert [m["name"] for m in tools] == ["think", "calculate"]
    assert tools[1]["content"].startswith("5")
    assert trial.tool_calls == 2 and trial.turns == 2 and trial.ended_by == "answer"


def test_errors_are_counted_and_unknown_tools_do_not_raise(records):
    record = records[0]
    steps = [{"name": "rm_rf", "arguments": {}}, {"name": "get_order_details", "arguments": {"order_id": "#W0"}}]
    trial = run_rollouts(ScriptedPolicy.from_table({record["interaction_id"]: steps}), [record])[0]
    assert trial.tool_errors == 2 and trial.tool_calls == 2
    assert all(e.error for e in trial.episode.audit_log)


def test_records_with_json_text_fields_roll_out_the_same(records):
    as_text = [{**r, "initial_state": json.dumps(r["initial_state"]), "gold": json.dumps(r["gold"]),
                "user_scenario": json.dumps(r["user_scenario"])} for r in records[:4]]
    plain = run_rollouts(expert_policy(records), records[:4], seed=2)
    text = run_rollouts(expert_policy(records), as_text, seed=2)
    assert [(t.success, t.messages) for t in plain] == [(t.success, t.messages) for t in text]


def test_policy_breaking_the_batch_seam_is_an_error(records):
    class Short:
        name = "short"

        def act(self, conversations):
            return []

    with pytest.raises(RolloutError, match="bad_policy_batch"):
        run_rollouts(Short(), records[:2])


def test_bad_records_are_refused(records):
    with pytest.raises(RolloutError, match="missing_record_id"):
        record_id_of({"intent": "other"})
    with pytest.raises(RolloutError, match="duplicate_record_id"):
        run_rollouts(escalator_policy(), [records[0], records[0]])
    with pytest.raises(RolloutError, match="missing_initial_state"):
        run_rollouts(escalator_policy(), [{**records[0], "initial_state": None}])


def test_table_policy_without_a_script_for_the_task_says_so(records):
    policy = ScriptedPolicy.from_table({"other-task": []}, name="narrow")
    with pytest.raises(ScriptError, match="no script for task"):
        policy.act([Conversation([], task_id=records[0]["interaction_id"])])


# ---- a transformers policy: a tiny randomly initialised Qwen2 with a locally trained tokenizer ----

@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory, records):
    from training.bootstrap import TinyModelSpec, build_tiny_policy

    spec = TinyModelSpec(vocab_size=3000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192)
    return build_tiny_policy(tmp_path_factory.mktemp("tiny"), records, spec)


@pytest.fixture(scope="module")
def hf_policy(tiny_policy_dir):
    import torch

    from evaluation.policy import HFPolicy

    policy = HFPolicy(str(tiny_policy_dir), max_new_tokens=10)
    # A fresh initialisation has near-uniform logits and repeats one token; wider weights make the
    # greedy output depend on the prompt, so batched-vs-single comparisons are not vacuous.
    torch.manual_seed(0)
    with torch.no_grad():
        for parameter in policy.model.parameters():
            if parameter.dim() > 1:
                parameter.normal_(0.0, 0.2)
    return policy


def _conversations(records):
    from training.prompting import initial_messages

    convs = [initial_messages(r, seed=i) for i, r in enumerate(records[:4])]
    # Different lengths, so that the batch really is left-padded.
    convs[1] = convs[1] + [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "think", "arguments": {"thought": "x"}}]},
        {"role": "tool", "name": "think", "content": "a longer tool result " * 12},
    ]
    convs[2] = convs[2] + [{"role": "assistant", "content": "Could you give me your email?", "tool_calls": []},
                           {"role": "user", "content": "It is a@b.c"}]
    return convs


def test_hf_policy_batched_generation_gives_one_parseable_message_each(hf_policy, records):
    convs = _conversations(records)
    calls_before = hf_policy.calls
    messages = hf_policy.act(convs)
    assert hf_policy.calls == calls_before + 1
    assert len(messages) == len(convs)
    for message in messages:
        assert message["role"] == "assistant"
        assert isinstance(message["content"], str)
        assert isinstance(message["tool_calls"], list)
        assert all(set(c) == {"name", "arguments"} for c in message["tool_calls"])


def test_hf_policy_batched_equals_one_at_a_time(hf_policy, records):
    convs = _conversations(records)
    lengths = {len(hf_policy.tokenizer(hf_policy.render(c))["input_ids"]) for c in convs}
    assert len(lengths) == len(convs), "the test needs conversations of different lengths"
    singles = [hf_policy.complete([c])[0] for c in convs]
    assert len(set(singles)) == len(convs) and all(singles), singles  # outputs depend on the prompt
    hf_policy.sort_by_length = False
    try:
        unsorted_batch = hf_policy.complete(convs)
    finally:
        hf_policy.sort_by_length = True
    assert unsorted_batch == singles
    assert hf_policy.complete(convs) == singles


def test_hf_policy_reports_a_prompt_that_outgrew_the_context(tiny_policy_dir, records):
    from evaluation.policy import HFPolicy

    policy = HFPolicy(str(tiny_policy_dir), max_new_tokens=4)
    policy.context_limit = 100  # far below the prompt (system policy + tool schemas)
    trial = run_rollouts(policy, records[:1], max_turns=3)[0]
    assert trial.ended_by == "context_full" and trial.turns == 1


def test_hf_policy_rolls_out_end_to_end(hf_policy, records):
    trials = run_rollouts(hf_policy, records[:3], k=2, seed=0, max_turns=2)
    assert len(trials) == 6
    assert all(1 <= t.turns <= 2 and not t.success for t in trials)
