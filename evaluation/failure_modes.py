"""Why a trial failed, read from its audit log, transcript and gold; and week-over-week jumps.

Modes, checked in this priority order, the first that applies being a failed
trial's primary mode:

- `policy_violation`: a write attempted without the owner authenticated, without a successful read
  of the record it changes, or on an order whose status does not allow it (cancel / modify need
  `pending`; return / exchange need `delivered`);
- `unnecessary_escalation`: transferred to a human when the record does not mark it necessary;
- `hallucinated_fact`: told the customer a number, id or order status that no tool result and no
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

from training.rewards.core import gold_actions, mentions, normalise_text, successful_auth_users
from training.rewards.process import looping as repeated_calls
from training.sandbox.episode import WRITE_TOOLS, AuditEntry, Episode

if TYPE_CHECKING:
    from evaluation.rollout import Trial

MODES = (
    "policy_violation",
    "unnecessary_escalation",
    "hallucinated_fact",
    "wrong_tool",
    "wrong_arguments",
    "looping",
    "gave_up",
    "other",
)
JUMP_THRESHOLD = 0.10

_NEEDS_STATUS = {
    "cancel_pending_order": "pending",
    "modify_pending_order_address": "pending",
    "modify_pending_order_items": "pending",
    "modify_pending_order_payment": "pending",
    "return_delivered_order_items": "delivered",
    "exchange_delivered_order_items": "delivered",
}
_STATUS_AFTER = {
    "cancel_pending_order": "cancelled",
    "modify_pending_order_items": "pending (item modified)",
    "return_delivered_order_items": "return requested",
    "exchange_delivered_order_items": "exchange requested",
}
_STATUSES = (
    "pending (item modified)",
    "return requested",
    "exchange requested",
    "pending",
    "processed",
    "delivered",
    "cancelled",
)
_STATUS_CLAIM = re.compile(
    r"\b(?:is|was|has been|now|status(?: is)?:?)\s+(?:still\s+|already\s+)?("
    + "|".join(re.escape(s) for s in _STATUSES)
    + r")"
)
_FACT_TOKEN = re.compile(r"[#a-z_]*\d[a-z0-9_]*(?:\.\d+)?")


@dataclass(frozen=True)
class Violation:
    """One policy violation: the audit-log position of the write, its tool, and the rule broken."""

    index: int
    tool: str
    rule: str  # "unauthenticated_write" | "write_without_read" | "ineligible_order"


def _owner(episode: Episode, entry: AuditEntry) -> str | None:
    if entry.tool == "modify_user_address":
        return entry.arguments.get("user_id")
    order = episode.initial_state.get("orders", {}).get(entry.arguments.get("order_id"))
    return order.get("user_id") if isinstance(order, dict) else None


def _was_read(earlier: Sequence[AuditEntry], entry: AuditEntry) -> bool:
    if entry.tool == "modify_user_address":
        want = ("get_user_details", {"user_id": entry.arguments.get("user_id")})
    else:
        want = ("get_order_details", {"order_id": entry.arguments.get("order_id")})
    return any((e.tool, e.arguments) == want and not e.error for e in earlier)


def episode_violations(episode: Episode) -> list[Violation]:
    """Every policy violation in an episode, in audit-log order (the same rules as the process
    reward terms: attempting the write is the violation, whether or not it succeeded)."""
    found: list[Violation] = []
    status = {oid: o.get("status") for oid, o in episode.initial_state.get("orders", {}).items() if isinstance(o, dict)}
    log = episode.audit_log
    for index, entry in enumerate(log):
        if entry.tool not in WRITE_TOOLS:
            continue
        owner = _owner(episode, entry)
        identified = successful_auth_users(log[:index])
        if (owner is None and not identified) or (owner is not None and owner not in identified):
            found.append(Violation(index, entry.tool, "unauthenticated_write"))
        if not _was_read(log[:index], entry):
            found.append(Violation(index, entry.tool, "write_without_read"))
        order_id = entry.arguments.get("order_id")
        needed = _NEEDS_STATUS.get(entry.tool)
        if needed and order_id in status and status[order_id] != needed:
            found.append(Violation(index, entry.tool, "ineligible_order"))
        if needed and order_id in status and not entry.error and entry.tool in _STATUS_AFTER:
            status[order_id] = _STATUS_AFTER[entry.tool]
    return found


def policy_violations(trial: Trial) -> list[Violation]:
    """Policy violations of a trial, successful or not (the violation gate counts these)."""
    return episode_violations(trial.episode)


def _known_text(trial: Trial) -> str:
    """Everything the agent could legitimately know: tool results and the customer's words."""
    parts = [e.result for e in trial.episode.audit_log]
    parts += [str(m.get("content") or "") for m in trial.messages if m.get("role") in ("user", "tool")]
    return normalise_text("\n".join(parts))


def hallucinated_facts(trial: Trial) -> list[str]:
    """Numbers, ids and order statuses told to the customer that appear in no tool result or
    customer message. Single-digit numbers are ignored: they are counts in ordinary prose."""
    known = _known_text(trial)
    invented: list[str] = []
    for message in trial.episode.told:
        text = normalise_text(message)
        claims = [t for t in _FACT_TOKEN.findall(text) if len(t) > 1]
        claims += _STATUS_CLAIM.findall(text)
        invented += [c for c in claims if not mentions(known, c) and c not in invented]
    return invented


def _calls(actions: Sequence[Mapping[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(a["name"], _canonical(a.get("arguments") or {})) for a in actions if a["name"] in WRITE_TOOLS]


def _canonical(arguments: Mapping[str, Any]) -> dict[str, Any]:
    # Item lists are sets in effect (the environment sorts returned items): order is not an error.
    return {k: sorted(map(str, v)) if isinstance(v, list) else v for k, v in arguments.items()}


def failure_modes(trial: Trial) -> list[str]:
    """All modes that apply to a failed trial, in priority order; [] for a successful trial."""
    if trial.success:
        return []
    episode = trial.episode
    gold_writes = _calls(gold_actions(episode))
    writes = _calls([{"name": e.tool, "arguments": e.arguments} for e in episode.audit_log])
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


def compare_weeks(
    previous: Mapping[str, float], current: Mapping[str, float], threshold: float = JUMP_THRESHOLD
) -> list[ModeJump]:
    """Failure modes whose share jumped by more than `threshold` since last week.

    "More than 10%" means an absolute rise of more than 10 percentage points in the share of all
    trials (as computed by `failure_mode_shares`): current - previous > 0.10, strictly. A relative
    rule (x1.1) would fire on noise for rare modes (0.5% -> 0.6%) and is deliberately not used.
    A mode missing from one week counts as share 0 there.
    """
    modes = sorted(set(previous) | set(current), key=lambda m: MODES.index(m) if m in MODES else len(MODES))
    jumps = [ModeJump(m, float(previous.get(m, 0.0)), float(current.get(m, 0.0))) for m in modes]
    # Rounded: 0.4 - 0.3 is 0.10000000000000003 in floats, which must not count as above 0.10.
    return [j for j in jumps if round(j.jump, 12) > threshold]
