"""What a recorded production conversation did, rebuilt in a fresh environment; reward alignment.

A record (`dataplane.contract`) keeps the transcript, not the environment's audit log. To judge it
with the same code that judges rollouts (`training.rewards`), `replay_record` re-runs the
assistant's tool calls in order through a new sandbox of the record's domain, built from its
`initial_state`, `gold` and escalation flag. The customer is not simulated again: a
`RecordedCustomer` hands back the customer's recorded replies in order, so the conversation
unfolds exactly as it did. Whatever the agent wrote as plain assistant text counts as told to
the customer too (a model may talk without the `send_message_to_customer` tool). Only the agent's
part is replayed: where a person finished the conversation (`handoff`), the messages from the
person's first one on are not the agent's. A call the back end refused with the retryable error
is refused again.

`judge_record` judges a recorded conversation like a rollout: its replayed episode, proxy reward
and, when it carries gold, the `Trial` that failure modes and metrics read. The review export and
the daily watch both judge served traffic this way, so a conversation gets the same reward and
failure mode wherever it is looked at.

    >>> from domains.registry import load_domain
    >>> from training.sandbox.environment import environment_class
    >>> customer = RecordedCustomer("Hi", ["My email is a@b.c"])
    >>> env = environment_class("retail")()
    >>> env.reset(initial_state={table: {} for table in load_domain("retail").tables}, simulator=customer)
    >>> env.send_message_to_customer(message="Who are you?"), customer.finished
    ('My email is a@b.c', True)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from domains.registry import DomainNotFoundError
from evaluation.rollout import Trial
from evaluation.stats import agreement_rate, roc_auc
from training.fields import tool_results_after
from training.rewards import GoldError, RewardWeights, score_episode, total_reward, verified_success
from training.sandbox.core import INJECTED_ERROR
from training.sandbox.environment import call_tool, environment_class
from training.sandbox.episode import MESSAGE_TOOL, Episode
from training.sandbox.prompting import domain_of

__all__ = [
    "RecordedCustomer",
    "RecordExhaustedError",
    "ReplayError",
    "Divergence",
    "ReplayedConversation",
    "agent_messages",
    "replay_record",
    "recorded_episode",
    "proxy_reward",
    "record_verified_success",
    "AlignmentEvidence",
    "alignment_evidence",
    "reward_alignment",
    "JudgedRecord",
    "judge_record",
]


class ReplayError(ValueError):
    """A record whose conversation cannot be replayed; names the interaction and the rule broken."""

    def __init__(self, interaction_id: Any, rule: str, detail: str) -> None:
        super().__init__(f"interaction {interaction_id!r}: {rule}: {detail}")
        self.interaction_id = interaction_id
        self.rule = rule
        self.detail = detail


class RecordExhaustedError(RuntimeError):
    """`RecordedCustomer.reply` was asked for more replies than the record holds."""


class RecordedCustomer:
    """A CustomerSimulator that answers with recorded words instead of generating them.

    `finished` turns true once every recorded reply has been handed back: in the original
    conversation any later message was refused because the customer had left (or there was no
    later message), so the environment refuses it here in the same way.
    """

    def __init__(self, opening: str, replies: Sequence[str], sentiment_delta: float = 0.0) -> None:
        self._opening = opening
        self._replies = list(replies)
        self._next = 0
        self._sentiment = float(sentiment_delta)

    def opening_message(self) -> str:
        return self._opening

    def reply(self, agent_message: str) -> str:
        if self._next >= len(self._replies):
            raise RecordExhaustedError(
                f"all {len(self._replies)} recorded replies were used; no reply to {agent_message[:80]!r}"
            )
        self._next += 1
        return self._replies[self._next - 1]

    @property
    def sentiment_delta(self) -> float:
        """The mood change the record reports; the recorded words cannot change it again."""
        return self._sentiment

    @property
    def finished(self) -> bool:
        return self._next >= len(self._replies)


@dataclass(frozen=True)
class Divergence:
    """A replayed tool result that differs from the recorded one (position = index in `messages`)."""

    position: int
    tool: str
    recorded: str
    replayed: str


@dataclass
class ReplayedConversation:
    """A replayed record: the Episode rewards read, and where the replay disagreed with the record.

    Divergences are expected where ingestion masked PII inside tool results; anything else means
    the record's `initial_state` does not reproduce what the agent saw.
    """

    interaction_id: Any
    episode: Episode
    tool_calls: int
    divergences: list[Divergence] = field(default_factory=list)
    unanswered_calls: int = 0  # tool calls with no recorded result (a truncated transcript)


@dataclass(frozen=True)
class _Call:
    position: int  # index of the assistant message in `messages`
    name: Any
    arguments: Any
    recorded: str | None  # the tool message that answered it, when the transcript has one


def _as_json(value: Any, field_name: str, interaction_id: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError as exc:
            raise ReplayError(interaction_id, f"bad_{field_name}", f"not valid JSON: {exc}") from exc
    return value


def _arguments(raw: Any) -> Any:
    """Arguments as the model wrote them; OpenAI-style JSON text is decoded, junk passed on as is
    (the environment then answers it with the same `Error:` the agent saw)."""
    if isinstance(raw, str):
        try:
            return json.loads(raw)
        except json.JSONDecodeError:
            return raw
    return {} if raw is None else raw


def _calls(messages: list[Any], interaction_id: Any) -> list[_Call]:
    """Every assistant tool call in order, each paired with the tool message that answered it."""
    calls: list[_Call] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ReplayError(interaction_id, "bad_message", f"messages[{index}] is not an object")
        if message.get("role") != "assistant":
            continue
        requested = message.get("tool_calls") or []
        if not isinstance(requested, list):
            raise ReplayError(interaction_id, "bad_tool_calls", f"messages[{index}].tool_calls is not a list")
        results = tool_results_after(messages, index, len(requested))
        for number, call in enumerate(requested):
            if not isinstance(call, Mapping):
                raise ReplayError(
                    interaction_id, "bad_tool_calls", f"messages[{index}].tool_calls[{number}] is not an object"
                )
            result = results[number] if number < len(results) else None
            if result is not None and result.get("name") not in (None, call.get("name")):
                raise ReplayError(
                    interaction_id,
                    "tool_result_mismatch",
                    f"messages[{index}] calls {call.get('name')!r} but its result is from {result.get('name')!r}",
                )
            calls.append(
                _Call(
                    index,
                    call.get("name"),
                    _arguments(call.get("arguments")),
                    None if result is None else str(result.get("content", "")),
                )
            )
    return calls


def _customer(record: Mapping[str, Any], messages: list[Any], calls: list[_Call]) -> RecordedCustomer:
    opening = next((str(m.get("content", "")) for m in messages if m.get("role") == "user"), "")
    # Refused sends (the customer had left, bad arguments, after a transfer) never reached the
    # customer, so they are not replies; the environment refuses them again on its own.
    replies = [
        c.recorded if c.recorded is not None else ""
        for c in calls
        if c.name == MESSAGE_TOOL and not (c.recorded or "").startswith("Error:")
    ]
    sentiment = record.get("customer_sentiment_delta") or 0.0
    return RecordedCustomer(opening, replies, float(sentiment))


def agent_messages(record: Mapping[str, Any]) -> list[Any]:
    """The record's messages the agent's conversation holds: all of them, or, where a person took
    over (`handoff`), those before the person's first message. What is judged is the agent's."""
    interaction_id = record.get("interaction_id")
    messages = _as_json(record.get("messages"), "messages", interaction_id)
    if not isinstance(messages, list) or not messages:
        raise ReplayError(interaction_id, "empty_messages", "messages must be a non-empty list")
    handoff = _as_json(record.get("handoff"), "handoff", interaction_id)
    if handoff is None:
        return messages
    at = handoff.get("at_message") if isinstance(handoff, Mapping) else None
    if isinstance(at, bool) or not isinstance(at, int) or not 1 <= at <= len(messages):
        raise ReplayError(interaction_id, "bad_handoff", f"handoff {handoff!r:.200} names no message of the record")
    return messages[:at]


def replay_record(record: Mapping[str, Any]) -> ReplayedConversation:
    """Re-run a recorded conversation's tool calls in a fresh environment; see the module docstring.

    Raises ReplayError when the record lacks what a replay needs (messages, a valid initial state).
    """
    interaction_id = record.get("interaction_id")
    messages = agent_messages(record)
    calls = _calls(messages, interaction_id)
    try:
        env = environment_class(domain_of(dict(record)))()
        env.reset(
            initial_state=record.get("initial_state"),
            gold=record.get("gold"),
            escalation_was_necessary=record.get("escalation_was_necessary"),
            customer_id=record.get("customer_id"),
            simulator=_customer(record, messages, calls),
        )
    except DomainNotFoundError as exc:
        raise ReplayError(interaction_id, "unknown_domain", str(exc)) from exc
    except ValueError as exc:  # EnvironmentSetupError, or the domain's own check of initial_state
        raise ReplayError(interaction_id, "bad_initial_state", str(exc)) from exc
    by_position: dict[int, list[_Call]] = {}
    for call in calls:
        by_position.setdefault(call.position, []).append(call)
    told: list[str] = []
    divergences: list[Divergence] = []
    for index, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str) and content.strip():
            told.append(content)
        for call in by_position.get(index, []):
            before = len(env.told)
            # A call the back end refused in production is refused again: replaying it as
            # answered would credit the agent with a change it never made.
            result = call_tool(env, call.name, call.arguments, fault=call.recorded == INJECTED_ERROR)
            told += env.told[before:]
            if call.recorded is not None and call.recorded != result:
                divergences.append(Divergence(index, str(call.name), call.recorded, result))
    episode = replace(env.episode, told=told)
    return ReplayedConversation(
        interaction_id, episode, len(calls), divergences, sum(c.recorded is None for c in calls)
    )


def recorded_episode(record: Mapping[str, Any]) -> Episode:
    """The Episode of a recorded conversation, for `training.rewards` and evaluation metrics."""
    return replay_record(record).episode


def proxy_reward(record: Mapping[str, Any], weights: RewardWeights | Mapping[str, Any] | None = None) -> float:
    """The training reward the recorded conversation would have earned."""
    return float(total_reward(recorded_episode(record), weights))


def record_verified_success(record: Mapping[str, Any]) -> bool | None:
    """Verified success of a recorded conversation; None when it carries no gold (undefined, not False)."""
    if record.get("gold") is None:
        return None
    return verified_success(recorded_episode(record))


@dataclass(frozen=True)
class AlignmentEvidence:
    """The proxy reward and human verdict of every labelled record that replays
    (`rewards[i]` and `human[i]` belong to the same record), their summary, and what was left out."""

    rewards: list[float]
    human: list[bool]
    summary: dict[str, Any]
    skipped: list[dict[str, Any]]


def alignment_evidence(
    records: Iterable[Mapping[str, Any]], weights: RewardWeights | Mapping[str, Any] | None = None
) -> AlignmentEvidence:
    """How well the proxy reward and verified success agree with human `task_success` labels.

    Over records with a human label: `auc` of proxy reward vs the label (None, with
    `auc_undefined`, when only one class is present), and `agreement` of verified success with the
    label over the labelled records that carry gold (`n_agreement`). `skipped` lists every record
    left out, with why and of what (`scope`: "all" or "agreement"); a record that cannot be
    replayed is left out of the rewards and verdicts alike, so the two always pair up.
    """
    rewards: list[float] = []
    labels: list[bool] = []
    verified: list[bool] = []
    verified_labels: list[bool] = []
    skipped: list[dict[str, Any]] = []
    for record in records:
        rid = record.get("interaction_id")
        label = record.get("human_label")
        if not isinstance(label, Mapping) or not isinstance(label.get("task_success"), bool):
            skipped.append({"interaction_id": rid, "scope": "all", "reason": "no human_label.task_success"})
            continue
        try:
            episode = recorded_episode(record)
            reward = float(total_reward(episode, weights))
            success = verified_success(episode) if episode.gold is not None else None
        except (ReplayError, GoldError) as exc:
            skipped.append({"interaction_id": rid, "scope": "all", "reason": f"{type(exc).__name__}: {exc}"})
            continue
        rewards.append(reward)
        labels.append(label["task_success"])
        if success is None:
            skipped.append(
                {"interaction_id": rid, "scope": "agreement", "reason": "no gold: verified success undefined"}
            )
        else:
            verified.append(success)
            verified_labels.append(label["task_success"])
    auc, undefined = None, None
    if not rewards:
        undefined = "no labelled record could be replayed"
    elif all(labels) or not any(labels):
        undefined = f"labels are all {labels[0]}: AUC needs both classes"
    else:
        auc = roc_auc(rewards, labels)
    summary = {
        "n": len(rewards),
        "auc": auc,
        "auc_undefined": undefined,
        "n_agreement": len(verified),
        "agreement": agreement_rate(verified, verified_labels) if verified else None,
        "positives": sum(labels),
    }
    return AlignmentEvidence(rewards, labels, summary, skipped)


def reward_alignment(
    records: Iterable[Mapping[str, Any]], weights: RewardWeights | Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """`alignment_evidence`'s summary with its `skipped` list, as one dict."""
    evidence = alignment_evidence(records, weights)
    return {**evidence.summary, "skipped": evidence.skipped}


@dataclass(frozen=True)
class JudgedRecord:
    """`trial` is None when the record carries no gold: verified success, and so a failure mode,
    is undefined there (not False)."""

    interaction_id: str
    episode: Episode
    reward_terms: dict[str, float]
    trial: Trial | None

    @property
    def reward(self) -> float:
        return float(sum(self.reward_terms.values()))

    @property
    def success(self) -> bool | None:
        return None if self.trial is None else self.trial.success


def judge_record(record: Mapping[str, Any], weights: Any = None) -> JudgedRecord:
    """Replay `record` and score it under `weights` (None: the playbook).

    Raises `ReplayError` or `training.rewards.GoldError` when it cannot be judged.
    """
    episode = recorded_episode(record)
    terms = dict(score_episode(episode, weights))
    interaction_id = str(record["interaction_id"])
    trial = None
    if episode.gold is not None:
        messages = agent_messages(record)
        trial = Trial(
            record_id=interaction_id,
            trial=0,
            seed=0,
            episode=episode,
            success=bool(verified_success(episode)),
            messages=messages,
            turns=sum(m.get("role") == "assistant" for m in messages),
            tool_calls=len(episode.audit_log),
            tool_errors=sum(bool(e.error) for e in episode.audit_log),
            ended_by="done" if episode.transferred else "answer",
            reward=sum(terms.values()),
            reward_terms=terms,
            intent=record.get("intent"),
        )
    return JudgedRecord(interaction_id, episode, terms, trial)
