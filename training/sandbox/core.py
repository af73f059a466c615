"""The machinery under every domain's sandbox: one checked entry point for every tool call.

TRL's GRPOTrainer (environment_factory) lists the environment class's public functions with
`inspect.getmembers(type(env), inspect.isfunction)`, skips names starting with `_`, treats
`reset` and `get_reward` specially and exposes the rest as tools, calling them as
`method(**arguments)` with whatever the model generated. So this base class defines only
`reset`, properties and private names; `training.sandbox.environment` generates one method per
tool of the domain, and each routes (whether TRL calls it, `call_tool` dispatches it, or a test
calls it) through `_invoke`: allow-list, argument check, the hand-over guard, the audit entry with
the tool's kind and record, and change detection. The world itself is the domain's environment.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from domains.api import RecordRef, ToolKind, copy_json
from domains.registry import DEFAULT_DOMAIN, load_domain
from training.customers import make_simulator
from training.sandbox.episode import MESSAGE_TOOL, AuditEntry, Episode
from training.sandbox.tool_args import ArgumentError, ParamSpec, check_arguments, preview

TRANSFERRED_ERROR = "Error: the conversation was transferred to a human agent; no further tool calls"
INJECTED_ERROR = "Error: the system timed out; please try again"
# What a write tool answers while an operator holds the agent read-only (`retrain contain --mode
# read-only`): nothing changes, and the agent is told why and what it can still do.
READ_ONLY_ERROR = (
    "Error: refused: an operator has put the agent in read-only mode, so no change can be made; "
    "hand the customer to a human agent for this request"
)
# Calls that can suffer an injected outage: the ones that reach the (imagined) back-end system.
_OUTAGE_KINDS = frozenset({ToolKind.READ.value, ToolKind.WRITE.value, ToolKind.IDENTIFY.value})


class EnvironmentSetupError(ValueError):
    """A dataset row that cannot start an episode (missing or malformed initial_state, ...)."""


@dataclass(frozen=True)
class ToolInfo:
    """A tool's parameters, its kind, and the record it names."""

    spec: ParamSpec
    kind: str
    record: RecordRef | None = None


def _as_object(value: Any, field: str) -> Any:
    """Dataset rows may carry nested objects as JSON text (DuckDB, Arrow); accept both."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise EnvironmentSetupError(f"{field} is not valid JSON: {exc}") from exc
    return value


class EnvironmentCore:
    """State, audit log and dispatch shared by every tool; `environment_class` adds the tools."""

    _DOMAIN: str = DEFAULT_DOMAIN
    _TOOLS: dict[str, ToolInfo] = {}  # filled by environment_class for the offered tools

    def __init__(self) -> None:
        self._world = load_domain(self._DOMAIN).make_environment()
        self._initial: dict[str, Any] = {}
        self._audit: list[AuditEntry] = []
        self._told: list[str] = []
        self._transferred = False
        self._gold: dict[str, Any] | None = None
        self._escalation: bool | None = None
        self._target: str | None = None
        self._simulator: Any = None
        self._outage_at: int | None = None  # which system call fails, when errors are injected
        self._system_calls = 0
        # Served traffic's flaky back end: each system call fails with this chance, drawn from a
        # generator of the conversation's own (so a day's faults are the same on every run).
        self._fault_rate = 0.0
        self._faults: random.Random | None = None
        self._read_only = False  # an operator's containment: every write tool is refused

    def reset(self, **row: Any) -> None:
        """Start a new conversation from one dataset row (TRL passes the whole row).

        Reads `initial_state` (dict or JSON text, required), `user_scenario`, `gold`, `seed`,
        `escalation_was_necessary`, `compact`, `simulator` (a ready CustomerSimulator) and
        `customer_id` / `user_id`; every other key (`prompt`, ...) is ignored. The state is
        deep-copied, so the row is never modified. Returns None: the prompt stays as it is.
        `inject_tool_errors` (curriculum level 3) makes one of the first three calls that reach
        the back-end system, chosen by `seed`, fail with a retryable Error and change nothing, so
        the policy learns to recover. `tool_fault_rate` (served traffic) makes each call that
        reaches the back-end system fail with that chance instead, the same retryable Error,
        drawn from a generator seeded by `seed`.
        """
        state = _as_object(row.get("initial_state"), "initial_state")
        if state is None:
            tables = ", ".join(load_domain(self._DOMAIN).tables)
            raise EnvironmentSetupError(f"reset() needs initial_state: {{{tables}}}")
        self._load(state, keep_initial=True, compact=bool(row.get("compact", False)))
        self._gold = copy_json(_as_object(row.get("gold"), "gold"))
        self._escalation = row.get("escalation_was_necessary")
        if row.get("inject_tool_errors"):
            # a private generator: the global one belongs to the trainer
            self._outage_at = random.Random(int(row.get("seed") or 0)).randint(1, 3)
        rate = float(row.get("tool_fault_rate") or 0.0)
        if not 0.0 <= rate <= 1.0:
            raise EnvironmentSetupError(f"tool_fault_rate={rate!r} must be in [0, 1]")
        if rate > 0.0:
            self._fault_rate, self._faults = rate, random.Random(f"tool-faults:{int(row.get('seed') or 0)}")
        self._read_only = row.get("read_only") is True
        target = row.get("customer_id", row.get("user_id"))
        self._target = target if isinstance(target, str) else None
        self._simulator = row.get("simulator")
        scenario = _as_object(row.get("user_scenario"), "user_scenario")
        if self._simulator is None and scenario:
            self._simulator = make_simulator(scenario, seed=int(row.get("seed") or 0), domain=self._DOMAIN)
            # The prompt already holds this opening (built from the same scenario and seed);
            # asking for it keeps this simulator's turn state in step with that conversation.
            self._simulator.opening_message()
        return None

    def _load(self, state: Any, keep_initial: bool, compact: bool = False) -> None:
        """Install a copy of `state` in the domain's world; the caller's records are never mutated."""
        self._world.reset(initial_state=state, compact=compact, offered_tools=tuple(self._TOOLS))
        self._initial = copy_json(state) if keep_initial else {}
        self._audit, self._told = [], []
        self._transferred = False
        self._gold, self._escalation, self._target, self._simulator = None, None, None, None
        self._outage_at, self._system_calls = None, 0
        self._fault_rate, self._faults = 0.0, None
        self._read_only = False

    # ---- read-only views (properties, so TRL does not mistake them for tools) ----
    @property
    def domain(self) -> str:
        return self._DOMAIN

    @property
    def read_only(self) -> bool:
        """Whether an operator's containment refuses every write tool (`training.sandbox.containment`)."""
        return self._read_only

    @read_only.setter
    def read_only(self, value: bool) -> None:
        self._read_only = bool(value)

    @property
    def state(self) -> dict[str, Any]:
        """The live world: the domain's tables."""
        return self._world.state

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
        """Handed over to a person, or the simulated customer has finished."""
        return self._transferred or bool(getattr(self._simulator, "finished", False))

    @property
    def episode(self) -> Episode:
        """A snapshot of the conversation so far for rewards and metrics (copies, not views)."""
        sentiment = float(getattr(self._simulator, "sentiment_delta", 0.0)) if self._simulator is not None else 0.0
        return Episode(
            initial_state=copy_json(self._initial),
            final_state=copy_json(self.state),
            audit_log=list(self._audit),
            told=list(self._told),
            gold=copy_json(self._gold),
            escalation_was_necessary=self._escalation,
            sentiment_delta=sentiment,
            user_id=self._customer_id(),
            domain=self._DOMAIN,
        )

    def _customer_id(self) -> str | None:
        """The row's customer; else the only customer of the initial state; else the last one found."""
        if self._target is not None:
            return self._target
        customers = self._initial.get(load_domain(self._DOMAIN).customer_table, {})
        if len(customers) == 1:
            return next(iter(customers))
        for entry in reversed(self._audit):
            if entry.kind == ToolKind.IDENTIFY and not entry.error:
                return entry.result
        return None

    # ---- dispatch ----
    def _invoke(self, name: Any, arguments: Any, fault: bool = False) -> str:
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
        if self._read_only and info.kind == ToolKind.WRITE:
            return self._refuse(name, clean, READ_ONLY_ERROR)
        if self._outage_at is not None and info.kind in _OUTAGE_KINDS:
            self._system_calls += 1
            if self._system_calls == self._outage_at:
                return self._refuse(name, clean, INJECTED_ERROR)
        if info.kind in _OUTAGE_KINDS and (
            fault or (self._faults is not None and self._faults.random() < self._fault_rate)
        ):
            return self._refuse(name, clean, INJECTED_ERROR)
        if name == MESSAGE_TOOL:
            result, changed = self._send_message(clean["message"]), False
        else:
            result, changed = self._call_world(name, clean, info.kind == ToolKind.WRITE)
        error = result.startswith("Error")
        if info.kind == ToolKind.HAND_OVER and not error:
            self._transferred = True
        record = None
        if info.record is not None and isinstance(clean.get(info.record.argument), str):
            record = (info.record.table, clean[info.record.argument])
        self._audit.append(AuditEntry(name, clean, result, changed, error, info.kind, record))
        return result

    def _take_over(self) -> None:
        """Let a person go on with a conversation the agent handed over: tool calls run again on
        the same world, and the hand-over stays in the audit log (the episode is still a transfer)."""
        self._transferred = False

    def _call_world(self, name: str, arguments: dict[str, Any], writes: bool) -> tuple[str, bool]:
        """Run a domain tool; whether it changed the world comes from the world when it says
        (`changed`), else from comparing the state around a write."""
        reports = hasattr(self._world, "changed")
        before = copy_json(self._world.state) if writes and not reports else None
        result = str(self._world.call(name, arguments))
        if not writes or result.startswith("Error"):
            return result, False
        return result, bool(self._world.changed) if reports else self._world.state != before

    def _send_message(self, message: str) -> str:
        if self._simulator is None:
            return "Error: no customer is connected to this conversation"
        if getattr(self._simulator, "finished", False):
            return "Error: the customer has already left the conversation"
        self._told.append(message)
        return str(self._simulator.reply(message))

    def _refuse(self, name: str, shown: Any, result: str) -> str:
        arguments = shown if isinstance(shown, dict) else {"__invalid__": shown}
        info = self._TOOLS.get(name)
        self._audit.append(AuditEntry(name, arguments, result, False, True, info.kind if info else ""))
        return result
