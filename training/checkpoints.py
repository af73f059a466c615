"""Checkpoints of a training run: find the last complete one to resume from, save the final model.

A process killed while writing leaves a `checkpoint-N` folder without its `trainer_state.json`
(the Trainer writes it last); such a folder is skipped, so a retry never resumes from half a save.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    global_step: int


def is_complete(folder: Path) -> bool:
    """A checkpoint the Trainer finished writing: its state file and the weights are present."""
    state = folder / "trainer_state.json"
    if not state.exists() or not any((folder / name).exists() for name in _WEIGHTS):
        return False
    json.loads(state.read_text())  # a truncated state file raises here rather than at resume time
    return True


def complete_checkpoints(output_dir: str | os.PathLike) -> list[Checkpoint]:
    """Complete checkpoints under `output_dir`, oldest first."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = _CHECKPOINT.match(child.name)
        if match and child.is_dir() and is_complete(child):
            found.append(Checkpoint(child, int(match.group(1))))
    return sorted(found, key=lambda c: c.global_step)


def last_checkpoint(output_dir: str | os.PathLike) -> Checkpoint | None:
    checkpoints = complete_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def checkpoint_step(folder: str | os.PathLike) -> int:
    """The global step recorded inside a checkpoint's trainer state."""
    return int(json.loads((Path(folder) / "trainer_state.json").read_text())["global_step"])


def save_final_model(model, tokenizer, out_dir: str | os.PathLike) -> Path:
    """Safetensors weights, tokenizer (with chat template) and generation config in one folder."""
    from transformers import GenerationConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model = getattr(model, "module", model)  # unwrap DDP
    if model.generation_config is None:
        model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                                   pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    return out
