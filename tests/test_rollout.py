"""Rollouts: scripted characters behave as they should, seeds pair trials, turns are batched."""

from __future__ import annotations

import json

import pytest

from domains.retail.traffic.agents import run_policy
from domains.retail.traffic.scenarios import sample_scenarios
from domains.retail.traffic.worldgen import generate_world
from evaluation.failure_modes import primary_failure_mode
from evaluation.metrics import paired_outcomes, success_rate
from evaluation.rollout import record_id_of, run_rollouts
from evaluation.stats import mcnemar_exact
from tests.helpers_eval import (
    RecordingPolicy,
    escalator_policy,
    expert_policy,
    expert_steps,
    make_records,
    random_policy,
)
from training.curriculum import task_row
from training.policies import HFPolicy, ScriptedPolicy, ScriptError, assistant_turns
from training.rewards import verified_success
from training.sandbox.rollout import Conversation, RolloutError, roll_out, start_conversation, trial_seed


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
    openings = {
        seed: [t.messages[1]["content"] for t in run_rollouts(escalator_policy(), records, seed=seed)]
        for seed in (0, 1)
    }
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
    steps = [
        [{"name": "think", "arguments": {"thought": "a"}}, {"name": "calculate", "arguments": {"expression": "2 + 3"}}]
    ]
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
    as_text = [
        {
            **r,
            "initial_state": json.dumps(r["initial_state"]),
            "gold": json.dumps(r["gold"]),
            "user_scenario": json.dumps(r["user_scenario"]),
        }
        for r in records[:4]
    ]
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
    # A set that cannot be paired (no id, one id twice) is refused as a whole.
    with pytest.raises(RolloutError, match="missing_record_id"):
        record_id_of({"intent": "other"})
    with pytest.raises(RolloutError, match="duplicate_record_id"):
        run_rollouts(escalator_policy(), [records[0], records[0]])
    # A record that cannot start a conversation fails its own trials only.
    broken, fine = run_rollouts(escalator_policy(), [{**records[0], "initial_state": None}, records[1]])
    assert broken.ended_by == "error" and not broken.success and broken.error_class == "RolloutError"
    assert broken.error.startswith("RolloutError: missing_initial_state")
    assert fine.error is None and fine.ended_by == "done"


def test_trial_seed_is_pinned_and_seeds_training_rows_too(records):
    # One seed function for evaluation trials and curriculum rows: (seed, record id, trial) only.
    assert trial_seed(0, "r1", 0) == 1488549645
    assert trial_seed(7, "ev-0-3", 2) == 862536164
    row = task_row(records[3], level=4, seed=7, repeat=2)
    assert row["seed"] == trial_seed(7, records[3]["interaction_id"], 2)


def test_a_tool_call_that_is_not_an_object_is_a_policy_error_naming_the_record(records):
    class Scrawler:
        name = "scrawler"

        def act(self, conversations):
            return [{"role": "assistant", "content": "", "tool_calls": ["cancel everything"]} for _ in conversations]

    (trial,) = run_rollouts(Scrawler(), records[:1])
    assert trial.ended_by == "error" and not trial.success
    assert trial.error.startswith("RolloutError: bad_policy_message")
    assert f"(record {records[0]['interaction_id']})" in trial.error
    # The traffic loop, which does not contain, still raises it.
    conversation = start_conversation(records[0], 0, task_id=records[0]["interaction_id"])
    with pytest.raises(RolloutError, match="bad_policy_message") as err:
        roll_out(Scrawler(), [conversation])
    assert err.value.record_id == records[0]["interaction_id"]


def test_a_bare_transcript_has_no_episode():
    with pytest.raises(RolloutError, match="no_environment"):
        _ = Conversation([{"role": "user", "content": "hi"}], task_id="t").episode


def test_traffic_and_evaluation_run_one_loop():
    """A policy serving traffic and the same policy evaluated on the same scenario and seed write
    the same transcript, turn for turn, and end the same way."""
    world = generate_world(n_users=40, seed=0)
    for index, scenario in enumerate(sample_scenarios(world, 8, seed=1)):
        record = {
            "interaction_id": f"scenario-{index}",
            "intent": scenario.intent,
            "initial_state": scenario.initial_state,
            "user_scenario": scenario.user_scenario,
            "gold": scenario.gold,
            "escalation_was_necessary": scenario.escalation_was_necessary,
        }
        steps = expert_steps(record)
        policy = ScriptedPolicy(
            lambda conv, steps=steps: steps[assistant_turns(conv)] if assistant_turns(conv) < len(steps) else "Goodbye."
        )
        trial = run_rollouts(policy, [record], seed=0)[0]
        traffic = run_policy(policy, scenario, seed=trial.seed)
        assert trial.success and verified_success(traffic.episode)
        assert traffic.messages == trial.messages
        assert (traffic.turns, traffic.tool_calls, traffic.tool_errors, traffic.ended_by) == (
            trial.turns,
            trial.tool_calls,
            trial.tool_errors,
            trial.ended_by,
        )


def test_table_policy_without_a_script_for_the_task_says_so(records):
    policy = ScriptedPolicy.from_table({"other-task": []}, name="narrow")
    with pytest.raises(ScriptError, match="no script for task"):
        policy.act([Conversation([], task_id=records[0]["interaction_id"])])


# ---- a transformers policy: a tiny randomly initialised Qwen2 with a locally trained tokenizer ----


@pytest.fixture(scope="module")
def tiny_policy_dir(tmp_path_factory, records):
    from training.tiny.bootstrap import TinyModelSpec, build_tiny_policy

    spec = TinyModelSpec(
        vocab_size=3000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=8192,
    )
    return build_tiny_policy(tmp_path_factory.mktemp("tiny"), records, spec)


@pytest.fixture(scope="module")
def hf_policy(tiny_policy_dir):
    import torch

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
    from training.sandbox.prompting import initial_messages

    convs = [initial_messages(r, seed=i) for i, r in enumerate(records[:4])]
    # Different lengths, so that the batch really is left-padded.
    convs[1] = convs[1] + [
        {"role": "assistant", "content": "", "tool_calls": [{"name": "think", "arguments": {"thought": "x"}}]},
        {"role": "tool", "name": "think", "content": "a longer tool result " * 12},
    ]
    convs[2] = convs[2] + [
        {"role": "assistant", "content": "Could you give me your email?", "tool_calls": []},
        {"role": "user", "content": "It is a@b.c"},
    ]
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
    policy = HFPolicy(str(tiny_policy_dir), max_new_tokens=4)
    policy.context_limit = 100  # far below the prompt (system policy + tool schemas)
    trial = run_rollouts(policy, records[:1], max_turns=3)[0]
    assert trial.ended_by == "context_full" and trial.turns == 1


def test_hf_policy_rolls_out_end_to_end(hf_policy, records):
    trials = run_rollouts(hf_policy, records[:3], k=2, seed=0, max_turns=2)
    assert len(trials) == 6
    assert all(1 <= t.turns <= 2 and not t.success for t in trials)


# ---- continuous batching and the prefix cache: faster, never different ----


def test_max_live_keeps_at_most_that_many_in_flight_and_changes_no_transcript(records):
    unlimited = run_rollouts(expert_policy(records), records, k=2, seed=0)
    policy = RecordingPolicy(expert_policy(records))
    capped = run_rollouts(policy, records, k=2, seed=0, max_live=5)
    assert max(policy.batch_sizes) == 5 and policy.batch_sizes[0] == 5
    assert sum(policy.batch_sizes) == sum(t.turns for t in capped)
    assert [(t.key, t.success, t.messages) for t in capped] == [(t.key, t.success, t.messages) for t in unlimited]
    # A finished conversation makes room at once: the batch stays full while any is waiting.
    started: set[tuple[str, int]] = set()
    for batch in policy.batches:
        started |= set(batch)
        assert len(batch) == 5 or len(started) == 2 * len(records)
    with pytest.raises(ValueError, match="max_live"):
        run_rollouts(expert_policy(records), records[:1], max_live=0)


def test_a_policy_can_ask_for_its_own_max_live(records):
    policy = RecordingPolicy(expert_policy(records))
    policy.max_live = 3
    run_rollouts(policy, records[:7], k=1, seed=0)
    assert max(policy.batch_sizes) == 3


class _TeacherForced:
    """The model generates every turn (recorded), the expert's message moves the conversation on:
    multi-turn transcripts with tool results, whatever a tiny model would have said."""

    def __init__(self, model, teacher):
        self.model, self.teacher, self.name = model, teacher, "teacher-forced"
        self.max_live = getattr(model, "max_live", None)
        self.generated: dict[tuple[str, int], list[str | None]] = {}

    def act(self, conversations):
        self.last_batch = len(conversations)
        for conversation, text in zip(conversations, self.model.complete(conversations)):
            self.generated.setdefault((conversation.task_id, conversation.trial), []).append(text)
        return self.teacher.act(conversations)


def _reference_completion(policy, conversation) -> str:
    """What the implementation before the prefix cache produced: `generate` on the whole,
    unpadded prompt, nothing cached (its batched output was tested equal to exactly this)."""
    import torch

    ids = policy.tokenizer(policy.render(conversation), add_special_tokens=False)["input_ids"]
    with torch.inference_mode():
        out = policy.model.generate(
            input_ids=torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=policy.max_new_tokens,
            pad_token_id=policy.tokenizer.pad_token_id,
            do_sample=False,
            temperature=None,
            top_p=None,
            top_k=None,
        )
    return policy._decode(out[0, len(ids) :].tolist())


def test_cached_batched_multi_turn_generation_equals_uncached_one_at_a_time(hf_policy, records):
    tasks = records[:4]
    batched = _TeacherForced(hf_policy, expert_policy(records))
    batched_trials = run_rollouts(batched, tasks, k=1, seed=0)
    single = _TeacherForced(hf_policy, expert_policy(records))
    single_trials = [t for r in tasks for t in run_rollouts(single, [r], k=1, seed=0)]
    assert [t.messages for t in batched_trials] == [t.messages for t in single_trials]
    assert batched.generated == single.generated
    assert sum(len(v) for v in batched.generated.values()) == sum(t.turns for t in batched_trials) > len(tasks)
    texts = [text for v in batched.generated.values() for text in v]
    assert len(set(texts)) > len(texts) // 2, "outputs must depend on the prompt for this test to mean anything"
    # ... and equal to the uncached, unpadded generation on every turn's whole prompt.
    for trial in batched_trials:
        prompts = [trial.messages[:i] for i, m in enumerate(trial.messages) if m["role"] == "assistant"]
        expected = [_reference_completion(hf_policy, p) for p in prompts]
        assert batched.generated[trial.key] == expected, trial.key


def test_prefix_cache_prefills_only_new_tokens_and_forgets_ended_conversations(hf_policy, records):
    tasks = records[:4]
    teacher = _TeacherForced(hf_policy, expert_policy(records))
    before = hf_policy.prefilled_tokens
    trials = run_rollouts(teacher, tasks, k=1, seed=0)
    prefilled = hf_policy.prefilled_tokens - before
    prompts = [
        len(hf_policy.tokenizer(hf_policy.render(t.messages[:i]))["input_ids"])
        for t in trials
        for i, m in enumerate(t.messages)
        if m["role"] == "assistant"
    ]
    assert prefilled < 0.6 * sum(prompts), (prefilled, sum(prompts))
    assert len(hf_policy.cache) == teacher.last_batch  # the conversations of the last call only
    hf_policy.complete([Conversation(trials[0].messages[:2], task_id="fresh")])
    assert len(hf_policy.cache) == 1


def test_prefix_cache_never_reuses_a_stale_prefix(hf_policy, records):
    from training.sandbox.prompting import initial_messages

    conversation = Conversation(initial_messages(records[0], seed=0), task_id="t")
    first = hf_policy.complete([conversation])[0]
    # The same conversation object, edited before its last turn: the cached tokens no longer match.
    conversation[1] = {"role": "user", "content": "Something else entirely, about a refund."}
    edited = hf_policy.complete([conversation])[0]
    assert edited == _reference_completion(hf_policy, conversation)
    assert first == _reference_completion(hf_policy, Conversation(initial_messages(records[0], seed=0)))


def test_prefix_cache_off_or_full_gives_the_same_outputs(tiny_policy_dir, hf_policy, records):
    convs = _conversations(records)
    expected = hf_policy.complete(convs)
    for options in ({"prefix_cache": False}, {"cache_bytes": 0}):
        other = HFPolicy(hf_policy.model, hf_policy.tokenizer, max_new_tokens=hf_policy.max_new_tokens, **options)
        assert other.complete(convs) == expected
        assert other.complete(convs) == expected
        assert len(other.cache) == 0


def test_sampling_is_reproducible_from_the_seed(hf_policy, records):
    convs = _conversations(records)

    def sample(seed):
        policy = HFPolicy(hf_policy.model, hf_policy.tokenizer, max_new_tokens=8, temperature=1.0, seed=seed)
        return [policy.complete(convs), policy.complete(convs)]

    assert sample(3) == sample(3)
    assert sample(3) != sample(4)
