"""Hand-overs resolved by a person: the rest of a served conversation, and what SFT can learn from it.

When the served agent ends a conversation with its hand-over tool, a simulated person takes the
same conversation over, in the same world state the agent left, and finishes it: the domain's
rules agent playing without mistakes, or, for a domain without one, `GoldReplayHuman` (the gold's
calls, made the way the policy asks, then the gold's facts told). The record keeps both parts: the agent's messages up to and
including the hand-over, then the person's, and `handoff` says where the person began, who it
was and how the person's part ended (`completed` when the whole conversation verifies against
the gold, else `failed`). The record's own `outcome` and scores stay the agent's: the person's
work must not count as the agent's success.

A scripted person plays its own procedure from its first turn; it reads the turns it took
itself, with any call the back end refused with the retryable error left out, so it repeats a
refused call as a person would (up to the turn cap). `resolved_demonstration` turns a record whose
person completed the task into one conversation an SFT step can learn from.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from domains.api import ToolKind, copy_json
from domains.registry import DEFAULT_DOMAIN, load_domain
from training.rewards import verified_success
from training.sandbox.core import INJECTED_ERROR
from training.sandbox.environment import take_over
from training.sandbox.episode import MESSAGE_TOOL, Episode
from training.sandbox.rollout import DEFAULT_MAX_TURNS, Conversation, Message, Policy, roll_out

# The people of the simulated support desk; which one takes a conversation follows its seed.
HUMAN_AGENTS = tuple(f"human:sim-agent-{i:02d}" for i in range(1, 13))
_GREETING = (
    "Hello, this is a member of the support team. I have the notes from your conversation and will take it from here."
)
_CLOSING = "Your request has been completed. Is there anything else I can help you with? Have a great day!"


@dataclass(frozen=True)
class HumanPart:
    """What the person added to one handed-over conversation, and what the agent's part left.

    `messages`: the person's, to append to the agent's transcript; `handoff`: the record's field;
    `agent_episode` and `agent_sentiment`: the conversation as the agent left it (the record's
    outcome, actions and sentiment are the agent's)."""

    messages: list[Message]
    handoff: dict[str, Any]
    agent_episode: Episode
    agent_sentiment: float


def _call(name: str, arguments: Mapping[str, Any]) -> Message:
    return {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": dict(arguments)}]}


def _say(text: str) -> Message:
    return _call(MESSAGE_TOOL, {"message": text})


def _ask_identity(keys: Sequence[str]) -> Message:
    """The person asking for what an identification call with `keys` takes."""
    wanted = " and ".join(key.replace("_", " ") for key in keys)
    return _say(f"To verify your identity, could you please provide your {wanted}?")


class GoldReplayHuman:
    """A person who does what the gold says, the way the domain's policy asks it done: greets,
    asks the customer for what an identification call needs before making it (and identifies the
    customer by what they know when the gold has no identification), reads the record
    each change touches (when the gold has not just read it), asks the customer for the change's
    details, proposes each change and waits for the answer before making it (and confirms it), in
    the shop's agent's words where the domain has them (`Domain.detail_question`,
    `Domain.change_phrases`), tells the gold's
    facts, and closes. The hand-over in the gold is left out (the person is who it handed to). The
    `Policy` of a domain without a rules agent.

    The read before a change is the policy's (and the reward's `step_order`): a gold of writes
    alone, as generated scenarios have, made the person change an order it never looked at, and a
    conversation that taught the agent a write whose ids appear nowhere before it."""

    name = "human:gold-replay"

    def __init__(self, domain: str = DEFAULT_DOMAIN) -> None:
        spec = self._domain = load_domain(domain)
        self._kinds = spec.kinds()
        self._records = {s.name: s.record for s in spec.tool_specs if s.record is not None}
        # The read of each table: the first read tool that names a record of it.
        self._reads: dict[str, tuple[str, str]] = {}
        for s in spec.tool_specs:
            if s.kind == ToolKind.READ and s.record is not None:
                self._reads.setdefault(s.record.table, (s.name, s.record.argument))
        # Each identification tool and what it takes: asked once, at identification, never again
        # for a change.
        self._identify_tools = tuple(
            (s.name, tuple(str(key) for key in s.parameters.get("properties") or {}))
            for s in spec.tool_specs
            if s.kind == ToolKind.IDENTIFY
        )
        self._identity = frozenset(key for _, keys in self._identify_tools for key in keys)
        self._scripts: dict[str, list[Message]] = {}

    def _read_before(self, name: str, arguments: Mapping[str, Any]) -> Message | None:
        """The read of the record the write `name` touches, or None when it names none or the
        domain has no read of its table."""
        record = self._records.get(name)
        read = None if record is None else self._reads.get(record.table)
        if record is None or read is None or arguments.get(record.argument) is None:
            return None
        return _call(read[0], {read[1]: arguments[record.argument]})

    def _details(self, name: str, arguments: Mapping[str, Any]) -> str:
        """What the person asks the customer for before proposing the write `name`: its arguments
        but the record it touches and what an identification asks (the customer has said who they
        are), named by their words ("payment_method_id" is "payment method", "address1" and
        "address2" one "address"). Empty when there is nothing to ask."""
        record = self._records.get(name)
        words: list[str] = []
        for argument in arguments:
            if record is not None and argument == record.argument:
                continue
            word = re.sub(r"\d+$", "", re.sub(r"_ids?$", "", argument)).replace("_", " ").strip()
            if word and argument not in self._identity and word not in words:
                words.append(word)
        return words[0] if len(words) == 1 else ", ".join(words[:-1]) + f" and {words[-1]}" if words else ""

    def _identification(self, row: Mapping[str, Any]) -> list[Message]:
        """The identity asked for and the identification call made with what the customer knows
        (the first identification tool whose arguments they all know), or nothing when no tool
        fits. A gold without one (a generated scenario's is its writes alone) left the person
        changing an account it never identified: the policy's identify-before-write, and the
        customer's id, which a change of the account carries, said nowhere before it."""
        identity = self._domain.scenario_facts(row.get("user_scenario") or {}).identity
        for name, keys in self._identify_tools:
            if keys and all(key in identity for key in keys):
                return [_ask_identity(keys), _call(name, {key: identity[key] for key in keys})]
        return []

    def plan(self, task_id: str, row: Mapping[str, Any], seed: int) -> None:
        gold = row.get("gold") or {}
        steps = [_say(_GREETING)]
        if not any(self._kinds.get(str(a.get("name"))) == ToolKind.IDENTIFY for a in gold.get("actions") or ()):
            steps += self._identification(row)
        for action in gold.get("actions") or ():
            name, arguments = str(action["name"]), dict(action.get("arguments") or {})
            kind = self._kinds.get(name)
            if kind == ToolKind.HAND_OVER:
                continue
            if kind == ToolKind.IDENTIFY:
                steps.append(_ask_identity(tuple(arguments)))
            elif kind == ToolKind.WRITE:
                read = self._read_before(name, arguments)
                if read is not None and read not in steps[-1:]:
                    steps.append(read)
                question = self._domain.detail_question(name, arguments)
                if question is None and (asked := self._details(name, arguments)):
                    question = f"Could you please tell me the {asked} for this change?"
                if question is not None:
                    steps.append(_say(question))
                phrases = self._domain.change_phrases(name, arguments, row.get("initial_state") or {})
                if phrases is None:
                    shown = ", ".join(f"{key}: {value}" for key, value in arguments.items())
                    phrases = (f"I can {name.replace('_', ' ')} ({shown}). Shall I proceed?", "")
                steps.append(_say(phrases[0]))
                steps.append(_call(name, arguments))
                if phrases[1]:
                    steps.append(_say(phrases[1]))
                continue
            steps.append(_call(name, arguments))
        outputs = [str(o) for o in gold.get("outputs") or ()]
        if outputs:
            steps.append(_say("Here is what you asked for: " + ", ".join(outputs) + "."))
        steps.append(_say(_CLOSING))
        self._scripts[task_id] = steps

    def act(self, conversations: list[Any]) -> list[Message]:
        replies = []
        for conversation in conversations:
            script = self._scripts[str(conversation.task_id)]
            turn = sum(1 for m in conversation if m.get("role") == "assistant")
            replies.append(script[turn] if turn < len(script) else {"role": "assistant", "content": "Goodbye."})
        return replies


class _Desk:
    """The person's view of each conversation: its own turns, without the calls the back end
    refused with the retryable error, so a scripted person repeats such a call."""

    def __init__(self, person: Policy) -> None:
        self.person, self.name = person, person.name

    def act(self, conversations: list[Any]) -> list[Message]:
        return self.person.act([_without_faults(c) for c in conversations])


def _without_faults(conversation: Conversation) -> Conversation:
    kept: list[Message] = []
    for message in conversation:
        if message.get("role") == "tool" and message.get("content") == INJECTED_ERROR:
            # Drop the refused call's assistant turn (and its other results) with it.
            while kept and kept[-1].get("role") == "tool":
                kept.pop()
            if kept and kept[-1].get("role") == "assistant":
                kept.pop()
            continue
        kept.append(message)
    return Conversation(kept, env=conversation.env, task_id=conversation.task_id, seed=conversation.seed)


def human_agent(domain: str) -> Policy:
    """The person who takes hand-overs in `domain`: its rules agent without mistakes when it has
    one that plays turn by turn (`Policy`), else `GoldReplayHuman`."""
    agent = load_domain(domain).rules_agent(mistake_rates={})
    if agent is not None and callable(getattr(agent, "act", None)):
        return agent
    return GoldReplayHuman(domain)


def _hand_over_tools(domain: str) -> frozenset[str]:
    return frozenset(load_domain(domain).tool_names(ToolKind.HAND_OVER))


def resolve_handovers(
    domain: str,
    served: Sequence[tuple[Conversation, Mapping[str, Any]]],
    max_turns: int = DEFAULT_MAX_TURNS,
) -> list[HumanPart | None]:
    """A person finishes each served conversation that ended with the agent's hand-over.

    `served`: (conversation, its scenario row: `gold`, `customer_id`, ...) pairs, after the
    agent's rollout. Returns, per conversation, the person's part (None where the agent did not
    hand over). The conversations themselves are left as the agent ended them; their environments
    go on with the person's calls."""
    parts: list[HumanPart | None] = [None] * len(served)
    person = human_agent(domain)
    hand_over = _hand_over_tools(domain)
    desks: list[tuple[int, Conversation, Episode, float]] = []
    for index, (conversation, row) in enumerate(served):
        if conversation.env is None or conversation.ended_by != "done" or not conversation.episode.transferred:
            continue
        gold = row.get("gold") or {}
        actions = [a for a in gold.get("actions") or () if a.get("name") not in hand_over]
        task_id = f"handoff:{index}"
        if callable(getattr(person, "plan", None)):
            person.plan(task_id, {**row, "gold": {**gold, "actions": actions}}, conversation.seed)
        agent_episode = conversation.episode
        sentiment = float(getattr(conversation.env.simulator, "sentiment_delta", 0.0))
        take_over(conversation.env)
        desk = Conversation([], env=conversation.env, task_id=task_id, seed=conversation.seed)
        desks.append((index, desk, agent_episode, sentiment))
    if not desks:
        return parts
    roll_out(_Desk(person), [desk for _, desk, _, _ in desks], max_turns=max_turns)
    for index, desk, agent_episode, sentiment in desks:
        conversation = served[index][0]
        episode = desk.episode
        resolved = verified_success(episode) if episode.gold is not None else desk.ended_by in ("answer", "done")
        parts[index] = HumanPart(
            messages=desk.messages,
            handoff={
                "at_message": len(conversation),
                "by": HUMAN_AGENTS[random.Random(f"human:{conversation.seed}").randrange(len(HUMAN_AGENTS))],
                "outcome": "completed" if resolved else "failed",
            },
            agent_episode=agent_episode,
            agent_sentiment=sentiment,
        )
    return parts


def _found_at(messages: Sequence[Mapping[str, Any]], identify: frozenset[str]) -> tuple[int, str] | None:
    """(the index just past the first identification result that found someone, that result), or
    None when no identification call in `messages` succeeded."""
    for index, message in enumerate(messages):
        content = str(message.get("content") or "")
        if message.get("role") == "tool" and message.get("name") in identify and not content.startswith("Error"):
            return index + 1, content
    return None


def resolved_demonstration(record: Mapping[str, Any]) -> list[Message] | None:
    """The conversation a handed-over record teaches, when its person completed the task: the
    agent's part without the hand-over call (and its result), then the person's turns as the
    assistant's. None for a record without `handoff` or whose person's part failed.

    The person's turns are assistant turns already (the person spoke through the same tools), so
    they are kept as recorded; what goes is the agent's decision to hand over, the desk's greeting
    (and the customer's answer to it), and, when the agent had already identified the customer as
    the person then did again (the same result), the person's part up to that identification: the
    identity asked again and the call made twice. None of that is work the agent would do after its
    own identification, where its own conversations read the order. (Leaving it out did not make
    the tiny agent learn from resolutions: `bench/results/shipped_agent.md`, "People's resolutions
    on the whole shop".)"""
    handoff = record.get("handoff")
    if not isinstance(handoff, Mapping) or handoff.get("outcome") != "completed":
        return None
    messages = [copy_json(dict(m)) for m in record.get("messages") or ()]
    at = int(handoff["at_message"])
    domain = load_domain(str(record.get("domain") or DEFAULT_DOMAIN))
    hand_over = frozenset(domain.tool_names(ToolKind.HAND_OVER))
    agent: list[Message] = []
    for message in messages[:at]:
        if message.get("role") == "tool" and message.get("name") in hand_over:
            continue
        calls = message.get("tool_calls") or []
        if message.get("role") == "assistant" and any(c.get("name") in hand_over for c in calls):
            kept = [c for c in calls if c.get("name") not in hand_over]
            if not kept and not str(message.get("content") or "").strip():
                continue
            message = {**message, "tool_calls": kept}
        agent.append(message)
    person = messages[at:]
    if _greets(person[:1]):
        # The desk taking over is not work the agent would do: it said nothing the agent's part
        # needs, and the customer's answer restates the request the agent already heard.
        person = person[2:] if len(person) > 1 and person[1].get("role") == "tool" else person[1:]
    identify = frozenset(domain.tool_names(ToolKind.IDENTIFY))
    by_agent, by_person = _found_at(agent, identify), _found_at(person, identify)
    if by_agent is not None and by_person is not None and by_agent[1] == by_person[1]:
        person = person[by_person[0] :]
    return agent + person


def _greets(messages: Sequence[Mapping[str, Any]]) -> bool:
    """Whether `messages` is the desk's greeting (`GoldReplayHuman`'s first turn)."""
    calls = [c for m in messages for c in m.get("tool_calls") or ()]
    return len(calls) == 1 and calls[0].get("arguments") == {"message": _GREETING}
