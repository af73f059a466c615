"""Model folders: load one the way a real checkpoint loads, find the last complete checkpoint of a
run to resume from, save the final model.

A process killed while writing leaves a `checkpoint-N` folder without its `trainer_state.json`
(the Trainer writes it last); such a folder is skipped, so a retry never resumes from half a save.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")
_WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "adapter_model.safetensors")


class ModelLoadError(ValueError):
    """A model path that is not a loadable, safetensors-only model folder."""


def load_tokenizer(path: str | os.PathLike):
    """The policy's tokenizer, through the fast class directly (never AutoTokenizer: for a folder whose config says qwen2 it silently returns
    the stock Qwen2 tokenizer class, which re-tokenises with other ids)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast  # heavy: only when a model loads

    local = Path(path)
    if local.is_dir():
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(local))
    else:  # a hub id: its own tokenizer class is the right one there
        tokenizer = AutoTokenizer.from_pretrained(str(path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_policy(path: str | os.PathLike, dtype: Any = None):
    """`(model, tokenizer)` from a local folder or a hub id, the same way a real checkpoint loads.

    Weights load from safetensors only: a folder holding only a pickle (`pytorch_model.bin`) is
    refused with transformers' OSError rather than unpickled, since unpickling runs code.
    """
    from transformers import AutoModelForCausalLM  # heavy: only when a model loads

    local = Path(path)
    if not local.is_dir() and (str(path).startswith((".", "/")) or local.exists()):
        raise ModelLoadError(f"model path {str(path)!r} is not a folder")
    if local.is_dir():
        _refuse_pickle_shards(local)
    kwargs: dict[str, Any] = {"use_safetensors": True}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
    return model, load_tokenizer(path)


def _refuse_pickle_shards(folder: Path) -> None:
    """Refuse a shard index that names a non-safetensors file.

    `use_safetensors=True` is not enough on its own: given `model.safetensors.index.json`,
    transformers opens whatever shard files the index names, and hands a `.bin` one to torch.load
    (measured with transformers 5.24; its weights-only unpickler is the only thing in the way).
    """
    for index in folder.glob("*.index.json"):
        try:
            weight_map = json.loads(index.read_text()).get("weight_map") or {}
        except (OSError, ValueError, AttributeError) as err:
            raise ModelLoadError(f"{index} is not a readable shard index: {err}") from err
        pickled = sorted({str(f) for f in weight_map.values() if not str(f).endswith(".safetensors")})
        if pickled:
            raise ModelLoadError(
                f"{index} names shards that are not safetensors ({', '.join(pickled[:3])}); "
                "only safetensors weights are loaded, since unpickling can run code"
            )


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    global_step: int


def is_complete(folder: Path) -> bool:
    """A checkpoint the Trainer finished writing: its state file reads as JSON and the weights are
    present. A process killed while writing one leaves the state file empty or cut short: that
    checkpoint is incomplete, and a retry resumes from the one before it."""
    state = folder / "trainer_state.json"
    if not state.exists() or not any((folder / name).exists() for name in _WEIGHTS):
        return False
    try:
        json.loads(state.read_text())
    except ValueError:  # JSONDecodeError, or bytes that are not UTF-8
        return False
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
        model.generation_config = GenerationConfig(
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
        )
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    model.generation_config.save_pretrained(out)
    return out
