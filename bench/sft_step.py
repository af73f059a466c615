"""SFT step time: the warm start's trainer against TRL's stock SFTTrainer, same data, same run.

`training.sft` runs TRL's SFTTrainer with one change: its loss sends only the labelled (assistant)
positions through the LM head, where TRL's fused head computes log-probabilities, entropy and top-1
for every position. This measures what that buys on this machine: both trainers train a copy of
the same freshly built tiny policy on the same relabelled level-1 rows (the same batches in the
same order), and the script prints seconds per step for each and their ratio, plus each run's
mean loss so the two can be seen to learn the same thing.

    .venv/bin/python bench/sft_step.py [--steps 40] [--batch 16] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def timed_run(trainer_cls, base: Path, rows: list[dict], out: Path, steps: int, batch: int) -> dict:
    """Train `trainer_cls` for `steps` on `rows`; seconds per step (after the first, which warms up)."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import SFTConfig

    from training.checkpoints import load_policy
    from training.sft import tokenized_rows

    model, tokenizer = load_policy(base)
    stamps: list[float] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())

    args = SFTConfig(
        output_dir=str(out),
        max_steps=steps,
        per_device_train_batch_size=batch,
        learning_rate=1e-3,
        lr_scheduler_type="constant",
        seed=0,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=steps,
        disable_tqdm=True,
        dataloader_pin_memory=False,
        gradient_checkpointing=False,
    )
    trainer = trainer_cls(
        model=model,
        args=args,
        train_dataset=Dataset.from_list(tokenized_rows(tokenizer, rows)),
        processing_class=tokenizer,
        callbacks=[Clock()],
    )
    output = trainer.train()
    per_step = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
    return {"seconds_per_step": round(per_step, 3), "train_loss": round(float(output.training_loss), 4)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    args = parser.parse_args()

    import torch
    from learning import level1_tasks
    from trl import SFTTrainer

    from domains.retail.level1 import level1_demonstration
    from training.curriculum import tools_for_levels
    from training.sft import _trainer_class, sft_rows
    from training.tiny.bootstrap import TinyModelSpec, build_tiny_policy

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="bench-sft-step-"))
    train, _ = level1_tasks(work, 300, 0)
    expert = [level1_demonstration(task) for task in train]
    spec = TinyModelSpec(hidden_size=args.hidden, intermediate_size=args.hidden * 3)
    base = build_tiny_policy(work / "base", expert, spec)
    rows = sft_rows(expert, tools=tools_for_levels({"1": 1.0}), relabelled=args.steps * args.batch)
    stock = timed_run(SFTTrainer, base, rows, work / "stock", args.steps, args.batch)
    ours = timed_run(_trainer_class(), base, rows, work / "ours", args.steps, args.batch)
    print(
        json.dumps(
            {
                "stock_trl": stock,
                "labelled_positions": ours,
                "rows": len(rows),
                "batch": args.batch,
                "threads": args.threads,
            }
        )
    )
    print(
        f"sft_step_stock={stock['seconds_per_step']}s sft_step_ours={ours['seconds_per_step']}s "
        f"speedup={stock['seconds_per_step'] / ours['seconds_per_step']:.2f}x"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
