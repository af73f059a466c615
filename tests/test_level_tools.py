"""One tool list per curriculum level, the same in SFT, GRPO and evaluation."""

from __future__ import annotations

import json
import re

import pytest

from domains.retail.level1 import LEVEL1_TOOLS
from evaluation.rollout import run_rollouts
from tests.helpers_eval import make_records
from tests.helpers_training import level1_records
from training.policies import HFPolicy, ScriptedPolicy


def test_level_one_alone_gets_its_short_list_any_other_mix_gets_every_tool():
    from training.curriculum import tools_for_levels

    assert tools_for_levels({"1": 1.0}) == LEVEL1_TOOLS == tools_for_levels([1])
    assert tools_for_levels({"1": 0.5, "2": 0.5}) is None and tools_for_levels([4]) is None
    assert tools_for_levels({"1": 1.0, "3": 0.0}) == LEVEL1_TOOLS  # a zero share is no level


def test_the_tool_list_setting_keeps_or_widens_the_list_and_refuses_an_unknown_one():
    from training.curriculum import CurriculumError, tools_for_levels

    assert (
        tools_for_levels([4], tool_list="level1")
        == LEVEL1_TOOLS
        == tools_for_levels({"2": 0.5, "1": 0.5}, "retail", "level1")
    )
    assert tools_for_levels([1], tool_list="all") is None
    with pytest.raises(CurriculumError, match=r"unknown_tool_list: tool_list 'level2' is not one of"):
        tools_for_levels([1], tool_list="level2")


def test_a_model_serves_with_the_list_a_curriculum_of_the_served_level_offers():
    """The level-1 shop gets level 1's list; the whole shop (recorded, level 4) every tool unless
    the list is 'level1', the one the shipped agent was built with."""
    from orchestration.cli.demo import serving_policy
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    def offered(**kwargs):
        return serving_policy(str(SHIPPED_AGENT_DIR), **kwargs).policy.tools

    assert offered() == LEVEL1_TOOLS == offered(level=1)
    assert offered(level=None) is None
    assert offered(level=None, tool_list="level1") == LEVEL1_TOOLS


def test_rollouts_with_a_tool_list_refuse_the_tools_left_out():
    records = make_records(2)
    calls = iter(
        [
            {"name": "list_all_product_types", "arguments": {}},
            {"name": "get_order_details", "arguments": {"order_id": "#W0"}},
        ]
        * 2
    )

    def act(conversation):
        call = next(calls, None)
        return (
            {"role": "assistant", "content": "", "tool_calls": [call]}
            if call
            else {"role": "assistant", "content": "bye"}
        )

    trials = run_rollouts(ScriptedPolicy(act), records[:1], k=1, tools=LEVEL1_TOOLS, max_turns=3)
    results = [m["content"] for m in trials[0].messages if m["role"] == "tool"]
    assert results[0] == "Error: unknown tool 'list_all_product_types'"
    assert results[1] == "Error: order not found"  # an offered tool runs as usual


def test_sft_and_hf_policy_render_the_same_short_list(world, tmp_path):
    from tests.helpers_training import tiny_spec
    from training.sandbox.environment import check_tool_names
    from training.sandbox.prompting import initial_messages
    from training.sft import sft_rows
    from training.tiny.bootstrap import build_tiny_policy

    offered = list(check_tool_names(LEVEL1_TOOLS))  # sorted, as TRL lists them
    assert offered == sorted(LEVEL1_TOOLS)
    records = level1_records(world, 4, seed=1)
    rows = sft_rows(records, tools=LEVEL1_TOOLS)
    assert rows and all([t["function"]["name"] for t in json.loads(r["tools"])] == offered for r in rows)
    base = build_tiny_policy(tmp_path / "base", records, tiny_spec())
    prompt = HFPolicy(base, tools=LEVEL1_TOOLS).render(initial_messages(records[0]))
    listed = re.findall(r'"name": "(\w+)", "description"', prompt)
    assert listed == offered
    assert len(re.findall(r'"name": "(\w+)", "description"', HFPolicy(base).render(initial_messages(records[0])))) > 6


def test_prompts_list_tools_in_the_order_trl_gives_its_rollouts():
    # GRPOTrainer renders an environment's tools in inspect.getmembers order; SFT and evaluation
    # render tool_schemas(). A tiny policy is thrown by any difference, so the two must agree.
    import inspect

    from tests.helpers_retail import retail_environment_class as environment_class
    from training.sandbox.prompting import tool_schemas

    for tools in (None, LEVEL1_TOOLS):
        env = environment_class(tools)
        trl_order = [
            n
            for n, _ in inspect.getmembers(env, predicate=inspect.isfunction)
            if not n.startswith("_") and n not in ("reset", "get_reward")
        ]
        assert [s["function"]["name"] for s in tool_schemas(tools)] == trl_order
