"""The week's supervised step on its good episodes, before GRPO: the policy imitates what worked.

The episodes are the window's training-split conversations whose recorded tool calls replay as a
verified success (`training.sft.turns_until_done`), unless a person labelled the conversation a
failure (`human_label.task_success` false). Each is imitated only up to where its work was done
(`worth_imitating`), and only when the environment refused none of the agent's calls on the way:
a success is verified by the world's state and what the customer was told, so it can carry
turns that did nothing. Measured on the shipped agent's demo week: 47% of its 76 served
successes in 100 conversations went on after the work (messages naming other orders, malformed
calls), and a step on them whole taught those tails: the stepped policy's malformed calls went
from 16 to 222 in the same 100 served conversations, its tool calls per conversation from 4.2 to
8.1. The episodes are rendered in the form the week's GRPO and evaluation use: at curriculum
level 1 the task's level-1 opening (`Domain.as_level1`) followed by the assistant's recorded
calls, so the step never trains on a prompt the policy is not judged on.
A conversation the agent handed over and a person then finished (the record's `handoff`) is an
episode too when the person completed it: the agent's part without the hand-over, then the
person's turns as the assistant's (`training.traffic.handoff.resolved_demonstration`), replayed
and verified like any other; at curriculum level 1 it is restated as the domain's level-1
demonstration of its task, the form the level's agent is built on (`_in_level_form`). That is
how an intent the agent hands over this week becomes one it handles next week. A hand-over the
task's gold asks for (a request no tool serves) is the agent's own success instead: its part,
hand-over included, is the episode (`_tasks_taught`).

The step is `training.sft.warm_start` with few steps and a small learning rate: it nudges a policy
that can already act rather than teaching it the format. Below `min_episodes` it is skipped, and
the summary says why. The folder is written once per run: a retry of the run (same folder) reads
the summary back instead of training again.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dataplane.settings import setting
from dataplane.splits import DEFAULT_FRACTIONS, split_of
from domains.api import ToolKind
from domains.registry import load_domain
from training.curriculum import compact_at
from training.fields import as_dict
from training.sandbox.core import INJECTED_ERROR
from training.sandbox.episode import MESSAGE_TOOL
from training.sandbox.prompting import domain_of
from training.sft import SFTSettings, UnreplayableError, turns_until_done, warm_start
from training.traffic.handoff import resolved_demonstration

SUMMARY_FILE = "episode_update.json"
SOURCES = ("model", "any")


@dataclass(frozen=True)
class EpisodeUpdateSettings:
    """The supervised step on the window's good episodes that starts each weekly update."""

    enabled: bool = setting(True, "SFT on the window's verified-successful train-split episodes before GRPO")
    # 20 steps of 8 at 1e-4 (GRPO's own rate) move a tiny policy that already acts without
    # undoing it, in about 10 s on 2 cores; the 1e-3 of the warm start teaches a format from nothing.
    steps: int = setting(20, "optimizer steps of the supervised step")
    batch_size: int = setting(8, "episodes per optimizer step")
    learning_rate: float = setting(1e-4, "peak learning rate of the supervised step (cosine schedule)")
    # Fewer episodes than two batches would be imitated over and over within 20 steps: that
    # memorises a few customers rather than showing what works.
    min_episodes: int = setting(16, "fewest good episodes worth a step; below it the step is skipped and says so")
    # The tiny policy copies identifiers only when it never sees the same one twice
    # (training.tiny.relabel); a real model needs no relabelling.
    relabel: bool = setting(True, "train on relabelled copies of the episodes (fresh identifiers in every one)")
    # A real model's step belongs on its GPU (the presets set it false); the tiny one trains faster
    # on the CPU.
    use_cpu: bool = setting(True, "run the supervised step on the CPU even when an accelerator is present")
    # A scripted agent's successes are not in the policy's own form: on the demo's window (legacy
    # rules-agent traffic beside the served weeks) the step's loss on them stayed at 7-8 nats a
    # token, against 0.02 on the policy's own demonstrations, and the candidate it started lost
    # about a fifth of its shadow success. Imitating the policy's own successes (and what a person
    # finished after its hand-overs) is the offline update on real episodes without that shift.
    source: str = setting(
        "model",
        "whose successes are imitated: 'model' (conversations a version of the registered model served, "
        "and what a person finished after its hand-over) or 'any' (every conversation, scripted agents' too)",
    )

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"episodes_source must be one of {list(SOURCES)}, got {self.source!r}")


@dataclass(frozen=True)
class EpisodeUpdate:
    """What the step did: the policy GRPO starts from (the base when skipped), and its counts."""

    model_path: str
    episodes: int
    candidates: int
    steps: int
    train_loss: float | None = None
    seconds: float = 0.0
    skipped: str | None = None
    # Records left out because their world could not start a conversation (`UnreplayableError`).
    unreplayable: int = 0

    def metrics(self) -> dict[str, float]:
        out = {
            "sft/episodes": float(self.episodes),
            "sft/candidates": float(self.candidates),
            "sft/steps": float(self.steps),
            "sft/seconds": self.seconds,
            "sft/unreplayable": float(self.unreplayable),
        }
        if self.train_loss is not None:
            out["sft/train_loss"] = self.train_loss
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _in_level_form(record: Mapping[str, Any], level: int, resolved: bool = False) -> dict[str, Any] | None:
    """The record as a task of `level` with its recorded turns after the opening; None when the
    level has no form of it (a record level 1 cannot restate).

    `resolved`: the record is a person's completed resolution of a hand-over. At level 1 it is
    restated as the domain's level-1 demonstration of its task: the same calls the person made to
    complete it (the task's gold, which the person's part verified), in the form the level's agent
    is built and judged on. The desk's own turns (a greeting, a proposal awaiting the customer's
    yes, a closing) are a form the level-1 agent never writes: on the tiny agent the step's loss on
    them was 4.9 nats a token and it stopped handing cancellations over without learning to make
    them (0 of 51 held-out cancellations), where the same records restated took it to 27 of 51
    (`bench/handover_learning.py`)."""
    if level != 1:
        return dict(record)
    domain = load_domain(domain_of(dict(record)))
    task = domain.as_level1(record)
    if task is None:
        return None
    if resolved:
        return domain.level1_demonstration(task)
    messages = list(record.get("messages") or ())
    opening = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    return {**task, "messages": list(task["messages"]) + messages[opening + 1 :]}


def _labelled_failure(record: Mapping[str, Any]) -> bool:
    label = as_dict(record.get("human_label")) or {}
    return label.get("task_success") is False


def served_by(record: Mapping[str, Any], model_name: str) -> bool:
    """Whether a version of the registered model `model_name` served the record (`policy_version`
    is `<model_name>/<version>`)."""
    return str(record.get("policy_version", "")).startswith(f"{model_name}/")


def good_episodes(
    records: Iterable[Mapping[str, Any]],
    level: int,
    tools: tuple[str, ...] | None = None,
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    model_name: str | None = None,
    unreplayable: list[str] | None = None,
) -> list[dict[str, Any]]:
    """The training-split records (by `fractions`, `dataplane.splits`) whose conversation, in
    `level`'s form with `tools` offered, replays as a verified success (see the module docstring);
    with `model_name`, only those a version of that registered model served. The split is checked
    here again, so a held-out customer never reaches the step even when a caller hands over the
    whole window. A record whose world cannot start a conversation is no episode; its id is
    appended to `unreplayable` when given."""
    out = []
    for record in records:
        if not as_dict(record.get("gold")) or _labelled_failure(record):
            continue
        if model_name is not None and not served_by(record, model_name):
            continue
        if split_of(str(record.get("customer_id", "")), fractions) != "train":
            continue
        try:
            episode = next(
                (e for task in _tasks_taught(record, level) if (e := worth_imitating(task, tools)) is not None), None
            )
        except UnreplayableError:
            if unreplayable is not None:
                unreplayable.append(str(record.get("interaction_id", "?")))
            continue
        if episode is not None:
            out.append(episode)
    return out


def _tasks_taught(record: Mapping[str, Any], level: int) -> Iterable[dict[str, Any]]:
    """What `record` may teach, in `level`'s form, best first; the first that verifies is imitated.

    A conversation the agent kept: itself. One it handed over: the agent's own part, when the
    task's gold asks for that hand-over (a request no tool serves, which a person must take: the
    hand-over is the agent's success, and a step that never saw one unlearnt it: at 300 steps of
    1e-3 on a week's whole-shop episodes the agent stopped handing over and failed every such
    request, `bench/results/shipped_agent.md`); else what the person finished, when they completed it."""
    handoff = record.get("handoff")
    if not handoff:
        task = _in_level_form(record, level)
        if task is not None:
            yield task
        return
    if gold_hands_over(record):
        own = {k: v for k, v in record.items() if k != "handoff"}
        task = _in_level_form(
            {**own, "messages": list(record.get("messages") or ())[: int(handoff["at_message"])]}, level
        )
        if task is not None:
            yield task
    if handoff.get("outcome") != "completed":
        return
    # At level 1 the person's turns are restated from the task, so they are not rebuilt here.
    taught = record["messages"] if level == 1 else resolved_demonstration(record)
    task = _in_level_form({**record, "messages": taught}, level, resolved=True)
    if task is not None:
        task.pop("handoff", None)
        yield task


def gold_hands_over(record: Mapping[str, Any]) -> bool:
    """Whether the record's gold hands the conversation to a person (one of its domain's
    hand-over tools among the gold's calls)."""
    hand_over = set(load_domain(domain_of(dict(record))).tool_names(ToolKind.HAND_OVER))
    actions = (as_dict(record.get("gold")) or {}).get("actions") or ()
    return any(isinstance(a, Mapping) and a.get("name") in hand_over for a in actions)


def _refused(message: Mapping[str, Any]) -> bool:
    """A tool result refusing the agent's own call (a back-end fault the environment injected is
    not the agent's doing: retrying it is the behaviour to learn)."""
    content = str(message.get("content") or "")
    return message.get("role") == "tool" and content.startswith("Error") and content != INJECTED_ERROR


def worth_imitating(task: Mapping[str, Any], tools: tuple[str, ...] | None = None) -> dict[str, Any] | None:
    """The verified-successful `task` cut where its work was done, or None when it never verifies
    or the agent made a call the environment refused on the way (see the module docstring)."""
    done = turns_until_done(task, tools=tools)
    if done is None:
        return None
    turns, trajectory = done
    if any(_refused(m) for m in trajectory):
        return None
    messages = list(task.get("messages") or ())
    opening = next((i for i, m in enumerate(messages) if m.get("role") == "user"), len(messages))
    kept, seen, told = messages[: opening + 1], 0, False
    for message in messages[opening + 1 :]:
        if message.get("role") == "assistant":
            calls = message.get("tool_calls") or ()
            if seen >= turns:
                # After the work: the customer is told once (a write's confirmation, when the work
                # itself said nothing), and the agent's own closing words are kept; anything else
                # it did is not (the replay closes a conversation cut on a tool call).
                if not calls:
                    kept.append(message)
                    break
                if told or any(c.get("name") != MESSAGE_TOOL for c in calls):
                    break
            seen += 1
            told = told or any(c.get("name") == MESSAGE_TOOL for c in calls)
        kept.append(message)
    return {**task, "messages": kept}


def step_settings(
    settings: EpisodeUpdateSettings,
    level: int,
    tools: tuple[str, ...] | None = None,
    seed: int = 0,
    torch_threads: int | None = None,
) -> SFTSettings:
    """The warm start's settings for the step at curriculum `level` (`bench/handover_learning.py`
    trains other episodes with exactly these)."""
    return SFTSettings(
        steps=settings.steps,
        batch_size=settings.batch_size,
        learning_rate=settings.learning_rate,
        seed=seed,
        tools=tools,
        relabel=settings.relabel,
        torch_threads=torch_threads,
        # As the level's GRPO rows render tool results (training.curriculum.task_row).
        compact=compact_at(level),
        use_cpu=settings.use_cpu,
    )


def _skipped(base: str, episodes: int, candidates: int, why: str) -> EpisodeUpdate:
    return EpisodeUpdate(str(base), episodes, candidates, 0, skipped=why)


def episode_update(
    base: str | Path,
    records: Iterable[Mapping[str, Any]],
    out: Path,
    settings: EpisodeUpdateSettings,
    level: int,
    tools: tuple[str, ...] | None = None,
    seed: int = 0,
    torch_threads: int | None = None,
    log: Callable[[str], None] = print,
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    model_name: str | None = None,
) -> EpisodeUpdate:
    """SFT `base` on the good episodes among `records` (training split) into `out`; the policy
    GRPO should start from and what was done. `out` already holding a summary: that one.
    `settings.source` "model" imitates only what a version of the registered model `model_name` served."""
    if settings.source == "model" and model_name is None:
        raise ValueError("episodes_source 'model' needs the registered model's name (model_name)")
    summary = out / SUMMARY_FILE
    if summary.exists():
        return EpisodeUpdate(**json.loads(summary.read_text()))
    records = list(records)
    candidates = sum(1 for r in records if as_dict(r.get("gold")))
    if not settings.enabled:
        return _skipped(str(base), 0, candidates, "disabled (episodes_enabled is false)")
    refused: list[str] = []
    episodes = good_episodes(
        records, level, tools, fractions, model_name if settings.source == "model" else None, unreplayable=refused
    )
    if refused:
        log(f"{len(refused)} records left out: their world cannot start a conversation (first: {refused[0]})")
    if len(episodes) < max(settings.min_episodes, 1):
        why = f"{len(episodes)} good episodes, fewer than episodes_min_episodes {settings.min_episodes}"
        log(f"supervised step skipped: {why}")
        return replace(_skipped(str(base), len(episodes), candidates, why), unreplayable=len(refused))
    sft = step_settings(settings, level, tools, seed, torch_threads)
    log(f"supervised step on {len(episodes)} good episodes of {candidates} ({settings.steps} steps)")
    started = time.monotonic()
    done = warm_start(base, episodes, out, sft)
    result = EpisodeUpdate(
        str(out),
        len(episodes),
        candidates,
        settings.steps,
        done["train_loss"],
        round(time.monotonic() - started, 1),
        unreplayable=len(refused),
    )
    summary.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True))
    return result
