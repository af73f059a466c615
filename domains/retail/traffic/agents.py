"""The production agent of simulated traffic: a scripted policy with realistic mistakes.

It drives a real retail sandbox conversation with the persona customer: greets, asks for
identification and parses the customer's answer, authenticates, reads the order, proposes the
change, performs it (or tells the fact, or hands over to a person) and says goodbye. What it wants
to do comes from the scenario's gold (it "understands" the request perfectly); everything it knows
about the customer's identity comes from the conversation itself. Mistakes are drawn per
conversation from `mistake_rates`; with every rate at zero it is the expert, whose trajectories are
verified successful. `run_policy` drives any policy (`training.sandbox.rollout.Policy`, e.g. a
model) through the sandbox's rollout loop instead.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from typing import Any

from domains.retail.customer import ADDRESS_FIELDS, PAYMENT_ID
from domains.retail.tools_write import CANCEL_REASONS
from domains.retail.traffic.scenarios import INTENTS, Scenario
from training.sandbox.core import INJECTED_ERROR
from training.sandbox.environment import call_tool
from training.sandbox.rollout import DEFAULT_MAX_TURNS, Conversation, Policy, roll_out, start_conversation

MISTAKES = (
    "wrong_order",
    "cancel_non_pending",
    "unnecessary_escalation",
    "looping",
    "skipped_authentication",
    "wrong_item",
)
DEFAULT_MISTAKE_RATES: dict[str, float] = {
    "wrong_order": 0.03,
    "cancel_non_pending": 0.02,
    "unnecessary_escalation": 0.03,
    "looping": 0.02,
    "skipped_authentication": 0.03,
    "wrong_item": 0.03,
}
EXPERT_RATES: dict[str, float] = {name: 0.0 for name in MISTAKES}
# When several mistakes are drawn for one conversation, the one that derails it earliest wins.
_PRECEDENCE = ("unnecessary_escalation", "looping", "cancel_non_pending", "wrong_order", "wrong_item")
_LOOP_REPEATS = 8
_MAX_ID_ASKS = 3
# A call the back end refused with a retryable fault is made again, at most this many times more.
_FAULT_RETRIES = 3
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_NAME_ZIP = re.compile(r"name is ([A-Z][\w'-]*) ([A-Z][\w' -]*?) and my zip code is (\d{5})")
_ASK_ID = (
    "Thanks for reaching out, I'm happy to help. To verify your identity, could you please provide "
    "your email, or your first name, last name and zip code?"
)
# The hand-over of a request outside `ScriptedAgent.handles`: the person reads the conversation.
_UNHANDLED = "The customer has a request I cannot handle myself; please take over."
_ASK_ID_AGAIN = (
    "I understand. I do need to verify your identity before I can look at your account. Could you "
    "please provide your email, or your name and zip code?"
)


class AgentConfigError(ValueError):
    """Bad mistake rates (unknown name or a rate outside [0, 1])."""


def validate_mistake_rates(rates: Mapping[str, float] | None) -> dict[str, float]:
    """Full rate dict (missing names default to DEFAULT_MISTAKE_RATES); rejects unknown names."""
    if rates is None:
        return dict(DEFAULT_MISTAKE_RATES)
    unknown = sorted(set(rates) - set(MISTAKES))
    if unknown:
        raise AgentConfigError(f"unknown mistake(s) {unknown}; known: {list(MISTAKES)}")
    for name, rate in rates.items():
        _checked_rate(rate, f"mistake rate {name}")
    return {name: float(rates.get(name, DEFAULT_MISTAKE_RATES[name])) for name in MISTAKES}


def _checked_rate(rate: Any, label: str) -> float:
    """`rate` as a float; AgentConfigError naming `label` unless it is a number in [0, 1]."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0.0 <= rate <= 1.0:
        raise AgentConfigError(f"{label}={rate!r} must be a number in [0, 1]")
    return float(rate)


def scenario_row(scenario: Scenario) -> dict[str, Any]:
    """The scenario as the record fields a conversation (and a level restatement) reads."""
    return {
        "initial_state": scenario.initial_state,
        "user_scenario": scenario.user_scenario,
        "gold": scenario.gold,
        "escalation_was_necessary": scenario.escalation_was_necessary,
        "intent": scenario.intent,
    }


def scenario_conversation(scenario: Scenario, seed: int, tool_fault_rate: float = 0.0) -> Conversation:
    """A conversation about `scenario` in a reset environment, opened (system policy, customer);
    `tool_fault_rate`: see `start_conversation`."""
    return start_conversation(
        scenario_row(scenario), seed, customer_id=scenario.user_id, tool_fault_rate=tool_fault_rate
    )


class _Turns:
    """Appends each tool call and its result to the transcript in contract form; a call the back
    end refused with a retryable fault (`INJECTED_ERROR`) is made again, up to `_FAULT_RETRIES`
    times, as the error text asks."""

    def __init__(self, conversation: Conversation) -> None:
        self.env, self.messages = conversation.env, conversation

    def call(self, name: str, arguments: dict[str, Any]) -> str:
        for _ in range(1 + _FAULT_RETRIES):
            self.messages.append(
                {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]}
            )
            result = call_tool(self.env, name, arguments)
            self.messages.append({"role": "tool", "name": name, "content": result})
            if result != INJECTED_ERROR:
                break
        return result

    def say(self, text: str) -> str:
        return self.call("send_message_to_customer", {"message": text})


def _parse_identity(text: str) -> dict[str, str] | None:
    if m := _NAME_ZIP.search(text):
        return {"first_name": m.group(1), "last_name": m.group(2), "zip": m.group(3)}
    if m := _EMAIL.search(text):
        return {"email": m.group(0)}
    return None


class ScriptedAgent:
    """The scripted production agent; `mistake_rates` all zero makes it the expert.

    `handles`: the intents it serves itself (None: all); any other request it hands to a person
    once the customer is identified, as an agent that knows only part of the shop should.
    `asks_details`: before a change whose argument only the customer can say, it asks for it (once
    it has read the record it changes, but for a cancellation's reason: `_ASKED_BEFORE_THE_READ`)
    and makes the change with what it heard, rather than knowing it from the scenario: why, before
    a cancellation; which payment method, before a payment change or a return; the new address,
    before an address change (`_DETAIL_QUESTIONS`). The conversation then holds every fact the
    call needs, so a model imitating it can copy each argument from the customer's words or a
    tool's result; a demonstration whose argument comes from nowhere in it teaches a guess.
    `tool_fault_rate`: its conversations meet back-end faults at this rate (as served traffic does,
    `ServedTraffic.tool_fault_rate`), and it retries each (`_Turns`), so a model imitating it sees
    what to do after one."""

    def __init__(
        self,
        mistake_rates: Mapping[str, float] | None = None,
        handles: tuple[str, ...] | None = None,
        asks_details: bool = False,
        tool_fault_rate: float = 0.0,
    ) -> None:
        self.rates = validate_mistake_rates(mistake_rates)
        unknown = sorted(set(handles or ()) - set(INTENTS))
        if unknown:
            raise AgentConfigError(f"handles: unknown intent(s) {unknown}; known: {list(INTENTS)}")
        self.handles = None if handles is None else frozenset(handles)
        self.asks_details = asks_details
        self.tool_fault_rate = _checked_rate(tool_fault_rate, "tool_fault_rate")

    def draw_mistakes(self, scenario: Scenario, rng: random.Random) -> list[str]:
        """The mistakes this conversation will make: drawn per rate, kept if applicable, one derailer at most."""
        drawn = [name for name in MISTAKES if rng.random() < self.rates[name]]
        applicable = [name for name in drawn if mistake_applicable(name, scenario)]
        derailer = next((name for name in _PRECEDENCE if name in applicable), None)
        return [name for name in applicable if name == "skipped_authentication" or name == derailer]

    def run(self, scenario: Scenario, seed: int = 0) -> Conversation:
        """Play one conversation to its end; deterministic for (scenario, seed)."""
        rng = random.Random(f"agent:{seed}")
        mistakes = self.draw_mistakes(scenario, rng)
        conversation = scenario_conversation(scenario, seed, tool_fault_rate=self.tool_fault_rate)
        _Script(scenario, _Turns(conversation), mistakes, rng, self.handles, self.asks_details).play()
        conversation.mistakes = mistakes
        return conversation


def _other_orders(scenario: Scenario) -> list[str]:
    return [oid for oid in scenario.initial_state["orders"] if oid != scenario.order_id]


def mistake_applicable(mistake: str, scenario: Scenario) -> bool:
    """Whether `mistake` can happen in `scenario` (e.g. a wrong order needs a second order)."""
    intent, orders = scenario.intent, scenario.initial_state["orders"]
    if mistake in ("skipped_authentication", "looping"):
        return True
    if mistake == "unnecessary_escalation":
        return intent != "other"
    if mistake == "cancel_non_pending":
        return intent in ("return_items", "exchange_items")
    if mistake == "wrong_order":
        if intent == "order_status":  # a wrong order with the same status would still answer right
            status = orders[scenario.order_id]["status"]
            return any(orders[o]["status"] != status for o in _other_orders(scenario))
        return scenario.write is not None and scenario.order_id is not None and bool(_other_orders(scenario))
    if mistake == "wrong_item":
        write = scenario.write
        if write is None or "item_ids" not in write["arguments"]:
            return False
        chosen = set(write["arguments"]["item_ids"])
        return any(item["item_id"] not in chosen for item in orders[scenario.order_id]["items"])
    raise AgentConfigError(f"unknown mistake {mistake!r}")


class _Script:
    """One conversation of the scripted agent (see the module docstring for the flow)."""

    def __init__(
        self,
        scenario: Scenario,
        turns: _Turns,
        mistakes: list[str],
        rng: random.Random,
        handles: frozenset[str] | None = None,
        asks_details: bool = False,
    ) -> None:
        self.s, self.t, self.mistakes, self.rng = scenario, turns, mistakes, rng
        self.handles, self.asks_details = handles, asks_details
        self.heard: dict[str, str] = {}  # the write's arguments as the customer said them

    def play(self) -> None:
        if "skipped_authentication" not in self.mistakes and not self._authenticate():
            self._end("I'm sorry, I could not verify your identity, so I can't make changes today. Goodbye.")
            return
        if "unnecessary_escalation" in self.mistakes:
            self._transfer("Customer request looks complicated; handing over.")
            return
        if "looping" in self.mistakes:
            self._loop(self._read_target())
            return
        if self.s.intent == "other":
            self._transfer(self.s.gold["actions"][-1]["arguments"]["summary"])
            return
        if self.handles is not None and self.s.intent not in self.handles:
            self._transfer(_UNHANDLED)
            return
        asks = self.asks_details and self._write_name() in _DETAIL_QUESTIONS
        before_read = self._write_name() in _ASKED_BEFORE_THE_READ
        if asks and before_read and not self._ask_details():
            return
        read = self._read_target()
        if self.s.intent == "order_status":
            self._tell_status(read)
            return
        if asks and not before_read and not self._ask_details():
            return
        self._write()

    def _ask_details(self) -> bool:
        """Asks what only the customer can say for this change (`_DETAIL_QUESTIONS`) and keeps the
        answer for the write; False (the conversation closed) when the answer names none.

        Asked after the read, right before the proposal, as the person who resolves a hand-over
        asks (`training.traffic.handoff`: read, ask, propose): the proposal and the call then copy
        the answer from the message before them rather than across the read's result (an order's
        JSON holds its current payment method, beside the one asked for). The cancellation's is
        the exception (`_ASKED_BEFORE_THE_READ`)."""
        name = str(self._write_name())
        _, read_answer, missing = _DETAIL_QUESTIONS[name]
        heard = read_answer(self.t.say(str(detail_question(name, {"order_id": self.s.order_id}))))
        if heard is None:
            self._end(missing)
            return False
        self.heard = heard
        return True

    def _write_name(self) -> str | None:
        return None if self.s.write is None else str(self.s.write["name"])

    def _authenticate(self) -> bool:
        reply = self.t.say(_ASK_ID)
        for attempt in range(_MAX_ID_ASKS):
            identity = _parse_identity(reply)
            if identity is not None:
                tool = "find_user_id_by_email" if "email" in identity else "find_user_id_by_name_zip"
                if not self.t.call(tool, identity).startswith("Error"):
                    return True
            if attempt + 1 < _MAX_ID_ASKS:
                reply = self.t.say(_ASK_ID_AGAIN)
        return False

    def _transfer(self, summary: str) -> None:
        # No announcement first: the persona customer leaves on hearing "transfer", and a rollout
        # stops as soon as the customer has left, so the hand-over itself would never happen.
        self.t.call("transfer_to_human_agents", {"summary": summary})

    def _end(self, text: str) -> None:
        if not self.t.env.simulator.finished:
            self.t.say(text)

    def _target_order(self) -> str | None:
        if "wrong_order" not in self.mistakes:
            return self.s.order_id
        orders = self.s.initial_state["orders"]
        others = _other_orders(self.s)
        if self.s.intent == "order_status":
            others = [o for o in others if orders[o]["status"] != orders[self.s.order_id]["status"]]
        return self.rng.choice(others)

    def _read_target(self) -> tuple[str, dict[str, Any]]:
        """(name, arguments) of the read that justifies the action; performs it."""
        order_id = self._target_order()
        if order_id is None:
            read = ("get_user_details", {"user_id": self.s.user_id})
        else:
            read = ("get_order_details", {"order_id": order_id})
        self.result = self.t.call(*read)
        return read

    def _loop(self, read: tuple[str, dict[str, Any]]) -> None:
        for _ in range(_LOOP_REPEATS):
            self.t.call(*read)
        self._end("I'm sorry, I'm having trouble with our system right now. Please try again later.")

    def _tell_status(self, read: tuple[str, dict[str, Any]]) -> None:
        order_id = read[1]["order_id"]
        status = json.loads(self.result)["status"] if not self.result.startswith("Error") else "unknown"
        self.t.say(f"Your request has been completed: order {order_id} is currently {status}.")
        self._end("Is there anything else I can help you with? Have a great day!")

    def _write(self) -> None:
        write = self.s.write
        assert write is not None  # every non-read, non-escalation scenario has a gold write
        name, arguments = write["name"], dict(write["arguments"])
        if "order_id" in arguments:
            arguments["order_id"] = self._target_order()
        if "cancel_non_pending" in self.mistakes:
            name, arguments = "cancel_pending_order", {"order_id": arguments["order_id"], "reason": "no longer needed"}
        if "wrong_item" in self.mistakes:
            arguments = self._swap_item(arguments)
        if name == write["name"]:  # not a mistake's other write
            arguments.update(self.heard)
        for product_id in self._products_of(arguments):
            self.t.call("get_product_details", {"product_id": product_id})
        self.t.say(_proposal(name, arguments, self.s))
        result = self.t.call(name, arguments)
        if result.startswith("Error"):
            self._end(f"I'm sorry, I was unable to complete that: {result[len('Error: ') :]}. Have a good day.")
            return
        self.t.say(_confirmation(name, arguments, self.s))
        self._end("Is there anything else I can help you with? Have a great day!")

    def _swap_item(self, arguments: dict[str, Any]) -> dict[str, Any]:
        chosen = list(arguments["item_ids"])
        order = self.s.initial_state["orders"][self.s.order_id]
        spare = [item["item_id"] for item in order["items"] if item["item_id"] not in chosen]
        chosen[self.rng.randrange(len(chosen))] = self.rng.choice(spare)
        return {**arguments, "item_ids": sorted(chosen) if "new_item_ids" not in arguments else chosen}

    def _products_of(self, arguments: dict[str, Any]) -> list[str]:
        if "new_item_ids" not in arguments:
            return []
        order = self.s.initial_state["orders"].get(arguments["order_id"], {"items": []})
        by_item = {item["item_id"]: item["product_id"] for item in order["items"]}
        return list(dict.fromkeys(by_item[i] for i in arguments["item_ids"] if i in by_item))


def _reason_in(reply: str) -> dict[str, str] | None:
    """The cancel reason a reply names, as the cancellation's argument; None when it names none."""
    reason = next((reason for reason in CANCEL_REASONS if reason in reply.lower()), None)
    return None if reason is None else {"reason": reason}


def _payment_method_in(reply: str) -> dict[str, str] | None:
    """The first payment method id a reply names, as the change's argument; None when it names
    none ("the original payment method")."""
    found = PAYMENT_ID.search(reply)
    return None if found is None else {"payment_method_id": found.group(0)}


def _address_in(reply: str) -> dict[str, str] | None:
    """The address a reply gives as "The address is <street>, <suite>, <city>, <state>, <zip>,
    <country>." (`ADDRESS_FIELDS`' order; the suite may be absent), as an address change's
    arguments; None otherwise.

    >>> _address_in("As I said, The address is 1 Elm St, Austin, TX, 78701, USA.")["address2"]
    ''
    >>> _address_in("I don't have a new address.") is None
    True
    """
    found = re.search(r"address is (.+?)\.?$", reply.strip())
    parts = found.group(1).split(", ") if found else []
    if len(parts) == len(ADDRESS_FIELDS) - 1:
        parts.insert(1, "")
    if len(parts) != len(ADDRESS_FIELDS):
        return None
    return dict(zip(ADDRESS_FIELDS, parts, strict=True))


# write tool -> (the question, how the answer is read into the write's arguments, what is said
# when the answer gives none). The person who takes a hand-over asks the same questions
# (`detail_question`). The cancellation's wording is the one the shipped recipe's demonstrations
# were built with; a payment question must not read as a proposal to the customer ("would you
# like me to" is one).
_DETAIL_QUESTIONS = {
    "cancel_pending_order": (
        "Could you tell me the reason for cancelling order {o}?",
        _reason_in,
        "I'm sorry, I need a reason to cancel the order. Have a good day.",
    ),
    "modify_pending_order_payment": (
        "Which payment method would you like to use for order {o}?",
        _payment_method_in,
        "I'm sorry, I need to know which payment method to use. Have a good day.",
    ),
    "return_delivered_order_items": (
        "Which payment method should the refund for order {o} go to?",
        _payment_method_in,
        "I'm sorry, I need to know where to send the refund. Have a good day.",
    ),
    "modify_pending_order_address": (
        "What is the new shipping address for order {o}?",
        _address_in,
        "I'm sorry, I need the new address to change it. Have a good day.",
    ),
    "modify_user_address": (
        "What is the new default address for your account?",
        _address_in,
        "I'm sorry, I need the new address to change it. Have a good day.",
    ),
}


# The changes whose question comes before the order is read. A cancellation's reason is one of two
# phrases, a copy of no distance; asked after the read, its question became what the shop stage's
# agent said after reading any pending order, status questions included (asked of 15 of 45 served
# status questions, 18 failed in all, against 2 of 45 failed with it asked before;
# bench/results/shipped_agent.md, "The payment method asked after the read"). Before the read,
# the cancellation parts from the other requests on the customer's words alone.
_ASKED_BEFORE_THE_READ = frozenset({"cancel_pending_order"})

# Worded so the persona customer recognises the action proposed, then the action done.
_PROPOSALS = {
    "cancel_pending_order": "I can cancel order {o} (reason: {reason}).",
    "return_delivered_order_items": "I can return the {items} from order {o}, refunded to {pm}.",
    "exchange_delivered_order_items": "I can exchange the {items} from order {o} for the new variant, settling "
    "any price difference with {pm}.",
    "modify_pending_order_items": "I can modify the {items} in order {o} to the new variant, settling any price "
    "difference with {pm}.",
    "modify_pending_order_address": "I can update the shipping address of order {o} to {address}.",
    "modify_pending_order_payment": "I can switch the payment method of order {o} to {pm}.",
    "modify_user_address": "I can update the default address on your account to {address}.",
}
_DONE_TEXT = {
    "cancel_pending_order": "Order {o} has been cancelled.",
    "return_delivered_order_items": "The return of order {o} has been requested.",
    "exchange_delivered_order_items": "The exchange for order {o} has been requested.",
    "modify_pending_order_items": "The items of order {o} have been modified.",
    "modify_pending_order_address": "The shipping address of order {o} has been updated.",
    "modify_pending_order_payment": "The payment method of order {o} has been updated.",
    "modify_user_address": "Your default address has been updated.",
}


def _fill(template: str, a: Mapping[str, Any], order: Mapping[str, Any]) -> str:
    names = {item["item_id"]: item["name"] for item in order.get("items") or ()}
    address = ", ".join(str(a.get(k)) for k in ("address1", "address2", "city", "state", "zip", "country"))
    return template.format(
        o=a.get("order_id"),
        reason=a.get("reason"),
        pm=a.get("payment_method_id"),
        items=" and the ".join(names.get(i, f"item {i}") for i in a.get("item_ids", [])),
        address=address,
    )


def _order_of(scenario: Scenario) -> Mapping[str, Any]:
    """The scenario's order, whose item names a proposal says (even when a mistake names another)."""
    return scenario.initial_state["orders"].get(scenario.order_id or "", {"items": []})


def _phrases(name: str, a: Mapping[str, Any], order: Mapping[str, Any]) -> tuple[str, str]:
    """(the confirmation question, the report after success) of the write `name` on `order`."""
    return _fill(_PROPOSALS[name], a, order) + " Shall I proceed?", _fill(_DONE_TEXT[name], a, order)


def _proposal(name: str, a: dict[str, Any], scenario: Scenario) -> str:
    """The confirmation question for a write."""
    return _phrases(name, a, _order_of(scenario))[0]


def _confirmation(name: str, a: dict[str, Any], scenario: Scenario) -> str:
    """The report after a successful write."""
    return _phrases(name, a, _order_of(scenario))[1]


def detail_question(name: str, arguments: Mapping[str, Any]) -> str | None:
    """What the expert asks, after reading the record and before proposing the change `name`
    with `arguments`, for what only the customer can say; None when it asks nothing.

    >>> detail_question("modify_pending_order_payment", {"order_id": "#W1", "payment_method_id": "paypal_2"})
    'Which payment method would you like to use for order #W1?'
    """
    asked = _DETAIL_QUESTIONS.get(name)
    return None if asked is None else asked[0].format(o=arguments.get("order_id"))


def change_phrases(name: str, arguments: Mapping[str, Any], initial_state: Mapping[str, Any]) -> tuple[str, str] | None:
    """(proposal, confirmation) of the write `name` as this agent words them, on the order the
    arguments name; None for a tool that is no write of the shop."""
    if name not in _PROPOSALS:
        return None
    return _phrases(name, arguments, (initial_state.get("orders") or {}).get(str(arguments.get("order_id")), {}))


def run_policy(policy: Policy, scenario: Scenario, seed: int = 0, max_turns: int = DEFAULT_MAX_TURNS) -> Conversation:
    """Drive one conversation about `scenario` with `policy` through the sandbox's rollout loop."""
    conversation = scenario_conversation(scenario, seed)
    roll_out(policy, [conversation], max_turns)
    return conversation
