"""The machinery under RetailEnvironment: one checked entry point for every tool call.

TRL's GRPOTrainer (environment_factory) lists the environment class's public functions with
`inspect.getmembers(type(env), inspect.isfunction)`, skips names starting with `_`, treats
`reset` and `get_reward` specially and exposes the rest as tools, calling them as
`method(**arguments)` with whatever the model generated. So this base class defines only
`reset`, properties and private names, and the `tool` decorator routes every tool
method (whether TRL calls it, `call_tool` dispatches it, or a test calls it) through `_invoke`:
allow-list, argument check, the transfer guard, the audit entry, and change detection.
"""

from __future__ import annotations

import functools
import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from training.customers import make_simulator
from training.sandbox import tools_read as reads
from training.sandbox.episode import AUTH_TOOLS, AuditEntry, Episode
from training.sandbox.tool_args import ArgumentError, ParamSpec, check_arguments, param_spec, preview
from training.sandbox.world import COLLECTIONS, copy_json, validate_world

TRANSFERRED_ERROR = "Error: the conversation was transferred to a human agent; no further tool calls"
INJECTED_ERROR = "Error: the retail system timed out; please try again"
# Calls that can suffer an injected outage: the ones that reach the (imagined) order system.
_OUTAGE_EXEMPT = frozenset({"think", "calculate", "send_message_to_customer", "transfer_to_human_agents"})


class EnvironmentSetupError(ValueError):
    """A dataset row that cannot start an episode (missing or malformed initial_state, ...)."""


@dataclass(frozen=True)
class ToolInfo:
    """A tool method's undecorated body, its parameters, and whether it writes the world."""

    fn: Callable[..., str]
    spec: ParamSpec
    writes: bool


def tool(writes: bool = False) -> Callable[[Callable[..., str]], Callable[..., str]]:
    """Make a method a checked tool; the signature and docstring stay visible for the schema."""

    def decorate(fn: Callable[..., str]) -> Callable[..., str]:
        info = ToolInfo(fn, param_spec(fn), writes)

        @functools.wraps(fn)
        def method(self: EnvironmentCore, *args: Any, **kwargs: Any) -> str:
            if args:  # positional use from Python code: name them, refuse what does not fit
                if len(args) > len(info.spec.names) or any(n in kwargs for n in info.spec.names[: len(args)]):
                    return self._refuse(
                        fn.__name__,
                        {"args": preview(list(args)), **preview(kwargs)},
                        f"Error: positional arguments do not fit tool {fn.__name__}",
                    )
                kwargs = {**dict(zip(info.spec.names, args)), **kwargs}
            return self._invoke(fn.__name__, kwargs)

        method._tool_info = info  # type: ignore[attr-defined]
        return method

    return decorate


def _as_object(value: Any, field: str) -> Any:
    """Dataset rows may carry nested objects as JSON text (DuckDB, Arrow); accept both."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise EnvironmentSetupError(f"{field} is not valid JSON: {exc}") from exc
    return value


class EnvironmentCore:
    """State, audit log and dispatch shared by every tool; see RetailEnvironment for the tools."""

    _TOOLS: dict[str, ToolInfo] = {}  # filled by the subclass once its tools are defined

    def __init__(self) -> None:
        # Fixed per class (its offered tools), so worked out once rather than on every result.
        self._offers_ids = any(reads.ID_ARGUMENTS.intersection(info.spec.names) for info in self._TOOLS.values())
        self._state: dict[str, Any] = {"users": {}, "orders": {}, "products": {}}
        self._initial: dict[str, Any] = copy_json(self._state)
        self._audit: list[AuditEntry] = []
        self._told: list[str] = []
        self._transferred = False
        self._gold: dict[str, Any] | None = None
        self._escalation: bool | None = None
        self._compact = False
        self._target: str | None = None
        self._simulator: Any = None
        self._owned: set[tuple[str, str]] | None = None  # copy-on-write bookkeeping, None = all owned
        self._outage_at: int | None = None  # which system call fails, when errors are injected
        self._system_calls = 0

    def reset(self, **row: Any) -> None:
        """Start a new conversation from one dataset row (TRL passes the whole row).

        Reads `initial_state` (dict or JSON text, required), `user_scenario`, `gold`, `seed`,
        `escalation_was_necessary`, `compact`, `simulator` (a ready CustomerSimulator) and
        `customer_id` / `user_id`; every other key (`prompt`, ...) is ignored. The state is
        deep-copied, so the row is never modified. Returns None: the prompt stays as it is.
        `inject_tool_errors` (curriculum level 3) makes one of the first three calls that reach
        the order system, chosen by `seed`, fail with a retryable Error and change nothing, so
        the policy learns to recover.
        """
        state = _as_object(row.get("initial_state"), "initial_state")
        if state is None:
            raise EnvironmentSetupError("reset() needs initial_state: {'users', 'orders', 'products'}")
        self._load(state, keep_initial=True)
        self._gold = copy_json(_as_object(row.get("gold"), "gold"))
        self._escalation = row.get("escalation_was_necessary")
        self._compact = bool(row.get("compact", False))
        if row.get("inject_tool_errors"):
            # a private generator: the global one belongs to the trainer
            self._outage_at = random.Random(int(row.get("seed") or 0)).randint(1, 3)
        target = row.get("customer_id", row.get("user_id"))
        self._target = target if isinstance(target, str) else None
        self._simulator = row.get("simulator")
        scenario = _as_object(row.get("user_scenario"), "user_scenario")
        if self._simulator is None and scenario:
            self._simulator = make_simulator(scenario, seed=int(row.get("seed") or 0))
            # The prompt already holds this opening (built from the same scenario and seed);
            # asking for it keeps this simulator's turn state in step with that conversation.
            self._simulator.opening_message()
        return None

    def _load(self, state: Any, keep_initial: bool, share_unchanged: bool = False) -> None:
        """Install `state`; with `share_unchanged`, records are copied only when first written.

        Copy-on-write is what makes replaying against the full world cheap (a write touches one
        order and one user of 1,500 records); the caller's records are never mutated either way.
        """
        validate_world(state)
        if share_unchanged:
            self._state = {key: dict(value) if key in COLLECTIONS else copy_json(value) for key, value in state.items()}
            self._owned: set[tuple[str, str]] | None = set()
        else:
            self._state = copy_json(state)
            self._owned = None
        self._initial = copy_json(state) if keep_initial else {}
        self._audit, self._told = [], []
        self._transferred = False
        self._gold, self._escalation, self._target, self._simulator = None, None, None, None
        self._compact = False
        self._outage_at, self._system_calls = None, 0

    # ---- read-only views (properties, so TRL does not mistake them for tools) ----
    @property
    def state(self) -> dict[str, Any]:
        """The live world: {"users", "orders", "products"}."""
        return self._state

    @property
    def audit_log(self) -> list[AuditEntry]:
        return list(self._audit)

    @property
    def told(self) -> list[str]:
        """Every message the agent sent to the customer, in order."""
        return list(self._told)

    @property
    def simulator(self) -> Any:
        return self._simulator

    @property
    def done(self) -> bool:
        """Transferred to a human, or the simulated customer has finished."""
        return self._transferred or bool(getattr(self._simulator, "finished", False))

    @property
    def episode(self) -> Episode:
        """A snapshot of the conversation so far for rewards and metrics (copies, not views)."""
        sentiment = float(getattr(self._simulator, "sentiment_delta", 0.0)) if self._simulator is not None else 0.0
        return Episode(
            initial_state=copy_json(self._initial),
            final_state=copy_json(self._state),
            audit_log=list(self._audit),
            told=list(self._told),
            gold=copy_json(self._gold),
            escalation_was_necessary=self._escalation,
            sentiment_delta=sentiment,
            user_id=self._customer_id(),
        )

    def _customer_id(self) -> str | None:
        """The row's customer; else the only user of the initial state; else the last one found."""
        if self._target is not None:
            return self._target
        if len(self._initial.get("users", {})) == 1:
            return next(iter(self._initial["users"]))
        for entry in reversed(self._audit):
            if entry.tool in AUTH_TOOLS and not entry.error:
                return entry.result
        return None

    # ---- results ----
    def _render(self, kind: str, found: Any) -> str:
        """A record as a tool result: full JSON, or compact when reset asked for it (orders then
        carry item and payment ids only if some offered tool takes one: `reads.ID_ARGUMENTS`)."""
        return reads.render(kind, found, self._compact, self._offers_ids)

    # ---- dispatch ----
    def _invoke(self, name: Any, arguments: Any) -> str:
        info = self._TOOLS.get(name) if isinstance(name, str) else None
        if info is None:
            shown = (
                (name if len(name) <= 100 else name[:100] + "...")
                if isinstance(name, str)
                else f"<{type(name).__name__}>"
            )
            return self._refuse(shown, preview(arguments), f"Error: unknown tool {shown!r}")
        try:
            clean = check_arguments(info.spec, arguments)
        except ArgumentError as exc:
            return self._refuse(name, preview(arguments), f"Error: {exc}")
        if self._transferred:
            return self._refuse(name, clean, TRANSFERRED_ERROR)
        if self._outage_at is not None and name not in _OUTAGE_EXEMPT:
            self._system_calls += 1
            if self._system_calls == self._outage_at:
                return self._refuse(name, clean, INJECTED_ERROR)
        before = self._snapshot(clean) if info.writes else None
        result = info.fn(self, **clean)
        error = result.startswith("Error:")
        changed = before is not None and not error and self._differs(before)
        self._audit.append(AuditEntry(name, clean, result, changed, error))
        return result

    def _refuse(self, name: str, shown: Any, result: str) -> str:
        arguments = shown if isinstance(shown, dict) else {"__invalid__": shown}
        self._audit.append(AuditEntry(name, arguments, result, False, True))
        return result

    def _snapshot(self, arguments: dict[str, Any]) -> list[tuple[str, str, Any]]:
        """Copies of the records a write can touch: the order, its owner, the named user.

        Under copy-on-write these records also become this environment's own before the write.
        """
        keys: list[tuple[str, str]] = []
        order = self._state["orders"].get(arguments.get("order_id", ""))
        if order is not None:
            keys += [("orders", arguments["order_id"]), ("users", order["user_id"])]
        if "user_id" in arguments:
            keys.append(("users", arguments["user_id"]))
        snapshot = []
        for kind, rid in keys:
            if rid not in self._state[kind]:
                continue
            record = self._state[kind][rid]
            if self._owned is not None and (kind, rid) not in self._owned:
                self._state[kind][rid] = copy_json(record)  # the shared original stays as it was
                self._owned.add((kind, rid))
                snapshot.append((kind, rid, record))
            else:
                snapshot.append((kind, rid, copy_json(record)))
        return snapshot

    def _differs(self, snapshot: list[tuple[str, str, Any]]) -> bool:
        return any(self._state[kind].get(rid) != record for kind, rid, record in snapshot)
