"""A GRPO process killed with SIGKILL after its first checkpoint resumes from it on the retry."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.helpers_training import level1_records, tiny_spec, write_jsonl

pytestmark = pytest.mark.slow


def test_sigkill_then_retry_resumes_from_last_checkpoint(tmp_path, world):
    from training.checkpoints import checkpoint_step, last_checkpoint
    from training.tiny.bootstrap import build_tiny_policy

    records = level1_records(world, 24, seed=4)
    base = build_tiny_policy(tmp_path / "base", records, tiny_spec())
    out = tmp_path / "run"
    config = tmp_path / "grpo.json"
    config.write_text(
        json.dumps(
            {
                "model_path": str(base),
                "output_dir": str(out),
                "records_path": str(write_jsonl(records, tmp_path / "r.jsonl")),
                "max_steps": 5,
                "num_generations": 2,
                "per_device_train_batch_size": 2,
                "max_completion_length": 48,
                "max_tool_calling_iterations": 2,
                "save_steps": 1,
                "save_total_limit": 10,
                "seed": 1,
            }
        )
    )
    command = [sys.executable, "-m", "training.grpo", "--config", str(config)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 240
    while last_checkpoint(out) is None:
        assert first.poll() is None, f"run ended before any checkpoint: {first.stdout.read().decode()[-2000:]}"
        assert time.monotonic() < deadline, "no checkpoint within 240 s"
        time.sleep(0.2)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=30)
    assert first.returncode == -signal.SIGKILL
    assert not (out / "result.json").exists()
    killed_at = last_checkpoint(out)
    assert killed_at.global_step < 5

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    result = json.loads((out / "result.json").read_text())
    assert result["resumed_from_step"] >= killed_at.global_step >= 1
    assert result["resumed_from"].endswith(f"checkpoint-{result['resumed_from_step']}")
    assert result["final_step"] == 5
    # the retry trained only the remaining steps: its progress events start after the checkpoint
    progress = [json.loads(line) for line in second.stdout.splitlines() if line.startswith("{")]
    steps = [e["step"] for e in progress if e.get("event") == "progress"]
    assert steps and min(steps) == result["resumed_from_step"] + 1 and max(steps) == 5
    assert checkpoint_step(last_checkpoint(out).path) == 5
    assert (out / "final" / "model.safetensors").exists() and (out / "final" / "tokenizer.json").exists()
    assert (out / "final" / "generation_config.json").exists()


@pytest.mark.parametrize("state", ["", '{"global_step": 2', b"\xff\xfe"], ids=["empty", "cut", "not-utf8"])
def test_a_checkpoint_whose_state_file_was_cut_short_is_passed_over(tmp_path, state):
    """A process killed while the Trainer writes a checkpoint leaves its state file empty or cut
    short: the retry resumes from the checkpoint before it instead of failing to read that one."""
    from training.checkpoints import last_checkpoint

    for step in (1, 2):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(b"weights")
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    written = tmp_path / "checkpoint-2" / "trainer_state.json"
    written.write_bytes(state if isinstance(state, bytes) else state.encode())
    found = last_checkpoint(tmp_path)
    assert found is not None and found.global_step == 1
