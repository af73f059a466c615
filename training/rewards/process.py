"""Process penalties: how the agent got there (the operators' playbook).

Each term counts violations in the audit log, so two violations cost twice one. Writes count
whether or not they succeeded: attempting an unjustified or unauthenticated write is the violation.
"""

from __future__ import annotations

import json
from typing import Any

from training.rewards.core import successful_auth_users
from training.sandbox.episode import MESSAGE_TOOL, WRITE_TOOLS, AuditEntry, Episode

USER_WRITE = "modify_user_address"


def _target(entry: AuditEntry) -> tuple[str, str] | None:
    """What a write changes: ("order", id) or ("user", id); None when the arguments name nothing."""
    if entry.tool == USER_WRITE:
        user_id = entry.arguments.get("user_id")
        return ("user", user_id) if isinstance(user_id, str) else None
    order_id = entry.arguments.get("order_id")
    return ("order", order_id) if isinstance(order_id, str) else None


def _justifying_read(target: tuple[str, str]) -> tuple[str, dict[str, Any]]:
    kind, ident = target
    return ("get_user_details", {"user_id": ident}) if kind == "user" else ("get_order_details", {"order_id": ident})


def _owner(episode: Episode, target: tuple[str, str] | None) -> str | None:
    if target is None:
        return None
    kind, ident = target
    if kind == "user":
        return ident
    order = episode.initial_state.get("orders", {}).get(ident)
    return order.get("user_id") if isinstance(order, dict) else None


def step_order(episode: Episode) -> float:
    """Writes attempted before a successful read of the record they change (default weight -1 each).

    An order write needs `get_order_details` of that order first; `modify_user_address` needs
    `get_user_details` of that user. Reading something else does not justify the write.

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> write = AuditEntry("cancel_pending_order", {"order_id": "#W1", "reason": "no longer needed"}, "{}", True, False)
    >>> step_order(Episode({}, {}, [write]))
    1.0
    """
    violations = 0
    for index, entry in enumerate(episode.audit_log):
        if entry.tool not in WRITE_TOOLS:
            continue
        target = _target(entry)
        if target is None:
            violations += 1
            continue
        tool, arguments = _justifying_read(target)
        earlier = episode.audit_log[:index]
        if not any(e.tool == tool and e.arguments == arguments and not e.error for e in earlier):
            violations += 1
    return float(violations)


def skipped_verification(episode: Episode) -> float:
    """Writes attempted before the record's owner was identified (default weight -2 each).

    Identified means a successful `find_user_id_by_email` or `find_user_id_by_name_zip` earlier in
    the conversation returned the user who owns the order (or the user being modified). A write on
    a record with no known owner counts unless somebody was identified: the write itself will fail,
    and the step-order and outcome terms price that.

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> auth = AuditEntry("find_user_id_by_email", {"email": "a@b.c"}, "ann_1", False, False)
    >>> write = AuditEntry("modify_user_address", {"user_id": "ann_1"}, "{}", True, False)
    >>> skipped_verification(Episode({}, {}, [write])), skipped_verification(Episode({}, {}, [auth, write]))
    (1.0, 0.0)
    """
    violations = 0
    for index, entry in enumerate(episode.audit_log):
        if entry.tool not in WRITE_TOOLS:
            continue
        identified = successful_auth_users(episode.audit_log[:index])
        owner = _owner(episode, _target(entry))
        if (owner is None and not identified) or (owner is not None and owner not in identified):
            violations += 1
    return float(violations)


CUSTOMER_READS = {"get_order_details": "order", "get_user_details": "user"}


def unauthenticated_reads(episode: Episode) -> float:
    """Reads of a customer's order or profile before that customer was identified (weight -0.5 each).

    The policy is to authenticate before looking at a customer's records; without this term a
    read-only task (order status) would pay the same for skipping identification as for doing it.
    Reads of records that do not exist are not counted: they reveal nothing.

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> state = {"orders": {"#W1": {"user_id": "ann_1"}}}
    >>> read = AuditEntry("get_order_details", {"order_id": "#W1"}, "{}", False, False)
    >>> auth = AuditEntry("find_user_id_by_email", {"email": "a@b.c"}, "ann_1", False, False)
    >>> unauthenticated_reads(Episode(state, state, [read])), unauthenticated_reads(Episode(state, state, [auth, read]))
    (1.0, 0.0)
    """
    violations = 0
    for index, entry in enumerate(episode.audit_log):
        kind = CUSTOMER_READS.get(entry.tool)
        if kind is None or entry.error:
            continue
        ident = entry.arguments.get("order_id" if kind == "order" else "user_id")
        owner = _owner(episode, (kind, ident)) if isinstance(ident, str) else None
        if owner is not None and owner not in successful_auth_users(episode.audit_log[:index]):
            violations += 1
    return float(violations)


def looping(episode: Episode) -> float:
    """Calls repeating an earlier identical call that could not need repeating (weight -1 each).

    A repeat is looping when nothing changed in the world since the earlier call (it can only
    return what it returned), or when the earlier call was a write (it either fails or applies the
    change twice). Re-reading an order after writing to it is checking, not looping.

    >>> from training.sandbox.episode import AuditEntry, Episode
    >>> read = AuditEntry("get_order_details", {"order_id": "#W1"}, "{}", False, False)
    >>> looping(Episode({}, {}, [read, read, read]))
    2.0
    """
    seen: set[tuple[str, str, int]] = set()
    written: set[tuple[str, str]] = set()
    version = 0
    repeats = 0
    for entry in episode.audit_log:
        if entry.tool == "think":
            continue
        call = (entry.tool, json.dumps(entry.arguments, sort_keys=True, default=str))
        if (*call, version) in seen or call in written:
            repeats += 1
        seen.add((*call, version))
        if entry.tool in WRITE_TOOLS:
            written.add(call)
        if entry.changed and entry.tool != MESSAGE_TOOL:
            version += 1
    return float(repeats)
