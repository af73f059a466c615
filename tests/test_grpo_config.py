"""Each setting declared once: the Dagster configs come from the plain dataclasses, the curriculum
is one run-level setting, and one run config serves the demo and the end-to-end test."""

from __future__ import annotations

import dataclasses

import dagster as dg
import pytest

from assets.configs import config_from_dataclass, dataclass_kwargs
from assets.resources import Curriculum
from assets.training import SUPPLIED_BY_ASSET, GRPOTrainingConfig, PolicyConfig
from domains.retail.level1 import LEVEL1_TOOLS
from orchestration.cli.demo import demo_run_config
from orchestration.definitions import defs
from training.curriculum import MixSettings
from training.episode_update import EpisodeUpdateSettings
from training.grpo_config import GRPORunConfig
from training.sft import SFTSettings


def _defaults(source: type) -> dict:
    out = {}
    for spec in dataclasses.fields(source):
        if spec.default is not dataclasses.MISSING:
            out[spec.name] = spec.default
        elif spec.default_factory is not dataclasses.MISSING:
            out[spec.name] = spec.default_factory()
    return out


# ---------- the Dagster configs are generated from the dataclasses ----------


def test_grpo_config_fields_defaults_and_help_come_from_the_run_config_and_the_supervised_step():
    run_fields = {f.name: f for f in dataclasses.fields(GRPORunConfig)}
    step_fields = {f"episodes_{f.name}": f for f in dataclasses.fields(EpisodeUpdateSettings)}
    assert set(step_fields) == {
        "episodes_enabled",
        "episodes_steps",
        "episodes_batch_size",
        "episodes_learning_rate",
        "episodes_min_episodes",
        "episodes_relabel",
        "episodes_use_cpu",
        "episodes_source",
    }
    assert set(GRPOTrainingConfig.model_fields) == (set(run_fields) - set(SUPPLIED_BY_ASSET)) | set(step_fields)
    defaults = _defaults(GRPORunConfig) | {f"episodes_{k}": v for k, v in _defaults(EpisodeUpdateSettings).items()}
    built = GRPOTrainingConfig()
    for name, info in GRPOTrainingConfig.model_fields.items():
        assert getattr(built, name) == defaults[name], name
        assert info.description == {**run_fields, **step_fields}[name].metadata["help"], name
    # The supervised step runs every week unless a run config turns it off.
    assert built.episodes_enabled is True
    assert dataclass_kwargs(built, EpisodeUpdateSettings, prefix="episodes_") == _defaults(EpisodeUpdateSettings)


def test_policy_config_takes_the_sft_settings_with_their_defaults():
    sft = _defaults(SFTSettings)
    built = PolicyConfig()
    generated = {name[len("sft_") :] for name in PolicyConfig.model_fields if name.startswith("sft_")}
    # The tool list is the curriculum's; weighted phrases are a recipe's, for tokens it added.
    not_settings = {"tools", "weighted_phrases"}
    assert generated - {"warm_start"} == set(sft) - not_settings
    kwargs = dataclass_kwargs(built, SFTSettings, prefix="sft_")
    # The asset's one deliberate difference: the tiny base trains on relabelled copies.
    assert kwargs == {**{k: v for k, v in sft.items() if k not in not_settings}, "relabel": True}
    assert SFTSettings(tools=None, **kwargs) == SFTSettings(relabel=True)


def test_changing_a_dataclass_default_changes_the_dagster_default():
    def knobs(steps: int) -> type:
        return dataclasses.make_dataclass(
            "Knobs",
            [
                ("steps", int, dataclasses.field(default=steps, metadata={"help": "optimizer steps"})),
                ("tags", dict, dataclasses.field(default_factory=lambda: {"a": 1.0})),
                ("path", str, dataclasses.field(default="x")),
            ],
        )

    first = config_from_dataclass(knobs(20), "First", exclude=("path",))
    second = config_from_dataclass(knobs(35), "Second", exclude=("path",))
    assert (first().steps, second().steps) == (20, 35)
    assert first.model_fields["steps"].description == "optimizer steps"
    assert first().tags == {"a": 1.0} and "path" not in first.model_fields
    changed = config_from_dataclass(knobs(20), "Changed", defaults={"steps": 7})
    assert changed().steps == 7


def test_generation_refuses_names_that_are_not_fields_or_declared_twice():
    with pytest.raises(TypeError, match="not fields of GRPORunConfig"):
        config_from_dataclass(GRPORunConfig, "Bad", exclude=("max_step",))

    class Clashing(dg.Config):
        max_steps: int = 3

    with pytest.raises(TypeError, match=r"\['max_steps'\] are declared both"):
        config_from_dataclass(GRPORunConfig, "Bad", base=Clashing, exclude=SUPPLIED_BY_ASSET)


def test_dagster_values_become_the_run_config_unchanged(tmp_path):
    config = GRPOTrainingConfig(
        max_steps=3, num_generations=2, grpo_overrides={"top_p": 0.9}, reward_names=["completed"]
    )
    run = GRPORunConfig(
        model_path=str(tmp_path), output_dir=str(tmp_path / "out"), **dataclass_kwargs(config, GRPORunConfig)
    )
    assert (run.max_steps, run.num_generations, run.grpo_overrides, run.reward_names) == (
        3,
        2,
        {"top_p": 0.9},
        ["completed"],
    )
    assert run.learning_rate == _defaults(GRPORunConfig)["learning_rate"]


# ---------- the curriculum is one run-level setting ----------


def test_curriculum_level_and_tools_follow_the_mix():
    assert Curriculum().levels == _defaults(GRPORunConfig)["levels"]  # one default, the run config's
    assert Curriculum().mix_settings == MixSettings()  # the failure weighting's knobs, declared once
    assert Curriculum(floor=0.2, by_failures=False).mix_settings == MixSettings(by_failures=False, floor=0.2)
    level1 = Curriculum(levels={"1": 1.0})
    assert (level1.level, level1.tools_for("retail")) == (1, LEVEL1_TOOLS)
    mixed = Curriculum(levels={"1": 0.5, "4": 0.5})
    assert (mixed.level, mixed.tools_for("retail")) == (4, None)


def test_the_tool_list_picks_the_tools_at_every_level_and_the_form_follows_the_level():
    """'level1' keeps level 1's six tools on the recorded whole shop (an agent built on them);
    'all' offers every tool even at level 1; tool results are short below level 4 only."""
    assert Curriculum().tool_list == _defaults(GRPORunConfig)["tool_list"] == "by_level"
    whole_shop = Curriculum(levels={"4": 1.0}, tool_list="level1")
    assert (whole_shop.tools_for("retail"), whole_shop.compact_for("retail")) == (LEVEL1_TOOLS, False)
    everything = Curriculum(levels={"1": 1.0}, tool_list="all")
    assert (everything.tools_for("retail"), everything.compact_for("retail")) == (None, True)
    assert Curriculum(levels={"3": 1.0}).compact_for("retail") is True
    # The airline has no level 1, so no short list to keep: every tool, whatever the list says.
    assert Curriculum(levels={"4": 1.0}, tool_list="level1").tools_for("airline") is None


def test_an_unknown_tool_list_is_refused_by_the_curriculum_and_the_run_config(tmp_path):
    from training.grpo_config import ConfigError, validate

    with pytest.raises(ValueError, match=r"curriculum\.tool_list is refused \(unknown_tool_list\).*'some'"):
        Curriculum(tool_list="some")
    config = GRPORunConfig(model_path=str(tmp_path), output_dir=str(tmp_path / "out"), records=[], tool_list="some")
    with pytest.raises(ConfigError) as err:
        validate(config, num_processes=1)
    assert (err.value.rule, err.value.field) == ("unknown_tool_list", "tool_list")


def test_a_domain_without_level_one_starts_at_its_short_recorded_tasks():
    """The airline has no level-1 form: level 1's share goes to level 2, with every tool offered."""
    curriculum = Curriculum(levels={"1": 1.0})
    assert curriculum.levels_for("airline") == {"2": 1.0}
    assert (curriculum.level_for("airline"), curriculum.tools_for("airline")) == (2, None)
    assert curriculum.levels_for("retail") == {"1": 1.0}


@pytest.mark.parametrize(
    "levels,rule", [({"7": 1.0}, "unknown_level"), ({"1": -1.0}, "bad_level_share"), ({"1": 0.0}, "empty_level_mix")]
)
def test_an_invalid_curriculum_is_refused_with_the_rule(levels, rule):
    with pytest.raises(ValueError, match=rf"curriculum\.levels .* is refused \({rule}\)"):
        Curriculum(levels=levels)


def test_an_invalid_curriculum_fails_the_run_before_any_step(home):
    config = demo_run_config("ci")
    config["resources"]["curriculum"]["config"]["levels"] = {"7": 1.0}
    job = defs.resolve_job_def("weekly_retrain")
    result = job.execute_in_process(partition_key="2026-11-16", run_config=config, raise_on_error=False)
    assert not result.success
    assert not result.get_asset_materialization_events()
    [failure] = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    error = failure.event_specific_data.error
    assert "curriculum.levels {'7': 1.0} is refused (unknown_level)" in error.to_string()


def test_the_level_is_no_longer_a_per_asset_setting():
    job = defs.resolve_job_def("weekly_retrain")
    for op in ("policy_base", "calibration_report", "shadow_report"):
        config = demo_run_config("ci")
        config["ops"][op]["config"]["level"] = 1
        with pytest.raises(dg.DagsterInvalidConfigError, match="level"):
            dg.validate_run_config(job, config)
    config = demo_run_config("ci")
    config["ops"]["grpo_candidate"]["config"]["levels"] = {"1": 1.0}
    with pytest.raises(dg.DagsterInvalidConfigError, match="levels"):
        dg.validate_run_config(job, config)


# ---------- one run config for the demo and the end-to-end test ----------


@pytest.mark.parametrize("scale", ["demo", "ci"])
def test_demo_run_config_is_valid_for_the_job_and_sets_the_level_once(scale):
    config = demo_run_config(scale, {"shadow_margin": -1.0})
    dg.validate_run_config(defs.resolve_job_def("weekly_retrain"), config)
    assert config["resources"] == {"curriculum": {"config": {"levels": {"1": 1.0}}}}
    assert not [op for op, body in config["ops"].items() if {"level", "levels"} & set(body["config"])]
    assert config["ops"]["promotion_gate"]["config"]["shadow_margin"] == -1.0
    assert "grpo_overrides" not in config["ops"]["grpo_candidate"]["config"]  # the product's trainer, no bonus


def test_demo_run_config_refuses_an_unknown_scale():
    with pytest.raises(ValueError, match="unknown demo scale 'huge'"):
        demo_run_config("huge")
