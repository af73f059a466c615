"""GRPO learns from the reward, through the product's trainer with its settings (no entropy bonus).

The decision: on its first turn the policy hands the customer to a human or starts on the task.
The base is the shipped agent after a short SFT on a log in which nine conversations in twenty
hand over at once, so sampled at the trainer's temperature it hands over some of the time, whatever
happens later in the conversation. The product's `escalated_unnecessary` term (weight -1) prefers
starting on the task. A few GRPO steps (`training.grpo.run`, `GRPORunConfig`'s defaults for loss,
beta, learning rate and temperature) must lower the sampled hand-over share beyond noise.

The control is the same run with the term's sign flipped (+1: a hand-over is rewarded), which must
raise the share beyond noise. A control with the weight at 0 would pass by construction (every
group scores alike, so the advantage and the gradient are zero); the flipped one cannot: if the
advantage, the reward's wiring into the trainer, or a reward-free force (an entropy bonus, the
loss's own drift) were what moved the policy, the two runs would not move it in opposite
directions. Neither run may buy its move by no longer acting. For the rewarded run that means its
verified success must not fall beyond noise. Its share of trials with a working tool call may fall:
both runs train on this term alone, under which a trial that does nothing scores like a success,
and the hand-overs it removes were working calls themselves (measured 2026-12-02: 0.60 -> 0.456,
while success went 0.181 -> 0.200). For the flipped run, whose success falls by design (a
hand-over never verifies), it means its share of trials with a working tool call must not fall.

Statistics: every share is measured on the same held-out customers, simulator seeds and sampling
seed, several sampled trials per customer, so each run's trials pair up with the base's. A
customer's trials are not independent, so the change is judged by the customer-clustered paired
bootstrap (`evaluation.stats.cluster_bootstrap_ci`): its 98% interval (one-sided 99% per bound).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

STEPS = 6
SFT_STEPS = 40
SAMPLES_PER_CUSTOMER = 4
CONFIDENCE = 0.98  # each bound one-sided at p < 0.01


def _change(before: list, after: list, flag) -> tuple[float, float, float]:
    """(share before, share after, (low, high) of the clustered CI of after - before) for `flag`."""
    from evaluation.stats import cluster_bootstrap_ci

    assert [t.key for t in before] == [t.key for t in after], "runs measured on different trials"
    a, b = [flag(t) for t in after], [flag(t) for t in before]
    ci = cluster_bootstrap_ci(a, b, [t.cluster for t in before], n_resamples=4000, confidence=CONFIDENCE, seed=0)
    return round(sum(b) / len(b), 3), round(sum(a) / len(a), 3), (round(ci.low, 3), round(ci.high, 3))


def _handed_over(trial) -> bool:
    return trial.episode.transferred


def _acted(trial) -> bool:
    """At least one tool call that worked (a hand-over counts): the policy is still acting."""
    return trial.tool_calls > trial.tool_errors


def _succeeded(trial) -> bool:
    return trial.success


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    from domains.retail.tiny_agent import AgentRecipe, level1_tasks

    # The shipped recipe's world, with less traffic: enough customers on both sides of the split.
    recipe = AgentRecipe(traffic=2000, train_tasks=64, held_out_tasks=40)
    return level1_tasks(tmp_path_factory.mktemp("tasks"), recipe)


def _hands_over_at_once(task: dict) -> dict:
    call = {"name": "transfer_to_human_agents", "arguments": {"summary": "The customer needs a human agent."}}
    return {
        **task,
        "messages": list(task["messages"])
        + [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": call["name"], "content": ""},
        ],
    }


@pytest.fixture(scope="module")
def undecided(tasks, tmp_path_factory):
    """The shipped agent after SFT on a log in which nine conversations in twenty hand over at once.

    The base's sampled hand-over share is steep in the log's share, and it depends on the shipped
    agent. On S6's agent (2026-12-03): a third 0.05, two fifths 0.281, a half 0.544. At a half the
    flipped run had too little room to rise beyond noise in 6 steps (0.544 -> 0.631, CI [-0.033,
    +0.200]); at two fifths both runs moved beyond noise (rewarded 0.281 -> 0.006, flipped 0.281 ->
    0.644). S7's agent, which chooses its tools more firmly, gave 0.14 at two fifths (under the
    test's 0.15), 0.319 at nine twentieths and 0.381 at a half (2026-12-04)."""
    from domains.retail.level1 import level1_demonstration
    from domains.retail.tiny_agent import level1_tools
    from training.sft import SFTSettings, warm_start
    from training.tiny.manifest import shipped_agent_path

    train, _ = tasks
    log = [_hands_over_at_once(t) if i % 20 < 9 else level1_demonstration(t) for i, t in enumerate(train)]
    out = tmp_path_factory.mktemp("undecided") / "base"
    settings = SFTSettings(
        steps=SFT_STEPS,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        tools=level1_tools(),
        verified_only=False,
        relabel=True,
        torch_threads=2,
    )
    warm_start(shipped_agent_path(), log, out, settings)
    return out


def _sampled(model_path, held) -> list:
    """The model's trials on the held-out customers, sampled at the trainer's temperature."""
    from domains.retail.tiny_agent import level1_tools
    from evaluation.rollout import run_rollouts
    from training.policies import HFPolicy

    tools = level1_tools()
    policy = HFPolicy(str(model_path), max_new_tokens=128, temperature=1.0, seed=11, tools=tools)
    trials = run_rollouts(policy, held, k=SAMPLES_PER_CUSTOMER, seed=5, max_turns=6, compact=True, tools=tools)
    # The evaluator contains a trial that raises; here one would hide a fault, so none may.
    assert not any(t.errored for t in trials), [t.error for t in trials if t.errored][:3]
    return trials


def _grpo(model_path, train, out, weight: float) -> str:
    from training.grpo import run
    from training.grpo_config import GRPORunConfig
    from training.reporting import JsonLinesReporter

    config = GRPORunConfig(
        model_path=str(model_path),
        output_dir=str(out),
        records=train,
        reward_names=["escalated_unnecessary"],
        reward_weights={"escalated_unnecessary": weight},
        max_steps=STEPS,
        num_generations=8,
        per_device_train_batch_size=32,
        max_completion_length=448,
        max_tool_calling_iterations=6,
        save_steps=STEPS,
        torch_threads=2,
    )
    assert config.beta == 0.0 and "entropy_coef" not in config.grpo_overrides
    with open(out.parent / f"{out.name}.jsonl", "w") as log:
        result = run(config, JsonLinesReporter(log))
    return result.model_path


def test_grpo_moves_the_decision_the_way_the_reward_points_and_back_when_its_sign_flips(tasks, undecided, tmp_path):
    from training.rewards import RewardWeights

    train, held = tasks
    base = undecided
    weight = RewardWeights().escalated_unnecessary
    assert weight == -1.0  # the product's weight is what is tested
    before = _sampled(base, held)
    share = sum(map(_handed_over, before)) / len(before)
    assert 0.15 <= share <= 0.85, f"the base hands over in {share:.2f} of sampled trials: not a live decision"

    rewarded = _sampled(_grpo(base, train, tmp_path / "rewarded", weight), held)
    flipped = _sampled(_grpo(base, train, tmp_path / "flipped", -weight), held)

    moves = {
        f"{run} {name}": _change(before, after, flag)
        for run, after in (("rewarded", rewarded), ("flipped", flipped))
        for name, flag in (("hand_over", _handed_over), ("acted", _acted), ("success", _succeeded))
    }
    print(f"(before, after, {CONFIDENCE:.0%} clustered CI of after - before): {moves}")  # shown with -s
    assert moves["rewarded hand_over"][2][1] < 0, f"the rewarded run did not lower the hand-over share: {moves}"
    assert moves["flipped hand_over"][2][0] > 0, f"the flipped reward did not raise the hand-over share: {moves}"
    assert moves["rewarded success"][2][1] >= 0, f"the rewarded run lost verified success beyond noise: {moves}"
    assert moves["flipped acted"][2][1] >= 0, f"the flipped run stopped acting beyond noise: {moves}"
