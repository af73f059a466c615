"""Why a trial failed, read from its audit log, transcript and gold; and week-over-week jumps.

Modes, checked in this priority order, the first that applies being a failed
trial's primary mode:

- `errored`: the trial raised before it could be judged (`Trial.error`); its only mode, since
  nothing else about it was observed;
- `policy_violation`: a write attempted without the owner authenticated, without a successful read
  of the record it changes, or on a record whose status does not allow it (the domain's
  `StatusRules`: in retail, cancel / modify need `pending`, return / exchange need `delivered`);
- `unnecessary_escalation`: transferred to a human when the record does not mark it necessary;
- `hallucinated_fact`: told the customer a number, id or record status that no tool result and no
  customer message contains;
- `wrong_tool`: attempted a write the gold does not make;
- `wrong_arguments`: the right write tools, but a call whose arguments match no gold call;
- `looping`: the same call repeated on an unchanged world (two repeats or more), or cut off at
  the turn limit;
- `gave_up`: ended without attempting a gold write or without telling a gold output;
- `other`: failed for none of these reasons (e.g. right calls, wrong order).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from domains.api import StatusRules, ToolKind
from domains.registry import load_domain
from training.rewards.core import gold_actions, mentions, normalise_text
from training.rewards.process import looping as repeated_calls
from training.rewards.process import skipped_verification, step_order
from training.sandbox.episode import Episode

if TYPE_CHECKING:
    from evaluation.rollout import Trial

MODES = (
    "errored",
    "policy_violation",
    "unnecessary_escalation",
    "hallucinated_fact",
    "wrong_tool",
    "wrong_arguments",
    "looping",
    "gave_up",
    "other",
)

_FACT_TOKEN = re.compile(r"[#a-z_]*\d[a-z0-9_]*(?:\.\d+)?")


@dataclass(frozen=True)
class Violation:
    """One policy violation: the audit-log position of the write, its tool, and the rule broken."""

    index: int
    tool: str
    rule: str  # "unauthenticated_write" | "write_without_read" | "ineligible_record"


def episode_violations(episode: Episode) -> list[Violation]:
    """Every policy violation in an episode, in audit-log order (the same rules as the process
    reward terms: attempting the write is the violation, whether or not it succeeded)."""
    found: list[Violation] = []
    rules = load_domain(episode.domain).status_rules
    status = _statuses(episode, rules)
    log = episode.audit_log
    for index, entry in enumerate(log):
        if not episode.is_write(entry):
            continue
        # The process terms judge one call when given a log that ends with it.
        upto = Episode(episode.initial_state, episode.final_state, log[: index + 1], domain=episode.domain)
        if skipped_verification(upto):
            found.append(Violation(index, entry.tool, "unauthenticated_write"))
        if step_order(upto):
            found.append(Violation(index, entry.tool, "write_without_read"))
        record = episode.record_of(entry)
        if rules is None or record is None or record[0] != rules.table or record[1] not in status:
            continue
        needed = rules.requires.get(entry.tool)
        if needed and status[record[1]] != needed:
            found.append(Violation(index, entry.tool, "ineligible_record"))
        if needed and not entry.error and entry.tool in rules.after:
            status[record[1]] = rules.after[entry.tool]
    return found


def _statuses(episode: Episode, rules: StatusRules | None) -> dict[str, Any]:
    if rules is None:
        return {}
    table = episode.initial_state.get(rules.table, {})
    return {rid: r.get(rules.field) for rid, r in table.items() if isinstance(r, dict)}


def _status_claim(rules: StatusRules | None) -> re.Pattern[str] | None:
    if rules is None or not rules.statuses:
        return None
    # Longest first, so "pending (item modified)" is claimed whole rather than as "pending".
    words = sorted(rules.statuses, key=len, reverse=True)
    return re.compile(
        r"\b(?:is|was|has been|now|status(?: is)?:?)\s+(?:still\s+|already\s+)?("
        + "|".join(re.escape(w) for w in words)
        + r")"
    )


def policy_violations(trial: Trial) -> list[Violation]:
    """Policy violations of a trial, successful or not (the violation gate counts these); none
    for an errored trial, whose conversation was not observed to its end."""
    return [] if trial.errored else episode_violations(trial.episode)


def _known_text(trial: Trial) -> str:
    """Everything the agent could legitimately know: tool results and the customer's words."""
    parts = [e.result for e in trial.episode.audit_log]
    parts += [str(m.get("content") or "") for m in trial.messages if m.get("role") in ("user", "tool")]
    return normalise_text("\n".join(parts))


def hallucinated_facts(trial: Trial) -> list[str]:
    """Numbers, ids and record statuses told to the customer that appear in no tool result or
    customer message. Single-digit numbers are ignored: they are counts in ordinary prose."""
    known = _known_text(trial)
    invented: list[str] = []
    claim = _status_claim(load_domain(trial.episode.domain).status_rules)
    for message in trial.episode.told:
        text = normalise_text(message)
        claims = [t for t in _FACT_TOKEN.findall(text) if len(t) > 1]
        claims += claim.findall(text) if claim is not None else []
        invented += [c for c in claims if not mentions(known, c) and c not in invented]
    return invented


def _calls(episode: Episode, actions: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (a["name"], _canonical(a.get("arguments") or {}))
        for a in actions
        if episode.kind_of_name(a["name"]) == ToolKind.WRITE
    ]


def _canonical(arguments: Mapping[str, Any]) -> dict[str, Any]:
    # Item lists are sets in effect (the environment sorts returned items): order is not an error.
    return {k: sorted(map(str, v)) if isinstance(v, list) else v for k, v in arguments.items()}


def failure_modes(trial: Trial) -> list[str]:
    """All modes that apply to a failed trial, in priority order; [] for a successful trial."""
    if trial.success:
        return []
    if trial.errored:
        return ["errored"]
    episode = trial.episode
    gold_writes = _calls(episode, gold_actions(episode))
    writes = _calls(episode, [{"name": e.tool, "arguments": e.arguments} for e in episode.audit_log])
    gold_names = {name for name, _ in gold_writes}
    modes: list[str] = []
    if episode_violations(episode):
        modes.append("policy_violation")
    if episode.transferred and episode.escalation_was_necessary is not True:
        modes.append("unnecessary_escalation")
    if hallucinated_facts(trial):
        modes.append("hallucinated_fact")
    if any(name not in gold_names for name, _ in writes):
        modes.append("wrong_tool")
    elif any(call not in gold_writes for call in writes):
        modes.append("wrong_arguments")
    if repeated_calls(episode) >= 2 or trial.ended_by == "max_turns":
        modes.append("looping")
    outputs = (episode.gold or {}).get("outputs") or []
    missing_write = bool(gold_names - {name for name, _ in writes})
    missing_output = any(not any(mentions(m, str(o)) for m in episode.told) for o in outputs)
    if not episode.transferred and (missing_write or missing_output):
        modes.append("gave_up")
    return modes or ["other"]


def primary_failure_mode(trial: Trial) -> str | None:
    """The highest-priority mode of a failed trial; None for a successful one."""
    modes = failure_modes(trial)
    return modes[0] if modes else None


def failure_mode_shares(trials: Sequence[Trial]) -> dict[str, float]:
    """Share of ALL trials whose primary failure mode is each mode (every mode listed, 0.0 when
    absent). The shares sum to the failure rate; a share is a rate, so weeks of different sizes
    compare directly."""
    if not trials:
        raise ValueError("failure-mode shares of no trials are undefined")
    counts = dict.fromkeys(MODES, 0)
    for t in trials:
        mode = primary_failure_mode(t)
        if mode is not None:
            counts[mode] += 1
    return {mode: n / len(trials) for mode, n in counts.items()}


@dataclass(frozen=True)
class ModeJump:
    """A failure mode whose share rose by more than the threshold from one week to the next."""

    mode: str
    previous: float
    current: float

    @property
    def jump(self) -> float:
        return self.current - self.previous


def compare_weeks(previous: Mapping[str, float], current: Mapping[str, float], threshold: float) -> list[ModeJump]:
    """Failure modes whose share jumped by more than `threshold` since last week.

    The rise is absolute, in points of the share of all trials (as computed by
    `failure_mode_shares`): with `GateConfig.failure_mode_jump` 0.10, current - previous > 0.10,
    strictly. A relative
    rule (x1.1) would fire on noise for rare modes (0.5% -> 0.6%) and is deliberately not used.
    A mode missing from one week counts as share 0 there.
    """
    modes = sorted(set(previous) | set(current), key=lambda m: MODES.index(m) if m in MODES else len(MODES))
    jumps = [ModeJump(m, float(previous.get(m, 0.0)), float(current.get(m, 0.0))) for m in modes]
    # Rounded: 0.4 - 0.3 is 0.10000000000000003 in floats, which must not count as above 0.10.
    return [j for j in jumps if round(j.jump, 12) > threshold]
