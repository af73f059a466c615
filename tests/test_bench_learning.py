"""bench/learning.py's own arithmetic and settings: customers pair up over their trials, and only
the flags given replace a product default (the reward stays the product's unless repriced)."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest

from bench.learning import BenchError, grpo_config, manifest_tasks, paired_difference, parse_args, reward_label
from domains.retail.tiny_agent import AgentRecipe
from training.grpo_config import GRPORunConfig


def _figures(successes: list[int], k: int = 2) -> dict:
    return {"successes": successes, "k": k}


def test_the_difference_is_paired_by_customer_over_its_trials():
    # Three customers, two trials each, in run_rollouts' (record, trial) order.
    before = _figures([1, 0, 0, 0, 1, 1])  # per customer 0.5, 0.0, 1.0
    after = _figures([1, 1, 0, 0, 1, 0])  # per customer 1.0, 0.0, 0.5
    mean, half = paired_difference(before, after)
    diffs = [0.5, 0.0, -0.5]
    sd = math.sqrt(sum(d * d for d in diffs) / (len(diffs) - 1))
    assert mean == 0.0
    assert half == pytest.approx(1.96 * sd / math.sqrt(3))
    # The same trial flags paired per trial instead of per customer would give another width.
    assert half != pytest.approx(1.96 * math.sqrt(0.4 / 6))


def test_measurements_of_different_customers_do_not_pair():
    with pytest.raises(ValueError):
        paired_difference(_figures([1, 0, 0, 0]), _figures([1, 0, 0, 0, 1, 1]))


def test_no_flag_keeps_every_product_default(tmp_path):
    config = grpo_config(parse_args([]), tmp_path, tmp_path / "model", [{"id": 1}])
    defaults = GRPORunConfig(model_path="m", output_dir="o")
    for spec in fields(GRPORunConfig):
        if spec.name not in ("model_path", "output_dir", "records", "torch_threads"):
            assert getattr(config, spec.name) == getattr(defaults, spec.name), spec.name
    assert config.reward_names is None and config.reward_weights == {} and config.grpo_overrides == {}
    assert reward_label(config.reward_weights) == "default"


def test_flags_replace_only_their_own_settings(tmp_path):
    args = parse_args(["--lr", "1e-5", "--generations", "8", "--batch", "32", "--steps", "12"])
    config = grpo_config(args, tmp_path, tmp_path / "model", [])
    assert (config.learning_rate, config.num_generations, config.per_device_train_batch_size) == (1e-5, 8, 32)
    assert config.max_steps == 12 and config.temperature == GRPORunConfig.temperature


def test_a_repriced_reward_is_named_on_the_last_line(tmp_path):
    args = parse_args(["--reward-weights", '{"escalated_unnecessary": -5.0}'])
    config = grpo_config(args, tmp_path, tmp_path / "model", [])
    assert reward_label(config.reward_weights) == '{"escalated_unnecessary":-5.0}'


def test_reward_weights_must_be_an_object(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--reward-weights", "[1]"])
    assert "'[1]' is not a JSON object" in capsys.readouterr().err


def test_a_manifest_of_another_recipe_is_refused_naming_the_setting(tmp_path):
    recorded = {**AgentRecipe().as_dict(), "world_seed": 4}
    with pytest.raises(BenchError, match=r"\['world_seed'\]"):
        manifest_tasks({"recipe": recorded}, None, 100, tmp_path)
