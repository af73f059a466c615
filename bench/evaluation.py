"""Benchmark: batched vs one-at-a-time rollouts, and the wall time of a shadow evaluation.

    .venv/bin/python bench/evaluation.py [--model PATH] [--tasks 16] [--shadow 256]

Policy under test: the tiny Qwen2 policy of training.bootstrap (built here, offline, unless --model
names a checkpoint). A freshly initialised model never closes a tool call, so every conversation
would end after one turn; to measure realistic multi-turn rollouts the main figures use a
"teacher-forced" policy: each round the model really generates `max_new_tokens` for every live
conversation (the cost being measured), then the conversation advances with the gold-following
expert's message, so contexts grow turn by turn as they do for a trained model. The model's own
rollouts (one turn each) are reported too.

Prints ratios against the one-at-a-time baseline measured in the same run.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from evaluation.policy import HFPolicy, ScriptedPolicy  # noqa: E402
from evaluation.rollout import run_rollouts  # noqa: E402
from training.prompting import initial_messages  # noqa: E402
from tests.helpers_eval import expert_policy, make_records  # noqa: E402


class TeacherForced:
    """Real batched generation for every live conversation; the expert's message advances it."""

    def __init__(self, model: HFPolicy, teacher: ScriptedPolicy):
        self.model, self.teacher = model, teacher
        self.name = f"teacher-forced({model.name})"
        self.generated = 0

    def act(self, conversations):
        texts = self.model.complete(conversations)
        self.generated += len(texts)
        return self.teacher.act(conversations)


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="policy checkpoint folder (default: build the tiny bootstrap policy)")
    parser.add_argument("--tasks", type=int, default=16, help="tasks for the batched vs sequential comparison")
    parser.add_argument("--shadow", type=int, default=256, help="conversations actually run for the shadow timing")
    parser.add_argument("--target", type=int, default=5000, help="shadow size to report (extrapolated if larger)")
    parser.add_argument("--max-new-tokens", type=int, default=24)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1: on a shared 2-core machine more threads thrash)")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    records = make_records(max(args.tasks, args.shadow), seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            path = args.model
        else:
            from training.bootstrap import TinyModelSpec, build_tiny_policy

            build_s, path = _timed(lambda: build_tiny_policy(Path(tmp) / "tiny", records, TinyModelSpec()))
            print(f"built tiny policy in {build_s:.1f} s")
        hf = HFPolicy(str(path), max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
    params = sum(p.numel() for p in hf.model.parameters())
    prompt_tokens = len(hf.tokenizer(hf.render(initial_messages(records[0])))["input_ids"])
    print(f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, torch threads "
          f"{torch.get_num_threads()}; model {params / 1e6:.2f}M parameters; opening prompt {prompt_tokens} tokens")

    tasks = records[:args.tasks]
    policy = TeacherForced(hf, expert_policy(records))
    hf.model.generate(**hf.tokenizer(["warm up"], return_tensors="pt"), max_new_tokens=2)  # first-call costs

    seq_s, seq = _timed(lambda: [t for r in tasks for t in run_rollouts(policy, [r], k=1, seed=0)])
    bat_s, bat = _timed(lambda: run_rollouts(policy, tasks, k=1, seed=0))
    turns = sum(t.turns for t in bat)
    same = [(t.success, t.messages) for t in seq] == [(t.success, t.messages) for t in bat]
    print(f"\n[teacher-forced, {len(tasks)} tasks, {turns} turns, success {sum(t.success for t in bat)}/{len(bat)}]")
    print(f"one-at-a-time: {seq_s:.2f} s   batched: {bat_s:.2f} s   speed-up x{seq_s / bat_s:.2f}   "
          f"identical trials: {same}")

    own_seq_s, _ = _timed(lambda: [run_rollouts(hf, [r], k=1, seed=0) for r in tasks])
    own_bat_s, own = _timed(lambda: run_rollouts(hf, tasks, k=1, seed=0))
    print(f"[model's own rollouts, {sum(t.turns for t in own)} turns] one-at-a-time {own_seq_s:.2f} s, "
          f"batched {own_bat_s:.2f} s, speed-up x{own_seq_s / own_bat_s:.2f}")

    shadow = records[:args.shadow]
    shadow_s, shadow_trials = _timed(lambda: run_rollouts(TeacherForced(hf, expert_policy(records)), shadow))
    per = shadow_s / len(shadow)
    shadow_turns = sum(t.turns for t in shadow_trials)
    print(f"\n[shadow evaluation] ran {len(shadow)} conversations ({shadow_turns} turns) batched in "
          f"{shadow_s:.1f} s = {per * 1000:.0f} ms/conversation")
    if args.target > len(shadow):
        print(f"  extrapolated to {args.target}: {per * args.target / 60:.1f} min per policy, "
              f"{2 * per * args.target / 60:.1f} min for candidate + champion (linear: fixed batch size)")
        print(f"  one-at-a-time would take about {seq_s / len(tasks) * args.target / 60:.1f} min per policy")


if __name__ == "__main__":
    main()
