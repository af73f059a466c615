"""The one rollout loop: a policy talks to customers in the sandbox, many conversations at a time.

Learner and judge share it: evaluation rolls a candidate out on held-out records, and simulated
traffic rolls the production agent out on sampled scenarios, through the same turns.

A policy sees a batch of live conversations and returns the next assistant message for each, in
one call (`Policy.act`). Every round, the next turn of every live conversation comes from that one
call (one batched generation for a model). With `max_live`, at most that many conversations are
live at once and a finished one makes room for the next (continuous batching). Tool calls run
through the environment's allow-list and their results are appended as tool messages. A
conversation ends on a text answer without tool calls ("answer"), when the environment is done
(a transfer to a human, or the customer left: "done"), when the policy's prompt outgrew its
model ("context_full"), or at `max_turns` assistant turns ("max_turns").

With `contain=True` (the evaluator's setting) an exception raised while running one conversation
(the customer simulator, the environment, the policy on that conversation) ends that conversation
only, with `ended_by="error"` and `error` naming the exception's class and message; the others
run on. `contained_trial` is the one place that catches it (see there).

Messages use the chat format of `training.sandbox.prompting`: `{"role": "assistant", "content":
str, "tool_calls": [{"name": str, "arguments": dict}]}`.
"""

from __future__ import annotations

import hashlib
import logging
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from training.sandbox.environment import SandboxEnvironment, call_tool, environment_class
from training.sandbox.episode import Episode
from training.sandbox.prompting import domain_of, initial_messages

Message = dict[str, Any]

DEFAULT_MAX_TURNS = 30  # a generous bound for scripted traffic agents, which end on their own
# The turn cap of an agent served to customers, and so of its evaluation: a conversation the
# policy has not ended in 12 assistant turns is cut the same way in serving and in every report.
SERVING_MAX_TURNS = 12
ENDINGS = ("answer", "done", "max_turns", "context_full", "error")
# How much of an exception's message a failed trial keeps (its class is always kept whole).
_ERROR_CHARS = 500

log = logging.getLogger(__name__)
# What a transcript keeps of tool-call arguments that are not an object (the environment still
# sees them as they were, and answers with an Error).
_RAW_ARGUMENTS_CHARS = 500


class RolloutError(ValueError):
    """A record that cannot be rolled out (no id, no initial state), or a policy breaking the seam."""

    def __init__(self, rule: str, detail: str, record_id: str | None = None) -> None:
        super().__init__(f"{rule}: {detail}" + (f" (record {record_id})" if record_id else ""))
        self.rule = rule
        self.detail = detail
        self.record_id = record_id


@runtime_checkable
class Policy(Protocol):
    """Anything that continues a batch of conversations by one assistant message each."""

    name: str

    def act(self, conversations: list[list[Message]]) -> list[Message]: ...


class Conversation(list):
    """One conversation in the sandbox: the transcript (a plain list of message dicts) plus the
    environment it runs in and how it went.

    Policies receive these; a model policy reads only the messages, a scripted one may read
    `task_id` and `trial` to find its script. After the loop, `turns`, `tool_calls`, `tool_errors`
    and `ended_by` say how it went and `episode` is what judges read. `mistakes` lists the
    mistakes a scripted production agent drew for it. `error` is "Class: message" of the
    exception that ended it (`ended_by == "error"`), else None.
    """

    def __init__(
        self,
        messages: Sequence[Message] = (),
        *,
        env: SandboxEnvironment | None = None,
        task_id: str | None = None,
        trial: int = 0,
        seed: int = 0,
        intent: str | None = None,
    ):
        super().__init__(messages)
        self.env, self.task_id, self.trial, self.seed, self.intent = env, task_id, trial, seed, intent
        self.mistakes: list[str] = []
        self.turns = self.tool_calls = self.tool_errors = 0
        self.ended_by: str | None = None
        self.error: str | None = None

    def fail(self, exc: Exception) -> None:
        """End this conversation as errored by `exc` (see `contained_trial`)."""
        self.error = f"{type(exc).__name__}: {str(exc)[:_ERROR_CHARS]}"
        self.ended_by = "error"

    @property
    def messages(self) -> list[Message]:
        """The transcript as a plain list (what a record stores)."""
        return list(self)

    @property
    def episode(self) -> Episode:
        if self.env is None:
            raise RolloutError("no_environment", "a bare transcript has no episode", self.task_id)
        return self.env.episode


def contained_trial(conversation: Conversation, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` for one trial; an exception fails that trial only and returns None.

    The per-trial boundary, and the only place the evaluator catches a trial's exception: building
    the conversation (environment reset, customer simulator), each of its turns (the policy's
    message for it, the tool calls, the customer's reply) and scoring it (the reward) each run
    through here. The trial is marked errored with the exception's class and message
    (`Conversation.fail`), the traceback goes to the log (once per error: every trial of a broken
    record fails alike, and a week can hold many), and nothing is scored for it: judges read
    `error`, never a number made up for a conversation that did not finish. `Exception` only, so an
    interrupt still stops the run.
    """
    try:
        return fn(*args, **kwargs)
    except Exception as exc:
        conversation.fail(exc)
        first = conversation.error not in _TRACED
        if first:
            if len(_TRACED) >= _TRACED_AT_MOST:
                _TRACED.clear()
            _TRACED.add(conversation.error)
        log.warning(
            "trial %s#%s failed: %s%s",
            conversation.task_id,
            conversation.trial,
            conversation.error,
            "" if first else " (traceback logged at its first trial)",
            exc_info=exc if first else None,
        )
        return None


# The errors whose traceback is already in the log (`contained_trial`); emptied when full.
_TRACED: set[str] = set()
_TRACED_AT_MOST = 1024


def trial_seed(seed: int, record_id: str, trial: int) -> int:
    """The simulator seed of one trial: a function of (seed, record id, trial) and nothing else,
    so two policies rolled out with the same `seed` meet the same customers."""
    digest = hashlib.sha256(f"{seed}:{record_id}:{trial}".encode()).digest()
    return int.from_bytes(digest[:4], "big") % (2**31 - 1)


def start_conversation(
    row: Mapping[str, Any],
    seed: int,
    *,
    task_id: str | None = None,
    trial: int = 0,
    customer_id: str | None = None,
    compact: bool = False,
    tools: tuple[str, ...] | None = None,
    read_only: bool = False,
    tool_fault_rate: float = 0.0,
) -> Conversation:
    """A reset environment for `row` (a record or scenario: `initial_state`, `user_scenario`,
    `gold`, `escalation_was_necessary`, as objects or JSON text) and its opening messages.

    The row's `domain` (default retail) picks the sandbox. `tools` limits the environment to
    those tools (None: all); `read_only` refuses every write tool (an operator's containment); `customer_id` names the customer
    the conversation is about, when known; `tool_fault_rate` is the chance that each call reaching
    the back-end system fails with a retryable Error (served traffic's faults). The environment's simulator has already spoken its
    opening for (scenario, seed); `initial_messages` rebuilds the same words (or takes the row's
    recorded opening) without advancing that simulator.
    """
    if row.get("initial_state") in (None, "", {}):
        raise RolloutError("missing_initial_state", "record has no initial_state", task_id)
    env = environment_class(domain_of(dict(row)), tools)()
    env.reset(
        initial_state=row["initial_state"],
        user_scenario=row.get("user_scenario") or {},
        gold=row.get("gold"),
        seed=seed,
        escalation_was_necessary=row.get("escalation_was_necessary"),
        compact=compact,
        customer_id=customer_id,
        read_only=read_only,
        tool_fault_rate=tool_fault_rate,
    )
    opening = initial_messages(dict(row), seed=seed)
    conversation = Conversation(opening, env=env, task_id=task_id, trial=trial, seed=seed, intent=row.get("intent"))
    if env.done:
        conversation.ended_by = "done"
    return conversation


def _recorded_call(call: Mapping[str, Any]) -> dict[str, Any]:
    """A tool call as the transcript keeps it: a string name and an object of arguments, whatever
    the policy emitted."""
    arguments = call.get("arguments")
    if arguments is None:
        arguments = {}
    elif not isinstance(arguments, dict):
        arguments = {"raw": str(arguments)[:_RAW_ARGUMENTS_CHARS]}
    return {"name": str(call.get("name")), "arguments": arguments}


def _step(conversation: Conversation, message: Any, max_turns: int) -> None:
    """Apply one assistant message: record it, run its tool calls, decide whether it ended."""
    if not isinstance(message, Mapping) or message.get("role", "assistant") != "assistant":
        raise RolloutError("bad_policy_message", f"policy returned {message!r:.200}", conversation.task_id)
    calls = list(message.get("tool_calls") or ())
    bad = next((c for c in calls if not isinstance(c, Mapping)), None)
    if bad is not None:
        raise RolloutError("bad_policy_message", f"tool call {bad!r:.200} is not an object", conversation.task_id)
    conversation.append(
        {
            "role": "assistant",
            "content": str(message.get("content") or ""),
            "tool_calls": [_recorded_call(c) for c in calls],
        }
    )
    conversation.turns += 1
    if message.get("stop_reason") == "context_full":
        conversation.ended_by = "context_full"
        return
    if not calls:
        conversation.ended_by = "answer"
        return
    env = conversation.env
    for call, recorded in zip(calls, conversation[-1]["tool_calls"]):
        # The environment sees the call as emitted: a malformed one is answered with an Error.
        result = str(call_tool(env, call.get("name"), call.get("arguments") or {}))
        conversation.tool_calls += 1
        conversation.tool_errors += result.startswith("Error")
        conversation.append({"role": "tool", "name": recorded["name"], "content": result})
        if env.done:
            # Calls after a transfer (or the customer leaving) would act on a closed conversation.
            conversation.ended_by = "done"
            return
    if conversation.turns >= max_turns:
        conversation.ended_by = "max_turns"


def roll_out(
    policy: Policy,
    conversations: Sequence[Conversation],
    max_turns: int = DEFAULT_MAX_TURNS,
    max_live: int | None = None,
    contain: bool = False,
) -> None:
    """Drive every conversation to its end, in place.

    `max_live` caps the conversations in flight (default: the policy's own `max_live` hint, else
    all): when one ends, the next waiting one starts, so every round still asks for the next turn
    of every live conversation in one call, while a model keeps its batch full and the caches of
    only that many conversations in memory. Conversations are independent, so this changes the
    order work is done in, never a transcript.

    `contain`: an exception in one conversation's turn fails that conversation only
    (`contained_trial`). A batched `policy.act` that raises is asked again one conversation at a
    time, so the failure lands on the conversation it came from and the rest of the batch goes on
    (in that round only, a sampling policy then draws from a different random stream). A policy
    returning the wrong number of messages breaks the seam itself and always raises.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be >= 1, got {max_turns}")
    waiting = deque(c for c in conversations if c.ended_by is None)
    limit = _live_limit(policy, max_live, len(waiting))
    active: list[Conversation] = []
    while active or waiting:
        while waiting and len(active) < limit:
            active.append(waiting.popleft())
        for conversation, message in zip(active, _act(policy, active, contain)):
            if conversation.ended_by is not None:  # the policy failed on it
                continue
            if contain:
                contained_trial(conversation, _step, conversation, message, max_turns)
            else:
                _step(conversation, message, max_turns)
        active = [c for c in active if c.ended_by is None]


def _act(policy: Policy, active: list[Conversation], contain: bool) -> list[Any]:
    """The policy's next message for each live conversation (None where it failed on one)."""
    try:
        replies = policy.act(list(active))
    except Exception:
        if not contain:
            raise
        # Not caught here: retried per conversation, where `contained_trial` records the failure.
        alone = [contained_trial(c, policy.act, [c]) for c in active]
        for reply in alone:
            if reply is not None:
                _check_batch(policy, reply, 1)
        return [None if reply is None else reply[0] for reply in alone]
    _check_batch(policy, replies, len(active))
    return replies


def _check_batch(policy: Policy, replies: Sequence[Any], expected: int) -> None:
    if len(replies) != expected:
        raise RolloutError(
            "bad_policy_batch",
            f"policy {getattr(policy, 'name', policy)!r} returned {len(replies)} messages for {expected} conversations",
        )


def _live_limit(policy: Policy, max_live: int | None, waiting: int) -> int:
    limit = max_live if max_live is not None else getattr(policy, "max_live", None)
    if limit is not None and limit < 1:
        raise ValueError(f"max_live must be >= 1, got {limit}")
    return limit or max(waiting, 1)
