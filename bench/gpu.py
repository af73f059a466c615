"""GPU step time of a preset: a few GRPO steps of configs/<preset>.yaml on a model built from config.

Run on a machine with a CUDA GPU, as one prepared script (no download: the model is built from a
Qwen2 config with the transformer shape of Qwen2.5-0.5B, random weights, bf16, and the project's
own tokenizer trained on simulated traffic, so the vocabulary is far smaller than Qwen's 151,936).
The trainer is `training.grpo.run` with the preset's grpo_candidate settings, only `max_steps`
and the dataset size cut to the bench. Prints one JSON object: seconds per step (the first step,
which compiles and warms caches, is reported apart), generated tokens per second and peak GPU memory.

    python bench/gpu.py [--preset configs/qwen2.5-0.5b-instruct.yaml] [--steps 4] [--no-vllm] [--no-liger] [--out FILE] [--record]

`--record` writes the figures to bench/results/gpu.md and refreshes bench/RESULTS.md from it;
`--record-from A.json [B.json ...]` records runs that `--out` wrote elsewhere, one column each.

On a machine without CUDA it refuses at once (exit 2) and measures nothing. It imports only what the
trainer imports (no Dagster, DuckDB or MLflow), so it runs in a training image as well as in the full install.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import yaml  # noqa: E402
from assemble_results import assemble  # noqa: E402 - after the path setup above

from training.tiny.bootstrap import TinyModelSpec, build_tiny_policy  # noqa: E402

DEFAULT_PRESET = ROOT / "configs" / "qwen2.5-0.5b-instruct.yaml"
# Qwen2.5-0.5B's transformer (config.json of the released checkpoint); the vocabulary is the
# project tokenizer's, trained on the simulated traffic below.
QWEN25_05B_SHAPE = TinyModelSpec(
    vocab_size=8000,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
)


class NoCudaError(RuntimeError):
    """This machine has no CUDA device: the GPU bench cannot run here."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bench/gpu.py", description=__doc__.splitlines()[0])
    parser.add_argument("--preset", type=Path, default=DEFAULT_PRESET, help="a run config in configs/")
    parser.add_argument("--steps", type=int, default=4, help="GRPO steps to time (>= 2: the first is warm-up)")
    parser.add_argument("--no-vllm", action="store_true", help="generate with transformers instead of vLLM")
    parser.add_argument("--no-liger", action="store_true", help="TRL's own loss instead of the preset's Liger kernels")
    parser.add_argument("--out", type=Path, help="also write the JSON result to this file")
    parser.add_argument("--record", action="store_true", help="record the figures in bench/RESULTS.md")
    parser.add_argument(
        "--record-from", type=Path, nargs="+", metavar="JSON", help="record results --out wrote, measuring nothing"
    )
    args = parser.parse_args(argv)
    if args.steps < 2:
        parser.error(f"--steps {args.steps}: at least 2 (the first step is warm-up and timed apart)")
    if not args.preset.is_file():
        parser.error(f"--preset {args.preset}: no such file")
    return args


def require_cuda() -> str:
    """The CUDA device's name; NoCudaError, saying what was found, when there is none."""
    import torch  # heavy: only once the arguments are known to be good

    if not torch.cuda.is_available():
        raise NoCudaError(
            f"bench/gpu.py needs a CUDA GPU; torch {torch.__version__} sees none "
            f"(CUDA build: {torch.version.cuda or 'none'}). Nothing was measured."
        )
    return torch.cuda.get_device_name(0)


def load_preset(preset: Path) -> dict[str, Any]:
    """The preset's run config. Read as plain YAML, not through orchestration.run_config, whose
    package needs Dagster: the bench must also run in a training image that has none."""
    config = yaml.safe_load(preset.read_text())
    if not isinstance(config, dict):
        raise ValueError(f"{preset}: a run config is one mapping (ops: ...), not {type(config).__name__}")
    return config


def preset_trainer_settings(
    preset: Path, steps: int, use_vllm: bool, use_liger: bool = True
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(GRPORunConfig fields, TRL overrides) of the preset's grpo_candidate and curriculum, cut to `steps` steps.

    grpo_candidate's config also holds the supervised episode step's settings (`episodes_*`), which
    this bench does not time; only GRPORunConfig's own fields are kept."""
    from training.grpo_config import GRPORunConfig

    config = load_preset(preset)
    known = {field.name for field in dataclasses.fields(GRPORunConfig)}
    grpo = {key: value for key, value in config["ops"]["grpo_candidate"]["config"].items() if key in known}
    overrides = dict(grpo.pop("grpo_overrides", {}))
    levels = config.get("resources", {}).get("curriculum", {}).get("config", {}).get("levels")
    if levels:
        grpo["levels"] = levels
    if not use_vllm:
        overrides = {k: v for k, v in overrides.items() if not k.startswith("vllm_")}
        grpo["use_vllm"] = False
    if not use_liger:
        grpo["use_liger"] = False
        overrides.pop("use_liger_kernel", None)
    grpo.update(max_steps=steps, save_steps=steps * 10, dataset_size=steps * grpo.get("per_device_train_batch_size", 4))
    return grpo, overrides


class StepCollector:
    """A training.reporting.Reporter that keeps per-step seconds and logged metrics."""

    def __init__(self) -> None:
        self.step_seconds: list[float] = []
        self.metrics_by_step: dict[int, dict[str, float]] = {}

    def log(self, message: str, **fields: Any) -> None:
        print(json.dumps({"log": message}), file=sys.stderr)

    def progress(self, step: int, total: int, **fields: Any) -> None:
        self.step_seconds.append(float(fields["step_seconds"]))

    def metrics(self, step: int, values: dict[str, float]) -> None:
        self.metrics_by_step.setdefault(step, {}).update(values)

    def final(self, summary: dict[str, Any]) -> None:
        pass

    def close(self) -> None:
        pass


def measure(args: argparse.Namespace, device: str) -> dict[str, Any]:
    import torch  # heavy

    from domains.retail.traffic.simulate import simulate
    from training.grpo import load_records, run
    from training.grpo_config import GRPORunConfig

    settings, overrides = preset_trainer_settings(args.preset, args.steps, not args.no_vllm, not args.no_liger)
    with tempfile.TemporaryDirectory(prefix="bench-gpu-") as tmp:
        simulate(days=2, per_day=80, seed=0, out_dir=f"{tmp}/traffic")
        records = [r for path in sorted(Path(tmp, "traffic").rglob("*.jsonl")) for r in load_records(path)]
        model_dir = build_tiny_policy(f"{tmp}/model", records, QWEN25_05B_SHAPE)
        config = GRPORunConfig(
            model_path=str(model_dir), output_dir=f"{tmp}/grpo", records=records, grpo_overrides=overrides, **settings
        )
        collector = StepCollector()
        torch.cuda.reset_peak_memory_stats()
        started = time.monotonic()
        result = run(config, collector)  # None only on a process other than the main one
        wall = time.monotonic() - started
        parameters = parameter_count(model_dir)
    timed = collector.step_seconds[1:]
    lengths = [collector.metrics_by_step.get(s, {}).get("completions/mean_length") for s in range(2, args.steps + 1)]
    generated = None
    if timed and all(v is not None for v in lengths):
        # Per device and step, TRL generates per_device_train_batch_size completions.
        tokens = sum(lengths) * settings["per_device_train_batch_size"]
        generated = round(tokens / sum(timed), 1)
    return {
        "device": device,
        "preset": str(args.preset.relative_to(ROOT) if args.preset.is_relative_to(ROOT) else args.preset),
        "model_shape": asdict(QWEN25_05B_SHAPE),
        "parameters": parameters,
        "dtype": "bfloat16",
        "generation": "transformers" if args.no_vllm else overrides.get("vllm_mode", "vllm"),
        "liger": bool(settings.get("use_liger")),
        "steps": args.steps,
        "first_step_seconds": collector.step_seconds[0] if collector.step_seconds else None,
        "step_seconds": round(sum(timed) / len(timed), 3) if timed else None,
        "generated_tokens_per_second": generated,
        "peak_memory_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        "wall_seconds": round(wall, 1),
        "final_step": result.final_step if result else None,
    }


def parameter_count(model_dir: Path) -> int:
    """Parameters stored in a model folder's safetensors files (tied embeddings count once)."""
    from safetensors import safe_open

    total = 0
    for path in Path(model_dir).glob("*.safetensors"):
        with safe_open(str(path), "np") as handle:
            for key in handle.keys():  # noqa: SIM118 - a safetensors handle is not a dict
                total += math.prod(handle.get_slice(key).get_shape())
    return total


def command_line(result: dict[str, Any]) -> str:
    """The bench command that measured `result`."""
    flags = " --no-vllm" if result.get("generation") == "transformers" else ""
    flags += " --no-liger" if result.get("liger") is False else ""
    return f"python bench/gpu.py --preset {result['preset']} --steps {result['steps']}{flags}"


def record(
    results: dict[str, Any] | list[dict[str, Any]],
    results_dir: Path = ROOT / "bench" / "results",
    results_md: Path = ROOT / "bench" / "RESULTS.md",
) -> Path:
    """Write one or more runs' figures as bench/results/gpu.md (a column per run) and refresh
    RESULTS.md from the per-area files."""
    runs = [results] if isinstance(results, dict) else list(results)
    if not runs:
        raise ValueError("record: no results to record")
    keys = list(dict.fromkeys(key for run in runs for key in run))
    header = "| figure | " + " | ".join(f"run {i}" for i in range(1, len(runs) + 1)) + " |"
    rule = "| --- |" + " --- |" * len(runs)
    rows = "\n".join(f"| `{key}` | " + " | ".join(json.dumps(run.get(key)) for run in runs) + " |" for key in keys)
    commands = "\n".join(f"- run {i}: `{command_line(run)}`" for i, run in enumerate(runs, 1))
    path = results_dir / "gpu.md"
    path.write_text(
        "# GPU step time (`bench/gpu.py`)\n\n"
        f"Recorded on {time.strftime('%Y-%m-%d', time.gmtime())}: a model of Qwen2.5-0.5B's transformer shape "
        "built from config (random weights, the project tokenizer), the preset's GRPO settings. Step time "
        "excludes the first (warm-up) step.\n\n"
        f"{commands}\n\n{header}\n{rule}\n{rows}\n"
    )
    results_md.write_text(assemble(results_md, results_dir))
    return path


def record_files(paths: list[Path]) -> Path:
    """Record results that `--out` wrote, possibly on another machine (a GPU box whose checkout is thrown away)."""
    runs = []
    for path in paths:
        try:
            run = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{path}: not a bench/gpu.py result ({err})") from err
        if not isinstance(run, dict) or "preset" not in run or "steps" not in run:
            raise ValueError(f"{path}: not a bench/gpu.py result (no preset or steps)")
        runs.append(run)
    return record(runs)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.record_from:
        try:
            print(f"recorded in {record_files(args.record_from)}", file=sys.stderr)
        except ValueError as err:
            print(f"bench/gpu.py: {err}", file=sys.stderr)
            return 2
        return 0
    try:
        device = require_cuda()
    except NoCudaError as err:
        print(f"bench/gpu.py: {err}", file=sys.stderr)
        return 2
    result = measure(args, device)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if args.record:
        print(f"recorded in {record(result)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
