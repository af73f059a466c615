"""GRPO learns from the reward, through the product's trainer with its settings (no entropy bonus).

The decision: on its first turn the policy hands the customer to a human or starts on the task.
The base is the shipped agent after a short SFT on a log in which half the conversations hand
over at once, so sampled at the trainer's temperature it hands over about half the time, whatever
happens later in the conversation. The product's `escalated_unnecessary` term (weight -1) prefers
starting on the task. A few GRPO steps (`training.grpo.run`, `GRPORunConfig`'s defaults for loss,
beta, learning rate and temperature) must lower the sampled hand-over share beyond noise. The same
run with that term weighted 0 (a constant reward) must not: so the test fails if the advantage, the
reward's wiring into the trainer, or a reward-free term (an entropy bonus) is what moves the policy.

Statistics: each share is measured on the same held-out customers and simulator seeds, several
sampled trials per customer; one-sided two-proportion z-test, trials treated as independent.
"""

from __future__ import annotations

import math

import pytest

pytestmark = pytest.mark.slow

STEPS = 6
SFT_STEPS = 40
SAMPLES_PER_CUSTOMER = 4
Z_LEARNED = 2.33  # one-sided p < 0.01
Z_NO_CHANGE = 1.645  # a drop beyond one-sided p < 0.05 with a constant reward is a wiring fault


def _z_drop(before: list[bool], after: list[bool]) -> float:
    """z of the drop in share from `before` to `after` (positive: fewer after)."""
    n1, n2 = len(before), len(after)
    p1, p2 = sum(before) / n1, sum(after) / n2
    pooled = (sum(before) + sum(after)) / (n1 + n2)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n1 + 1 / n2))
    return (p1 - p2) / se if se else 0.0


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
    """The shipped agent after SFT on a log in which every other conversation hands over at once."""
    from domains.retail.level1 import level1_demonstration
    from domains.retail.tiny_agent import level1_tools
    from training.sft import SFTSettings, warm_start
    from training.tiny.manifest import shipped_agent_path

    train, _ = tasks
    log = [_hands_over_at_once(t) if i % 2 else level1_demonstration(t) for i, t in enumerate(train)]
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


def _handed_over(model_path, held) -> list[bool]:
    from domains.retail.tiny_agent import level1_tools
    from evaluation.rollout import run_rollouts
    from training.policies import HFPolicy

    tools = level1_tools()
    policy = HFPolicy(str(model_path), max_new_tokens=128, temperature=1.0, seed=11, tools=tools)
    trials = run_rollouts(policy, held, k=SAMPLES_PER_CUSTOMER, seed=5, max_turns=6, compact=True, tools=tools)
    return [t.episode.transferred for t in trials]


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
        summary = run(config, JsonLinesReporter(log))
    return summary["model_path"]


def test_grpo_lowers_the_rewarded_against_decision_and_a_constant_reward_does_not(tasks, undecided, tmp_path):
    from training.rewards import RewardWeights

    train, held = tasks
    base = undecided
    assert RewardWeights().escalated_unnecessary == -1.0  # the product's weight is what is tested
    before = _handed_over(base, held)
    share = sum(before) / len(before)
    assert 0.15 <= share <= 0.85, f"the base hands over in {share:.2f} of sampled trials: not a live decision"

    learned = _handed_over(_grpo(base, train, tmp_path / "rewarded", RewardWeights().escalated_unnecessary), held)
    constant = _handed_over(_grpo(base, train, tmp_path / "constant", 0.0), held)

    z_learned, z_constant = _z_drop(before, learned), _z_drop(before, constant)
    shares = {
        name: round(sum(v) / len(v), 3)
        for name, v in {"before": before, "learned": learned, "constant": constant}.items()
    }
    print(f"hand-over shares {shares} z_learned={z_learned:.2f} z_constant={z_constant:.2f}")  # shown with -s
    assert z_learned > Z_LEARNED, f"hand-over share did not fall beyond noise: {shares}, z={z_learned:.2f}"
    assert z_constant < Z_NO_CHANGE, f"a constant reward moved the decision: {shares}, z={z_constant:.2f}"
