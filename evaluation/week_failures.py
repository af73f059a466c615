"""What the production agent failed in a week's window, and which intents open incidents point at:
the evidence the week's GRPO mix is weighted by (`training.curriculum.week_mix`).

Every training-split conversation that carries gold is replayed and judged as the live watch and
the review export judge it (`evaluation.replay.judge_record`); its primary failure mode
(`evaluation.failure_modes`) is counted per intent, per curriculum level (`level_of`) and per
customer persona, the conversations that met a back-end fault (a recorded `INJECTED_ERROR`) are
counted apart, and the ids of the failed ones are kept: the tasks the week draws more of. A
conversation without gold is not counted: nothing certifies whether it succeeded. Only the
training split is read, so a held-out customer's conversation never steers what is trained.

An incident has no closing state in the incident folder, so "open" for a week means filed during
that week, or naming the champion the week starts from. It points at the intents its evidence
names (`intent` or `intents`), and, for a tool-mix drift (`tool_mix` against `evaluated_mix`), at
the intents whose gold calls a tool whose served share rose.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from typing import Any

from evaluation.failure_modes import primary_failure_mode
from evaluation.replay import ReplayError, judge_record
from training.curriculum import LevelRules, level_of, persona_of
from training.fields import as_dict
from training.rewards import GoldError
from training.sandbox.core import INJECTED_ERROR


@dataclass(frozen=True)
class WindowFailures:
    """Judged conversations and their failures, per intent, per level and per primary mode;
    `skipped` counts those that could not be replayed."""

    judged: int
    judged_by_intent: dict[str, int]
    failed_by_intent: dict[str, int]
    failed_by_level: dict[str, int]
    modes: dict[str, int]
    skipped: int = 0
    policy_versions: dict[str, int] = field(default_factory=dict)
    judged_by_persona: dict[str, int] = field(default_factory=dict)
    failed_by_persona: dict[str, int] = field(default_factory=dict)
    faulted_judged: int = 0  # judged conversations in which a back-end call failed
    faulted_failed: int = 0
    failed_ids: frozenset[str] = frozenset()

    def to_dict(self) -> dict[str, Any]:
        return {
            "judged": self.judged,
            "judged_by_intent": dict(self.judged_by_intent),
            "failed_by_intent": dict(self.failed_by_intent),
            "failed_by_level": dict(self.failed_by_level),
            "modes": dict(self.modes),
            "skipped": self.skipped,
            "policy_versions": dict(self.policy_versions),
            "judged_by_persona": dict(self.judged_by_persona),
            "failed_by_persona": dict(self.failed_by_persona),
            "faulted_judged": self.faulted_judged,
            "faulted_failed": self.faulted_failed,
            "failed_tasks": len(self.failed_ids),
        }


def window_failures(records: Iterable[Mapping[str, Any]], rules: LevelRules = LevelRules()) -> WindowFailures:
    """Judge every record with gold (see the module docstring)."""
    judged: Counter[str] = Counter()
    failed: Counter[str] = Counter()
    levels: Counter[str] = Counter()
    modes: Counter[str] = Counter()
    versions: Counter[str] = Counter()
    personas_judged: Counter[str] = Counter()
    personas_failed: Counter[str] = Counter()
    faults: Counter[str] = Counter()
    failed_ids: set[str] = set()
    skipped = 0
    for record in records:
        if not as_dict(record.get("gold")):
            continue
        try:
            trial = judge_record(record).trial
        except (ReplayError, GoldError):
            skipped += 1
            continue
        if trial is None:
            continue
        intent, persona, faulted = str(record.get("intent", "other")), persona_of(record), met_fault(record)
        judged[intent] += 1
        personas_judged[persona] += 1
        faults["judged"] += faulted
        versions[str(record.get("policy_version", ""))] += 1
        mode = primary_failure_mode(trial)
        if mode is not None:
            failed[intent] += 1
            levels[str(level_of(record, rules))] += 1
            modes[mode] += 1
            personas_failed[persona] += 1
            faults["failed"] += faulted
            failed_ids.add(str(record.get("interaction_id", "")))
    return WindowFailures(
        sum(judged.values()),
        dict(judged),
        dict(failed),
        dict(levels),
        dict(modes),
        skipped,
        dict(versions),
        dict(personas_judged),
        dict(personas_failed),
        faults["judged"],
        faults["failed"],
        frozenset(failed_ids),
    )


def met_fault(record: Mapping[str, Any]) -> bool:
    """Whether a back-end call of the recorded conversation failed (served traffic's tool faults)."""
    messages = record.get("messages")
    return isinstance(messages, list) and any(
        isinstance(m, Mapping) and m.get("role") == "tool" and m.get("content") == INJECTED_ERROR for m in messages
    )


def _filed_in(incident: Mapping[str, Any], week: str) -> bool:
    monday = date.fromisoformat(week)
    monday -= timedelta(days=monday.weekday())
    try:
        filed = datetime.fromisoformat(str(incident.get("created_at"))).date()
    except ValueError:
        return False
    return monday <= filed < monday + timedelta(days=7)


def open_incidents(
    incidents: Iterable[Mapping[str, Any]], week: str, champion: str | None = None
) -> list[Mapping[str, Any]]:
    """The incidents open for `week` (a partition key, YYYY-MM-DD): filed during it, or naming
    `champion` (the served name, `model/version`) in their evidence."""
    out = []
    for incident in incidents:
        evidence = incident.get("evidence") or {}
        if _filed_in(incident, week) or (champion is not None and evidence.get("champion") == champion):
            out.append(incident)
    return out


def _risen_tools(evidence: Mapping[str, Any]) -> set[str]:
    served, evaluated = evidence.get("tool_mix"), evidence.get("evaluated_mix")
    if not isinstance(served, Mapping) or not isinstance(evaluated, Mapping):
        return set()
    return {tool for tool, share in served.items() if float(share) > float(evaluated.get(tool, 0.0))}


def incident_intents(incidents: Sequence[Mapping[str, Any]], records: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """How many of `incidents` point at each intent of `records` (see the module docstring)."""
    tools_of: dict[str, set[str]] = {}
    for record in records:
        gold = as_dict(record.get("gold")) or {}
        calls = {str(a.get("name")) for a in gold.get("actions") or ()}
        tools_of.setdefault(str(record.get("intent", "other")), set()).update(calls)
    counts: Counter[str] = Counter()
    for incident in incidents:
        evidence = incident.get("evidence") or {}
        named = evidence.get("intents") or ([evidence["intent"]] if evidence.get("intent") else [])
        risen = _risen_tools(evidence)
        pointed = {str(i) for i in named} | {i for i, tools in tools_of.items() if tools & risen}
        counts.update(i for i in pointed if i in tools_of)
    return dict(counts)
