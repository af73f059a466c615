"""The GRPO entry point under accelerate with two CPU processes (data parallel over gloo).

`accelerate launch --cpu --num_processes 2` starts ONE process: with `--cpu`, accelerate 1.15 always
takes its simple launcher, which only fans out through `mpirun` (a hostfile), so the process count is
ignored. `--multi_gpu --num_processes 2` on a machine without GPUs goes through torchrun instead; each
rank then sees RANK/WORLD_SIZE, and because the run config's CPU profile sets `use_cpu=True`, the
Trainer's accelerator becomes MULTI_CPU over gloo. That is the command tested here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers_training import level1_records, tiny_spec, write_jsonl

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent


def test_shipped_accelerate_configs_parse():
    import yaml

    single = yaml.safe_load((REPO / "training/accelerate/single_gpu.yaml").read_text())
    multi = yaml.safe_load((REPO / "training/accelerate/multi_gpu_zero2.yaml").read_text())
    assert single["num_processes"] == 1 and single["distributed_type"] == "NO"
    assert multi["distributed_type"] == "DEEPSPEED"
    zero = json.loads((REPO / multi["deepspeed_config"]["deepspeed_config_file"]).read_text())
    assert zero["zero_optimization"]["stage"] == 2


def test_two_cpu_processes_write_one_consistent_checkpoint(tmp_path, world):
    from safetensors.torch import load_file

    from training.checkpoints import checkpoint_step, complete_checkpoints
    from training.tiny.bootstrap import build_tiny_policy

    records = level1_records(world, 16, seed=8)
    base = build_tiny_policy(tmp_path / "base", records, tiny_spec())
    out = tmp_path / "run"
    config = tmp_path / "grpo.yaml"
    config.write_text(
        json.dumps(
            {
                "model_path": str(base),
                "output_dir": str(out),
                "records_path": str(write_jsonl(records, tmp_path / "r.jsonl")),
                "max_steps": 2,
                "num_generations": 2,
                "per_device_train_batch_size": 2,
                "max_completion_length": 32,
                "max_tool_calling_iterations": 2,
                "save_steps": 2,
                "seed": 3,
                "torch_threads": 1,
            }
        )
    )  # JSON is valid YAML: this also exercises the YAML reader
    launcher = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    command = [
        launcher,
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "-m",
        "training.grpo",
        "--config",
        str(config),
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=REPO)
    assert proc.returncode == 0, (proc.stdout[-3000:], proc.stderr[-5000:])

    checkpoints = complete_checkpoints(out)
    assert [c.global_step for c in checkpoints] == [2]
    assert checkpoint_step(checkpoints[0].path) == 2
    state = json.loads((checkpoints[0].path / "trainer_state.json").read_text())
    assert state["max_steps"] == 2
    # one writer: the checkpoint's weights are the final model's weights, not a second process's copy
    saved = load_file(str(checkpoints[0].path / "model.safetensors"))
    final = load_file(str(out / "final" / "model.safetensors"))
    assert saved.keys() == final.keys() and all((saved[k] == final[k]).all() for k in saved)
    result = json.loads((out / "result.json").read_text())
    assert result["final_step"] == 2
    # both ranks ran: the gloo process group reported a world size of 2
    finals = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith('{"event": "final"')]
    assert len(finals) == 1  # only the main process reports
    assert result["world_size"] == 2
