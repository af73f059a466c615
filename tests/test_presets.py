"""The GPU presets in configs/: each is valid run config of `weekly_retrain`, its trainer settings
pass the trainer's own checks, and `retrain run --config` runs the job with it."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import subprocess
import sys

import dagster as dg
import pytest
import torch
from trl import GRPOConfig

from orchestration.cli import main
from orchestration.definitions import defs
from orchestration.jobs import build_weekly_retrain
from orchestration.run_config import RunConfigFileError, load_run_config, scheduled_run_config
from tests.conftest import REPO_ROOT
from training.episode_update import EpisodeUpdateSettings
from training.grpo_config import GRPORunConfig, validate

PRESETS = sorted((REPO_ROOT / "configs").glob("*.yaml"))
QWEN25_CONTEXT = 32768  # max_position_embeddings of the Qwen2.5 instruct checkpoints


def test_the_gpu_presets_are_there():
    assert {p.name for p in PRESETS} >= {"qwen2.5-1.5b-instruct.yaml", "qwen2.5-0.5b-instruct.yaml"}


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_validates_against_the_weekly_job_schema(preset):
    config = load_run_config(str(preset))
    result = dg.validate_run_config(defs.resolve_job_def("weekly_retrain"), config)
    assert result["ops"]["grpo_candidate"]["config"]["profile"] == "gpu"
    assert result["ops"]["policy_base"]["config"]["base_model"].startswith("/models/")
    assert result["ops"]["policy_base"]["config"]["sft_warm_start"] is False
    for report in ("calibration_report", "shadow_report"):
        assert result["ops"][report]["config"]["compact"] is False  # judged on full tool results
    levels = config["resources"]["curriculum"]["config"]["levels"]
    assert len(levels) > 1 and sum(levels.values()) == pytest.approx(1.0)  # a level mix, not level 1 alone


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_overrides_are_trl_fields_selecting_vllm_colocate(preset):
    grpo = load_run_config(str(preset))["ops"]["grpo_candidate"]["config"]
    overrides = grpo["grpo_overrides"]
    unknown = set(overrides) - {f.name for f in dataclasses.fields(GRPOConfig)}
    assert not unknown, f"{preset.name}: not GRPOConfig fields: {sorted(unknown)}"
    assert grpo["use_vllm"] is True and overrides["vllm_mode"] == "colocate"


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.stem)
def test_preset_passes_the_trainers_checks_on_one_gpu(preset, tmp_path):
    """What grpo_candidate hands `python -m training.grpo`, checked as the trainer checks it before compute."""
    settings = dict(load_run_config(str(preset))["ops"]["grpo_candidate"]["config"])
    # The asset hands the supervised step its `episodes_*` settings and GRPO the rest.
    step = {k.removeprefix("episodes_"): v for k, v in settings.items() if k.startswith("episodes_")}
    assert EpisodeUpdateSettings(**step).use_cpu is False  # a real model's step runs on its GPU
    grpo = {k: v for k, v in settings.items() if not k.startswith("episodes_")}
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen2", "max_position_embeddings": QWEN25_CONTEXT}))
    records = tmp_path / "train_records.jsonl"
    records.write_text("")
    config = GRPORunConfig.from_dict(
        {
            "model_path": str(model),
            "output_dir": str(tmp_path / "grpo"),
            "records_path": str(records),
            **grpo,
        }
    )
    validate(config, num_processes=1)


def _weekly_job(run_config: dict | None):
    return dg.Definitions(
        assets=defs.assets,
        asset_checks=defs.asset_checks,
        jobs=[build_weekly_retrain(run_config)],
        resources=defs.resources,
    ).resolve_job_def("weekly_retrain")


def test_runs_without_config_take_the_preset_named_by_retrain_run_config():
    """The schedule's run requests carry no run config: the job's config for the partition applies."""
    preset = REPO_ROOT / "configs" / "qwen2.5-1.5b-instruct.yaml"
    config = scheduled_run_config({"RETRAIN_RUN_CONFIG": str(preset)})
    request = dg.RunRequest(partition_key="2026-11-16").with_resolved_tags_and_config(
        target_definition=_weekly_job(config), dynamic_partitions_requests=[], dynamic_partitions_store=None
    )
    assert request.run_config == load_run_config(str(preset))
    assert request.run_config["ops"]["grpo_candidate"]["config"]["profile"] == "gpu"
    # Without the variable the job has no default config: runs take the assets' own (tiny CPU) defaults.
    assert scheduled_run_config({}) is None
    assert _weekly_job(None).get_run_config_for_partition_key("2026-11-16") == {}


def test_a_bad_retrain_run_config_is_named(tmp_path):
    with pytest.raises(RunConfigFileError, match="RETRAIN_RUN_CONFIG=.*missing.yaml"):
        scheduled_run_config({"RETRAIN_RUN_CONFIG": str(tmp_path / "missing.yaml")})
    listed = tmp_path / "list.yaml"
    listed.write_text("- ops\n")
    with pytest.raises(RunConfigFileError, match="must hold one mapping"):
        scheduled_run_config({"RETRAIN_RUN_CONFIG": str(listed)})


@pytest.mark.slow
@pytest.mark.parametrize("how", ["--config", "RETRAIN_RUN_CONFIG"])
def test_retrain_run_takes_a_preset(how, home, capsys, monkeypatch):
    """`retrain run --config`, or `retrain run` in a deployment naming the preset in RETRAIN_RUN_CONFIG,
    runs the job with it. With an empty log the window fails validation, so the run stops long
    before the base model would be loaded."""
    preset = REPO_ROOT / "configs" / "qwen2.5-0.5b-instruct.yaml"
    argv = ["run", "--week", "2026-11-16"]
    if how == "--config":
        argv += ["--config", str(preset)]
    else:
        monkeypatch.setenv("RETRAIN_RUN_CONFIG", str(preset))
    code = main(argv)
    assert code == 1, capsys.readouterr()
    run_id = capsys.readouterr().out.split("dagster run ")[1].split(")")[0]
    with dg.DagsterInstance.from_config(str(home.dagster_home)) as instance:
        stored = instance.get_run_by_id(run_id)
    assert stored.tags["dagster/partition"] == "2026-11-16"
    assert stored.run_config["ops"] == load_run_config(str(preset))["ops"]


def _gpu_bench():
    spec = importlib.util.spec_from_file_location("bench_gpu", REPO_ROOT / "bench" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_bench_arguments():
    bench = _gpu_bench()
    args = bench.parse_args([])
    assert args.preset == REPO_ROOT / "configs" / "qwen2.5-0.5b-instruct.yaml" and args.steps == 4 and not args.no_vllm
    args = bench.parse_args(["--preset", str(PRESETS[0]), "--steps", "3", "--no-vllm", "--out", "r.json"])
    assert (args.preset, args.steps, args.no_vllm, args.out.name) == (PRESETS[0], 3, True, "r.json")
    for bad in (["--steps", "1"], ["--preset", "configs/missing.yaml"]):
        with pytest.raises(SystemExit) as exit_info:
            bench.parse_args(bad)
        assert exit_info.value.code == 2


def test_gpu_bench_takes_the_presets_trainer_settings():
    bench = _gpu_bench()
    settings, overrides = bench.preset_trainer_settings(REPO_ROOT / "configs" / "qwen2.5-0.5b-instruct.yaml", 3, True)
    assert settings["profile"] == "gpu" and settings["max_steps"] == 3 and settings["num_generations"] == 8
    assert settings["use_vllm"] is True and overrides["vllm_mode"] == "colocate"
    assert len(settings["levels"]) > 1  # the preset's curriculum mix, not the default level 1
    plain_settings, plain = bench.preset_trainer_settings(
        REPO_ROOT / "configs" / "qwen2.5-0.5b-instruct.yaml", 3, False
    )
    assert plain_settings["use_vllm"] is False and not any(k.startswith("vllm_") for k in plain)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_gpu_bench_refuses_without_cuda(tmp_path, capsys):
    out = tmp_path / "result.json"
    assert _gpu_bench().main(["--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA GPU" in err and "Nothing was measured" in err
    assert not out.exists()


def test_gpu_bench_records_its_figures_in_results(tmp_path):
    bench = _gpu_bench()
    results = tmp_path / "results"
    results.mkdir()
    overview = tmp_path / "RESULTS.md"
    overview.write_text("# Benchmark results\n\n## Headline figures\n\nkept\n")
    result = {
        "device": "test device",
        "preset": "configs/x.yaml",
        "steps": 3,
        "generation": "colocate",
        "step_seconds": 1.5,
    }
    path = bench.record(result, results_dir=results, results_md=overview)
    text = overview.read_text()
    assert path == results / "gpu.md" and "## GPU step time (`bench/gpu.py`)" in text
    assert "| `step_seconds` | 1.5 |" in text and "kept" in text


def test_gpu_bench_settings_are_grpo_run_config_fields_only():
    """grpo_candidate's config also carries the episode step's `episodes_*` settings, which
    GRPORunConfig refuses; the bench keeps only its own fields and can switch Liger off."""
    from training.grpo_config import GRPORunConfig

    bench = _gpu_bench()
    preset = REPO_ROOT / "configs" / "qwen2.5-0.5b-instruct.yaml"
    assert any(key.startswith("episodes_") for key in bench.load_preset(preset)["ops"]["grpo_candidate"]["config"])
    settings, overrides = bench.preset_trainer_settings(preset, 3, False, use_liger=False)
    assert not any(key.startswith("episodes_") for key in settings) and settings["use_liger"] is False
    GRPORunConfig(model_path="m", output_dir="o", records=[], grpo_overrides=overrides, **settings)
    assert bench.preset_trainer_settings(preset, 3, False)[0]["use_liger"] is True


def test_gpu_bench_imports_no_orchestration_stack():
    """The bench runs in a training image without Dagster or DuckDB."""
    code = (
        "import importlib.util, sys\n"
        f"spec = importlib.util.spec_from_file_location('g', {str(REPO_ROOT / 'bench' / 'gpu.py')!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "m.preset_trainer_settings(m.DEFAULT_PRESET, 3, False)\n"
        "print(sorted(k for k in ('dagster', 'duckdb') if k in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_gpu_bench_records_runs_measured_elsewhere(tmp_path, monkeypatch):
    bench = _gpu_bench()
    results = tmp_path / "results"
    results.mkdir()
    overview = tmp_path / "RESULTS.md"
    overview.write_text("# Benchmark results\n\n## Headline figures\n\nkept\n")
    runs = [
        {
            "device": "d",
            "preset": "configs/x.yaml",
            "steps": 4,
            "generation": "transformers",
            "liger": liger,
            "step_seconds": s,
        }
        for liger, s in ((False, 2.5), (True, 2.0))
    ]
    paths = []
    for i, run in enumerate(runs):
        paths.append(tmp_path / f"r{i}.json")
        paths[-1].write_text(json.dumps(run))
    original = bench.record
    monkeypatch.setattr(bench, "record", lambda r: original(r, results_dir=results, results_md=overview))
    assert bench.main(["--record-from", *map(str, paths)]) == 0
    text = (results / "gpu.md").read_text()
    assert "| `step_seconds` | 2.5 | 2.0 |" in text
    assert (
        "--steps 4 --no-vllm --no-liger`" in text
        and "run 2: `python bench/gpu.py --preset configs/x.yaml --steps 4 --no-vllm`" in text
    )
    bad = tmp_path / "bad.json"
    bad.write_text("[1]")
    assert bench.main(["--record-from", str(bad)]) == 2
