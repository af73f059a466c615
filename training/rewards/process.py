"""Process penalties: how the agent got there (the operators' playbook).

Each term counts violations in the audit log, so two violations cost twice one. Writes count
whether or not they succeeded: attempting an unjustified or unauthenticated write is the violation.
The terms read tool kinds and the record each call names (`Episode.kind_of`, `Episode.record_of`),
so they hold in any domain.
"""

from __future__ import annotations

import json

from domains.api import ToolKind
from training.rewards.core import successful_auth_users
from training.sandbox.episode import MESSAGE_KIND, AuditEntry, Episode


def _entry(tool: str, kind: str, record: tuple[str, str] | None = None, result: str = "{}") -> AuditEntry:
    """A hand-made audit entry for the examples below."""
    return AuditEntry(tool, {}, result, kind == ToolKind.WRITE, False, kind, record)


def step_order(episode: Episode) -> float:
    """Writes attempted before a successful read of the record they change (default weight -1 each).

    A write that names a record (an order, a reservation, a user) needs a successful read of that
    same record first; reading something else does not justify it. A write naming no record counts.

    >>> write = _entry("cancel", "write", ("tickets", "T1"))
    >>> read = _entry("get", "read", ("tickets", "T1"))
    >>> step_order(Episode({}, {}, [write])), step_order(Episode({}, {}, [read, write]))
    (1.0, 0.0)
    """
    violations = 0
    for index, entry in enumerate(episode.audit_log):
        if not episode.is_write(entry):
            continue
        target = episode.record_of(entry)
        if target is None:
            violations += 1
            continue
        earlier = episode.audit_log[:index]
        if not any(
            episode.kind_of(e) == ToolKind.READ and episode.record_of(e) == target and not e.error for e in earlier
        ):
            violations += 1
    return float(violations)


def skipped_verification(episode: Episode) -> float:
    """Writes attempted before the record's owner was identified (default weight -2 each).

    Identified means a successful identification call (kind `identify`) earlier in the
    conversation returned the customer who owns the record (or the customer being modified). A
    write on a record with no known owner counts unless somebody was identified: the write itself
    will fail, and the step-order and outcome terms price that. A domain without identification
    tools (its customers give their id) has nothing to skip.

    >>> auth = _entry("find", "identify", result="ann_1")
    >>> write = _entry("set_address", "write", ("users", "ann_1"))
    >>> skipped_verification(Episode({}, {}, [write])), skipped_verification(Episode({}, {}, [auth, write]))
    (1.0, 0.0)
    """
    if not episode.identifies:
        return 0.0
    violations = 0
    for index, entry in enumerate(episode.audit_log):
        if not episode.is_write(entry):
            continue
        identified = successful_auth_users(episode, episode.audit_log[:index])
        owner = episode.owner_of(episode.record_of(entry))
        if (owner is None and not identified) or (owner is not None and owner not in identified):
            violations += 1
    return float(violations)


def unauthenticated_reads(episode: Episode) -> float:
    """Reads of a customer's records before that customer was identified (weight -0.5 each).

    The policy is to authenticate before looking at a customer's records; without this term a
    read-only task (order status) would pay the same for skipping identification as for doing it.
    Reads of records that do not exist, or that belong to no customer (a product), are not
    counted: they reveal nothing about anyone.

    >>> state = {"tickets": {"T1": {"user_id": "ann_1"}}}
    >>> read = _entry("get", "read", ("tickets", "T1"))
    >>> auth = _entry("find", "identify", result="ann_1")
    >>> unauthenticated_reads(Episode(state, state, [read])), unauthenticated_reads(Episode(state, state, [auth, read]))
    (1.0, 0.0)
    """
    if not episode.identifies:
        return 0.0
    violations = 0
    for index, entry in enumerate(episode.audit_log):
        if episode.kind_of(entry) != ToolKind.READ or entry.error:
            continue
        owner = episode.owner_of(episode.record_of(entry))
        if owner is not None and owner not in successful_auth_users(episode, episode.audit_log[:index]):
            violations += 1
    return float(violations)


def looping(episode: Episode) -> float:
    """Calls repeating an earlier identical call that could not need repeating (weight -1 each).

    A repeat is looping when nothing changed in the world since the earlier call (it can only
    return what it returned), or when the earlier call was a write (it either fails or applies the
    change twice). Re-reading a record after writing to it is checking, not looping.

    >>> read = AuditEntry("get", {"ticket_id": "T1"}, "{}", False, False, "read", ("tickets", "T1"))
    >>> looping(Episode({}, {}, [read, read, read]))
    2.0
    """
    seen: set[tuple[str, str, int]] = set()
    written: set[tuple[str, str]] = set()
    version = 0
    repeats = 0
    for entry in episode.audit_log:
        kind = episode.kind_of(entry)
        if kind == ToolKind.THINK:  # thinking again changes nothing and costs nothing
            continue
        call = (entry.tool, json.dumps(entry.arguments, sort_keys=True, default=str))
        if (*call, version) in seen or call in written:
            repeats += 1
        seen.add((*call, version))
        if kind == ToolKind.WRITE:
            written.add(call)
        if entry.changed and kind != MESSAGE_KIND:
            version += 1
    return float(repeats)
