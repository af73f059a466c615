"""Benchmark: batched vs one-at-a-time rollouts, and the wall time of a shadow evaluation.

    .venv/bin/python bench/evaluation.py [--model PATH] [--tasks 16] [--shadow 256] [--shadow-only]

Policy under test: the tiny Qwen2 policy of training.tiny.bootstrap (built here, offline, unless --model
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
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from evaluation.rollout import run_rollouts  # noqa: E402
from tests.helpers_eval import expert_policy, make_records  # noqa: E402
from training.policies import HFPolicy, ScriptedPolicy  # noqa: E402
from training.sandbox.prompting import initial_messages  # noqa: E402


class TeacherForced:
    """Real batched generation for every live conversation; the expert's message advances it.

    With `progress_s`, prints every so often how far a long run got (conversations finished,
    turns generated, elapsed time), so a run stopped early still leaves a measured rate."""

    def __init__(self, model: HFPolicy, teacher: ScriptedPolicy, progress_s: float = 0.0):
        self.model, self.teacher = model, teacher
        self.name = f"teacher-forced({model.name})"
        self.max_live = model.max_live  # keep the model's decode batch full (continuous batching)
        self.generated = 0
        self.progress_s = progress_s
        self._seen: set[int] = set()
        self._start = self._last_report = time.perf_counter()
        self._cpu_start = time.process_time()

    def act(self, conversations):
        texts = self.model.complete(conversations)
        self.generated += len(texts)
        if self.progress_s:
            self._report(conversations)
        return self.teacher.act(conversations)

    def _report(self, conversations) -> None:
        live = {id(c) for c in conversations}
        self._seen |= live
        now = time.perf_counter()
        if now - self._last_report >= self.progress_s:
            self._last_report = now
            # CPU seconds too: on a shared machine they say what the work costs, whatever the load.
            print(
                f"  progress: {now - self._start:.0f} s wall, {time.process_time() - self._cpu_start:.0f} s CPU, "
                f"conversations started {len(self._seen)}, finished {len(self._seen) - len(live)}, "
                f"turns generated {self.generated}, load {os.getloadavg()[0]:.1f}",
                flush=True,
            )


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
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: on a shared 2-core machine more threads thrash)"
    )
    parser.add_argument(
        "--no-prefix-cache",
        action="store_true",
        help="prefill every turn's whole transcript (to measure what the cache saves)",
    )
    parser.add_argument("--shadow-only", action="store_true", help="skip the batched vs one-at-a-time part")
    parser.add_argument("--progress", type=float, default=60.0, help="seconds between progress lines of the shadow run")
    args = parser.parse_args()

    import torch

    torch.set_num_threads(args.threads)

    records = make_records(max(args.tasks, args.shadow), seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        if args.model:
            path = args.model
        else:
            from training.tiny.bootstrap import TinyModelSpec, build_tiny_policy

            build_s, path = _timed(lambda: build_tiny_policy(Path(tmp) / "tiny", records, TinyModelSpec()))
            print(f"built tiny policy in {build_s:.1f} s")
        hf = HFPolicy(
            str(path),
            max_new_tokens=args.max_new_tokens,
            batch_size=args.batch_size,
            prefix_cache=not args.no_prefix_cache,
        )
    params = sum(p.numel() for p in hf.model.parameters())
    prompt_tokens = len(hf.tokenizer(hf.render(initial_messages(records[0])))["input_ids"])
    print(
        f"{time.strftime('%H:%M:%S')} machine: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.1f}, torch threads "
        f"{torch.get_num_threads()}; model {params / 1e6:.2f}M parameters; opening prompt {prompt_tokens} tokens"
    )

    hf.model.generate(**hf.tokenizer(["warm up"], return_tensors="pt"), max_new_tokens=2)  # first-call costs
    seq_per_conversation = None if args.shadow_only else _compare(hf, records, args.tasks)
    _shadow(hf, records, args, seq_per_conversation)


def _compare(hf: HFPolicy, records: list, n_tasks: int) -> float:
    """Batched vs one-at-a-time, teacher-forced and the model's own; returns one-at-a-time s/conversation."""
    tasks = records[:n_tasks]
    policy = TeacherForced(hf, expert_policy(records))
    seq_s, seq = _timed(lambda: [t for r in tasks for t in run_rollouts(policy, [r], k=1, seed=0)])
    bat_s, bat = _timed(lambda: run_rollouts(policy, tasks, k=1, seed=0))
    turns = sum(t.turns for t in bat)
    same = [(t.success, t.messages) for t in seq] == [(t.success, t.messages) for t in bat]
    print(f"\n[teacher-forced, {len(tasks)} tasks, {turns} turns, success {sum(t.success for t in bat)}/{len(bat)}]")
    print(
        f"one-at-a-time: {seq_s:.2f} s   batched: {bat_s:.2f} s   speed-up x{seq_s / bat_s:.2f}   "
        f"identical trials: {same}"
    )

    own_seq_s, own_seq = _timed(lambda: [t for r in tasks for t in run_rollouts(hf, [r], k=1, seed=0)])
    own_bat_s, own = _timed(lambda: run_rollouts(hf, tasks, k=1, seed=0))
    own_same = [t.messages for t in own_seq] == [t.messages for t in own]
    print(
        f"[model's own rollouts, {sum(t.turns for t in own)} turns] one-at-a-time {own_seq_s:.2f} s, "
        f"batched {own_bat_s:.2f} s, speed-up x{own_seq_s / own_bat_s:.2f}   identical trials: {own_same}"
    )
    return seq_s / len(tasks)


def _shadow(hf: HFPolicy, records: list, args: argparse.Namespace, seq_per_conversation: float | None) -> None:
    shadow = records[: args.shadow]
    policy = TeacherForced(hf, expert_policy(records), progress_s=args.progress)
    prefilled_before = hf.prefilled_tokens
    cpu_start = time.process_time()
    shadow_s, shadow_trials = _timed(lambda: run_rollouts(policy, shadow))
    cpu_s = time.process_time() - cpu_start
    per = shadow_s / len(shadow)
    shadow_turns = sum(t.turns for t in shadow_trials)
    ended = Counter(t.ended_by for t in shadow_trials)
    print(
        f"\n[shadow evaluation] ran {len(shadow)} conversations ({shadow_turns} turns, ended by {dict(ended)}, "
        f"success {sum(t.success for t in shadow_trials)}/{len(shadow)}) batched in "
        f"{shadow_s:.1f} s = {per * 1000:.0f} ms/conversation; "
        f"{hf.prefilled_tokens - prefilled_before} prompt tokens prefilled; "
        f"{cpu_s:.0f} s CPU = {cpu_s / len(shadow) * 1000:.0f} ms CPU/conversation"
    )
    if args.target > len(shadow):
        print(
            f"  extrapolated to {args.target}: {per * args.target / 60:.1f} min per policy, "
            f"{2 * per * args.target / 60:.1f} min for candidate + champion (linear: fixed batch size)"
        )
    if seq_per_conversation:
        print(
            f"  one-at-a-time would take about {seq_per_conversation * max(args.target, len(shadow)) / 60:.1f} "
            f"min per policy"
        )


if __name__ == "__main__":
    main()
