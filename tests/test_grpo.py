"""Curriculum, run-config validation, and a few real GRPO steps on the tiny model."""

from __future__ import annotations

import json
import math

import pytest

from tests.helpers_training import level1_records, tiny_spec, write_jsonl

# ---------- curriculum ----------


def test_level_one_is_the_self_contained_short_tasks(world):
    from training.curriculum import level_of

    records = level1_records(world, 20, seed=0)
    assert {level_of(r) for r in records} == {1}
    vague = dict(records[0], messages=[{"role": "user", "content": "help me with my order please"}])
    assert level_of(vague) == 2
    angry = dict(records[0], user_scenario={**records[0]["user_scenario"], "persona": "angry"})
    assert level_of(angry) == 3


def test_build_dataset_columns_mix_and_determinism(world):
    from training.curriculum import build_dataset

    records = level1_records(world, 30, seed=0)
    long_task = dict(
        records[0],
        interaction_id="long",
        intent="return_items",
        gold={"actions": [{"name": "think", "arguments": {"thought": str(i)}} for i in range(9)], "outputs": []},
    )
    no_gold = dict(records[1], interaction_id="nogold", gold=None)
    data, report = build_dataset(records + [long_task, no_gold], {"1": 0.75, "4": 0.25}, seed=3, size=40)
    assert len(data) == 40
    assert report.rows_per_level == {1: 30, 4: 10}
    assert "nogold" not in set(data["interaction_id"])
    row = data[0]
    assert row["prompt"][0]["role"] == "system" and row["prompt"][1]["role"] == "user"
    for key in ("initial_state", "user_scenario", "gold"):
        assert isinstance(json.loads(row[key]), dict)
    assert all(c == (lvl < 4) for c, lvl in zip(data["compact"], data["level"]))
    again, _ = build_dataset(records + [long_task, no_gold], {"1": 0.75, "4": 0.25}, seed=3, size=40)
    assert again["seed"] == data["seed"] and again["interaction_id"] == data["interaction_id"]


@pytest.mark.parametrize(
    "mix,rule",
    [
        ({"7": 1.0}, "unknown_level"),
        ({"1": -1}, "bad_level_share"),
        ({"1": 0}, "empty_level_mix"),
    ],
)
def test_bad_level_mix(world, mix, rule):
    from training.curriculum import CurriculumError, build_dataset

    with pytest.raises(CurriculumError) as err:
        build_dataset(level1_records(world, 5), mix)
    assert err.value.rule == rule


def test_the_adversarial_level_is_generated_when_no_customer_was_adversarial(world):
    from training.curriculum import ADVERSARIAL_PERSONAS, CurriculumError, select_rows

    records = level1_records(world, 6)
    assert not {json.loads(json.dumps(r["user_scenario"])).get("persona") for r in records} & ADVERSARIAL_PERSONAS
    rows, report = select_rows(records, {"3": 1.0}, seed=0, size=12)
    assert len(rows) == 12 and report.generated_per_level == {3: 6}
    personas = [json.loads(row["user_scenario"])["persona"] for row in rows]
    assert set(personas) <= ADVERSARIAL_PERSONAS - {"adversarial"}
    assert all(row["inject_tool_errors"] and row["level"] == 3 for row in rows)
    by_id = {r["interaction_id"]: r for r in records}
    assert all(json.loads(row["gold"]) == by_id[row["interaction_id"]]["gold"] for row in rows)  # same task
    again, _ = select_rows(records, {"3": 1.0}, seed=5, size=12)  # the persona is the record's, not the seed's
    assert {r["interaction_id"]: r["user_scenario"] for r in again} == {
        r["interaction_id"]: r["user_scenario"] for r in rows
    }
    # With no short verified task to harden, the level is still empty, and says so.
    with pytest.raises(CurriculumError) as err:
        select_rows([], {"3": 1.0}, size=4)
    assert err.value.rule == "empty_level"


# ---------- config validation ----------


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory, world):
    from training.tiny.bootstrap import build_tiny_policy

    return build_tiny_policy(tmp_path_factory.mktemp("m") / "base", level1_records(world, 40, seed=1), tiny_spec())


def _config(tmp_path, base, **overrides):
    from training.grpo_config import GRPORunConfig

    records = tmp_path / "records.jsonl"
    if not records.exists():
        write_jsonl([], records)
    raw = {"model_path": str(base), "output_dir": str(tmp_path / "out"), "records_path": str(records)}
    raw.update(overrides)
    return GRPORunConfig.from_dict(raw)


@pytest.mark.parametrize(
    "overrides,rule",
    [
        ({"num_generations": 3, "per_device_train_batch_size": 4}, "generations_do_not_divide_batch"),
        ({"reward_names": ["completed", "vibes"]}, "unknown_reward_name"),
        ({"reward_weights": {"vibes": 1.0}}, "unknown_reward_term"),
        ({"model_path": "/nonexistent/model"}, "missing_model"),
        ({"max_completion_length": 5000}, "completion_beyond_context"),
        ({"levels": {"9": 1.0}}, "bad_level_mix"),
        ({"num_generations": 1, "per_device_train_batch_size": 1}, "too_few_generations"),
        ({"profile": "tpu"}, "unknown_profile"),
        ({"mlflow_run_id": "abc"}, "incomplete_mlflow"),
    ],
)
def test_validate_rejects_before_compute(tmp_path, tiny_base, overrides, rule):
    from training.grpo_config import ConfigError, validate

    with pytest.raises(ConfigError) as err:
        validate(_config(tmp_path, tiny_base, **overrides), num_processes=1)
    assert err.value.rule == rule
    assert err.value.field in str(err.value)


def test_unknown_field_names_the_grpo_overrides_escape_hatch(tmp_path, tiny_base):
    from training.grpo_config import ConfigError

    with pytest.raises(ConfigError, match="grpo_overrides"):
        _config(tmp_path, tiny_base, top_p=0.9)


def test_mapping_onto_trl_and_overrides_win(tmp_path, tiny_base):
    from training.grpo_config import to_grpo_config, validate

    config = _config(
        tmp_path,
        tiny_base,
        num_generations=2,
        per_device_train_batch_size=4,
        grpo_overrides={"top_p": 0.9, "temperature": 0.7},
    )
    validate(config, num_processes=1)
    args = to_grpo_config(config)
    assert (args.num_generations, args.top_p, args.temperature) == (2, 0.9, 0.7)
    assert args.max_tool_calling_iterations == config.max_tool_calling_iterations
    assert args.use_cpu and args.save_steps == config.save_steps


def test_trl_settings_pass_onto_grpo_config_under_their_own_names(tmp_path, tiny_base):
    from dataclasses import fields

    from trl import GRPOConfig

    from training.grpo_config import to_grpo_config, trl_settings

    config = _config(
        tmp_path,
        tiny_base,
        gradient_accumulation_steps=2,
        save_total_limit=3,
        logging_steps=2,
        loss_type="grpo",
        beta=0.01,
    )
    settings = trl_settings(config)
    assert set(settings) <= {f.name for f in fields(GRPOConfig)}  # a renamed TRL field fails here
    assert {"max_steps", "learning_rate", "gradient_accumulation_steps", "save_total_limit", "loss_type"} <= set(
        settings
    )
    assert "profile" not in settings and "levels" not in settings  # ours, not TRL's
    args = to_grpo_config(config)
    assert {name: getattr(args, name) for name in settings} == settings


def test_entry_point_exits_nonzero_with_a_clear_message(tmp_path, tiny_base):
    import subprocess
    import sys

    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "model_path": str(tiny_base),
                "output_dir": str(tmp_path / "o"),
                "records_path": str(tmp_path / "r.jsonl"),
                "num_generations": 3,
            }
        )
    )
    (tmp_path / "r.jsonl").write_text("")
    proc = subprocess.run(
        [sys.executable, "-m", "training.grpo", "--config", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 2
    assert "generations_do_not_divide_batch" in proc.stderr
    assert not (tmp_path / "o" / "result.json").exists()


# ---------- a few real GRPO steps ----------


@pytest.mark.slow
def test_grpo_steps_change_every_parameter_and_log_to_mlflow(tmp_path, tiny_base, world):
    """Three real GRPO steps in the environment move every weight and land every metric in MLflow.

    A fresh tiny policy fails every rollout the same way, so its group advantages are all zero
    and the policy-gradient term alone would not move anything; TRL's entropy bonus
    (`entropy_coef`, passed through `grpo_overrides`) gives the same backward path a gradient.
    """
    import io

    import torch
    from mlflow.tracking import MlflowClient
    from safetensors.torch import load_file

    from training.grpo import run
    from training.grpo_config import GRPORunConfig
    from training.reporting import JsonLinesReporter

    model_path, records = tiny_base, level1_records(world, 24, seed=6)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.create_experiment("grpo-test", artifact_location=(tmp_path / "artifacts").as_uri())
    run_id = client.create_run(experiment).info.run_id
    config = GRPORunConfig(
        model_path=str(model_path),
        output_dir=str(tmp_path / "out"),
        records=records,
        max_steps=3,
        num_generations=4,
        per_device_train_batch_size=4,
        max_completion_length=160,
        learning_rate=1e-3,
        max_tool_calling_iterations=4,
        save_steps=3,
        seed=2,
        mlflow_tracking_uri=uri,
        mlflow_run_id=run_id,
        torch_threads=1,
        grpo_overrides={"entropy_coef": 0.01},
    )
    stream = io.StringIO()
    summary = run(config, JsonLinesReporter(stream))

    before = load_file(str(model_path / "model.safetensors"))
    after = load_file(str(tmp_path / "out" / "final" / "model.safetensors"))
    assert before.keys() == after.keys()
    unchanged = [name for name in before if torch.equal(before[name], after[name])]
    assert not unchanged, f"parameters GRPO did not move: {unchanged}"

    rewards = client.get_metric_history(run_id, "reward")
    assert len(rewards) == 3 and all(math.isfinite(m.value) for m in rewards)
    assert [m.step for m in rewards] == [1, 2, 3]
    logged = set(client.get_run(run_id).data.metrics)
    for key in (
        "rewards/reward_completed/mean",
        "rewards/reward_failed/mean",
        "tools/call_frequency",
        "tools/failure_frequency",
        "completions/mean_length",
        "entropy",
        "step_time",
    ):
        assert key in logged, key
    # The tally logs the trained reward per intent; weighted by rollouts it is the step's reward.
    by_intent = {key.split("/")[1] for key in logged if key.startswith("by_intent/")}
    assert by_intent and by_intent <= {r["intent"] for r in records}

    def at_step(key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run_id, key)}

    tallied = [(at_step(f"by_intent/{i}/reward"), at_step(f"by_intent/{i}/rollouts")) for i in by_intent]
    for logged_reward in rewards:
        step = logged_reward.step
        parts = [(reward[step], rollouts[step]) for reward, rollouts in tallied if step in reward]
        weighted = sum(r * n for r, n in parts) / sum(n for _, n in parts)
        assert weighted == pytest.approx(logged_reward.value, abs=1e-4)
    assert client.get_run(run_id).data.metrics["grpo/tasks"] == sum(summary.level_mix["rows_per_level"].values())
    assert summary.final_step == 3 and summary.resumed_from is None
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["model_path"] == summary.model_path
    assert result["reward_curve"] == [m.value for m in rewards]  # the curve the reward-hacking gate reads
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["step"] for e in events if e["event"] == "progress"] == [1, 2, 3]
    assert events[-1]["event"] == "final"
    artifacts = {a.path for a in client.list_artifacts(run_id, "model")}
    assert "model/model.safetensors" in artifacts
    # Nothing that unpickles is left in the final model or logged with it (the registry refuses it).
    from tracking.registry import check_model_dir

    check_model_dir(summary.model_path)
    assert not [a for a in artifacts if a.endswith((".bin", ".pt", ".pkl", ".pickle"))]


# ---------- reporting ----------


def test_json_lines_reporter_keeps_non_finite_values_visible():
    import io

    from training.reporting import JsonLinesReporter

    stream = io.StringIO()
    reporter = JsonLinesReporter(stream)
    reporter.metrics(3, {"loss": float("nan"), "reward": 1.5})
    event = json.loads(stream.getvalue())
    assert event["event"] == "metrics" and event["values"] == {"loss": "nan", "reward": 1.5}


def test_pipes_reporter_streams_messages_when_launched_by_dagster(tmp_path):
    """Under a Pipes context (the env vars PipesSubprocessClient sets), events become Pipes messages."""
    import subprocess
    import sys

    from dagster_pipes import encode_param

    messages = tmp_path / "messages.jsonl"
    context = {
        "asset_keys": ["grpo_candidate"],
        "code_version_by_asset_key": None,
        "provenance_by_asset_key": None,
        "partition_key": None,
        "partition_key_range": None,
        "partition_time_window": None,
        "run_id": "r1",
        "job_name": None,
        "retry_number": 0,
        "extras": {},
    }
    env = {
        **__import__("os").environ,
        "DAGSTER_PIPES_CONTEXT": encode_param({"data": context}),
        "DAGSTER_PIPES_MESSAGES": encode_param({"path": str(messages)}),
        "RETRAIN_REPORTER": "assets.pipes_reporter:PipesReporter",
    }
    script = (
        "from training.reporting import make_reporter\nfrom assets.pipes_reporter import PipesReporter\n"
        "r = make_reporter(); assert isinstance(r, PipesReporter)\n"
        "r.log('hello'); r.progress(1, 2); r.metrics(1, {'reward': 0.5})\n"
        "r.final({'final_step': 2, 'metrics': {'reward': 0.5}}); r.close()\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    sent = [json.loads(line) for line in messages.read_text().splitlines()]
    methods = [m["method"] for m in sent]
    assert "log" in methods and "report_asset_materialization" in methods and "closed" in methods
    custom = [m["params"]["payload"] for m in sent if m["method"] == "report_custom_message"]
    assert [c["kind"] for c in custom] == ["progress", "metrics", "final"]
    materialization = next(m for m in sent if m["method"] == "report_asset_materialization")
    assert materialization["params"]["metadata"]["final_step"]["raw_value"] == 2
