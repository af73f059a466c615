"""The simulated customer: knows only its `user_scenario`, answers the agent, judges the outcome.

`PersonaSimulator` is rule-based and deterministic for a seed (phrasing varies by seed, facts and
decisions never do): it reveals facts when asked, confirms proposals that match its goals (the
intent and order, and nothing it knows to be wrong: its items, and the payment method, address
and cancel reason it asked for) and refuses others with the correction, and tracks its mood.
`training.customers.make_simulator` picks it, or the LLM-backed simulator (`training.customers.llm`)
when given a chat backend; both satisfy `CustomerSimulator`.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any

from domains.retail.tools_write import CANCEL_REASONS
from training.customers.base import ENDED, PERSONAS, SimulatedCustomerState

_ORDER_ID = re.compile(r"#W\d+")
PAYMENT_ID = re.compile(r"\b(?:credit_card|gift_card|paypal)_\d+\b")  # the facts' and a proposal's
# The intents whose write names items (all of the goal's must be in the proposal), and those
# whose write names a payment method (the one the customer asked for, when it named one).
_ITEM_INTENTS = frozenset({"return_items", "exchange_items", "modify_order_items"})
_PAYING_INTENTS = _ITEM_INTENTS | {"modify_order_payment"}
_ADDRESS_INTENTS = frozenset({"modify_order_address", "modify_user_address"})
_AUTH_FACTS = ("email", "name", "zip")


@dataclass
class Goal:
    """One thing the customer wants done: an intent, on an order when it names one."""

    intent: str
    order_id: str | None = None
    items: list[str] = field(default_factory=list)
    done: bool = False


@dataclass
class Facts:
    """What the customer knows, from `known_info` first and the free-text instruction second."""

    email: str | None = None
    first_name: str | None = None
    last_name: str | None = None
    zip: str | None = None
    reason: str | None = None
    payment_method_id: str | None = None
    address: str | None = None
    goals: list[Goal] = field(default_factory=list)

    @property
    def order_ids(self) -> list[str]:
        return list(dict.fromkeys(g.order_id for g in self.goals if g.order_id))

    @property
    def item_names(self) -> list[str]:
        return [item for g in self.goals for item in g.items]


# Clause patterns of reference-style instructions ("Cancel order #W1 because ...", "For #W1, exchange ...").
_CLAUSES = [
    (re.compile(r"cancel (?:my )?(?:order )?(#W\d+)", re.I), "cancel_order"),
    (re.compile(r"return (?:order )?(#W\d+)", re.I), "return_items"),
    (re.compile(r"for (#W\d+), exchange", re.I), "exchange_items"),
    (re.compile(r"for (#W\d+), modify", re.I), "modify_order_items"),
    (re.compile(r"for (#W\d+), change address", re.I), "modify_order_address"),
    (re.compile(r"for (#W\d+), change payment", re.I), "modify_order_payment"),
    (re.compile(r"status of (?:my )?(?:order )?(#W\d+)", re.I), "order_status"),
]


# The order an address's fields are said in ("The address is <address1>, <address2>, ..."): a
# reader of the customer's answer splits it back by the same tuple.
ADDRESS_FIELDS = ("address1", "address2", "city", "state", "zip", "country")


def _format_address(value: Any) -> str:
    if isinstance(value, dict):
        parts = [value.get(k) for k in ADDRESS_FIELDS]
        return ", ".join(str(p) for p in parts if p)
    return str(value)


_ADDRESS_PAIR = re.compile(r"""['"](\w+)['"]\s*:\s*(?:'([^']*)'|"([^"]*)"|(None|null))""")


def _address_fields(text: str) -> dict[str, str]:
    r"""The key/value pairs of an address written as a Python or JSON object, read by pattern.

    The instruction is producer text: it is never evaluated, and a field that does not parse is
    simply absent (the customer then does not know it).

    >>> _address_fields("{'address1': '1 Elm St', \"address2\": null, 'zip': '02110'}")
    {'address1': '1 Elm St', 'zip': '02110'}
    """
    found: dict[str, str] = {}
    for key, single, double, _none in _ADDRESS_PAIR.findall(text):
        value = single or double
        if value:
            found[key] = value
    return found


def _instruction_goals(text: str) -> list[Goal]:
    found: list[tuple[int, Goal]] = []
    for pattern, intent in _CLAUSES:
        for match in pattern.finditer(text):
            clause = text[match.end() :].split(". ", 1)[0]
            if intent == "return_items":
                items = [s.strip() for s in clause.split(":", 1)[-1].split(";") if s.strip()]
            else:
                items = re.findall(r"([A-Z][A-Za-z' -]*?) \{", clause)
            found.append((match.start(), Goal(intent, match.group(1), items)))
    return [goal for _, goal in sorted(found, key=lambda pair: pair[0])]


def scenario_facts(user_scenario: dict[str, Any]) -> Facts:
    """Facts from `known_info`, gaps filled from the instruction (tau-bench style briefs).

    >>> f = scenario_facts({"instruction": "Your name is Sofia Kovacs and your zip code is 19049. "
    ...                     "Cancel order #W1 because no longer needed. ", "known_info": {}, "persona": ""})
    >>> (f.first_name, f.zip, f.order_ids, f.reason)
    ('Sofia', '19049', ['#W1'], 'no longer needed')
    """
    info = dict(user_scenario.get("known_info") or {})
    text = str(user_scenario.get("instruction") or "")
    facts = Facts(
        **{k: info.get(k) for k in ("email", "first_name", "last_name", "zip", "reason", "payment_method_id")}
    )
    if info.get("address") is not None:
        facts.address = _format_address(info["address"])
    if (m := re.search(r"[Yy]our name is ([A-Z][\w'-]*) ([A-Z][\w' -]*?)(?: and|[.,])", text)) and not facts.first_name:
        facts.first_name, facts.last_name = m.group(1), facts.last_name or m.group(2)
    if (m := re.search(r"zip code is (\d{5})", text)) and not facts.zip:
        facts.zip = m.group(1)
    if (m := re.search(r"email is ([\w.+-]+@[\w-]+(?:\.[\w-]+)+)", text)) and not facts.email:
        facts.email = m.group(1)
    if (m := re.search(r"because (no longer needed|ordered by mistake)", text)) and not facts.reason:
        facts.reason = m.group(1)
    if (m := re.search(rf"(?:via|payment to) ({PAYMENT_ID.pattern})", text)) and not facts.payment_method_id:
        facts.payment_method_id = m.group(1)
    if (m := re.search(r"change address to (\{[^}]*\})", text)) and not facts.address:
        parsed = _address_fields(m.group(1))
        facts.address = _format_address(parsed) if parsed else None
    intent = info.get("intent")
    order_ids = [str(o) for o in info.get("order_ids") or []]
    if intent:
        items = [str(i) for i in info.get("item_names") or []]
        facts.goals = [Goal(intent, oid, items) for oid in order_ids] or [Goal(intent, None, items)]
    else:
        facts.goals = _instruction_goals(text) or [Goal("other", oid) for oid in _ORDER_ID.findall(text)[:1]]
    return facts


_GOAL_TEXT = {
    "cancel_order": "cancel order {o}",
    "return_items": "return {i}from order {o}",
    "exchange_items": "exchange {i}from order {o}",
    "modify_order_items": "change {i}on my pending order {o}",
    "modify_order_address": "change the shipping address of order {o}",
    "modify_order_payment": "change the payment method of order {o}",
    "modify_user_address": "update my default address",
    "order_status": "know the status of order {o}",
}
# Proposal keywords: every one found names an action the agent may be proposing.
_PROPOSALS = [
    ("default address", "modify_user_address"),
    ("user address", "modify_user_address"),  # the tool's own words (`modify_user_address`)
    ("cancel", "cancel_order"),
    ("exchang", "exchange_items"),
    ("return", "return_items"),
    ("address", "modify_order_address"),
    ("payment", "modify_order_payment"),
    ("modif", "modify_order_items"),
    ("chang", "modify_order_items"),
    ("status", "order_status"),
]
_VOICE = {
    "polite": {
        "open": ["Hi! I'd like to {g}.", "Hello, could you help me {g}?"],
        "yes": ["Yes, please go ahead.", "Yes, that's right. Thank you!"],
        "no": ["No, that's not what I asked for. I want to {g}."],
        "thanks": ["Thank you so much!"],
        "bye": ["That's all, thank you. Goodbye!"],
        "upset": ["Oh no. Could you try again? I need to {g}."],
        "again": ["As I said, "],
    },
    "angry": {
        "open": ["This is ridiculous. I need to {g}, now.", "I've waited long enough. {G}."],
        "yes": ["Yes. Just do it."],
        "no": ["No! That's wrong. I said I want to {g}."],
        "thanks": ["Finally."],
        "bye": ["About time. Bye."],
        "upset": ["Are you kidding me? I need to {g}!"],
        "again": ["I ALREADY told you: "],
    },
    "confused": {
        "open": ["Um, hello? I think I need to {g}... is that possible?"],
        "yes": ["Oh, um, yes, I think so. Yes."],
        "no": ["Wait, no, I don't think so... I wanted to {g}?"],
        "thanks": ["Oh! Okay, thank you."],
        "bye": ["I think that's everything... bye!"],
        "upset": ["I'm sorry, I don't understand. I just want to {g}."],
        "again": ["Um, I think I said, "],
    },
    "terse": {
        "open": ["{G}."],
        "yes": ["Yes."],
        "no": ["No. {G}."],
        "thanks": ["Thanks."],
        "bye": ["Bye."],
        "upset": ["{G}."],
        "again": ["Already said: "],
    },
}
_VOICE["plays_dumb"] = {**_VOICE["polite"], "open": ["Hi. I want to {g}."]}
_CUES = {
    "email": r"e-?mail",
    "name": r"\bname\b",
    "zip": r"\bzip|postal",
    "order": r"order (?:id|number)|which order",
    "items": r"\bitems?\b|which product",
    "reason": r"\breason\b|\bwhy\b",
    "payment": r"payment|refund to|pay with|\bcard\b",
    "address": r"address",
}
_ASKING = re.compile(
    r"provide|share|tell me|what(?:'s| is| are)|may i (?:have|get)|can i (?:have|get)|"
    r"could you (?:give|send)|please (?:give|send)|need your|verify|which|\?",
    re.I,
)
_CONFIRM = re.compile(
    r"shall i|should i|do you want me to|would you like me to|proceed|go ahead|"
    r"confirm (?:that|this|the)|\(yes/no\)|is that (?:right|correct)",
    re.I,
)
_ERROR = re.compile(
    r"\b(?:sorry|unable|cannot|can't|couldn't|could not|failed|error|not possible|unfortunately)\b", re.I
)
_DONE = re.compile(
    r"\b(?:has|have) been (?:successfully )?(?:cancel|return|exchang|modif|updat|chang|process|submit|"
    r"complet|request)|\bsuccessfully\b|\ball set\b|\bi(?:'ve| have) (?:now )?(?:cancel|return|"
    r"exchang|modif|updat|chang|process|submit)",
    re.I,
)
_TRANSFER = re.compile(r"transfer\w*\b.*\b(?:human|agent|specialist|representative)", re.I | re.S)
_CLOSING = re.compile(r"anything else|have a (?:great|nice|good) day", re.I)
_SPECIFIC = {"modify_order_address", "modify_order_payment", "modify_user_address"}


class PersonaSimulator(SimulatedCustomerState):
    """A rule-based customer with one of PERSONAS' voices; deterministic for a seed.

    `persona` is free text: the first persona name it contains sets the voice (default polite),
    and the word "forthcoming" makes the customer volunteer its identity in the opening message.
    """

    def __init__(self, user_scenario: dict[str, Any], seed: int = 0) -> None:
        self.facts = scenario_facts(user_scenario)
        words = re.sub(r"[\s-]+", "_", str(user_scenario.get("persona") or "").lower())
        self.persona = next((p for p in PERSONAS if p in words), "polite")
        self.forthcoming = "forthcoming" in words
        self._rng = random.Random(seed)
        self._asked: dict[str, int] = {}
        self._mood = 0.0
        self._finished = False

    def _say(self, kind: str, goal_text: str = "") -> str:
        line = self._rng.choice(_VOICE[self.persona][kind])
        return line.replace("{g}", goal_text).replace("{G}", goal_text[:1].upper() + goal_text[1:])

    def _feel(self, change: float) -> None:
        # An angry customer is hurt more by setbacks and pleased less by success.
        if self.persona == "angry":
            change *= 1.5 if change < 0 else 0.5
        self._mood = max(-1.0, min(1.0, self._mood + change))

    def _pending(self) -> Goal | None:
        return next((g for g in self.facts.goals if not g.done), None)

    def _goal_text(self, goal: Goal | None) -> str:
        if goal is None:
            return "get some help with my account"
        items = "the " + " and the ".join(goal.items) + " " if goal.items else ""
        template = _GOAL_TEXT.get(goal.intent, "get help with order {o}" if goal.order_id else "get some help")
        return template.format(o=goal.order_id or "my order", i=items)

    def _name_zip(self) -> str:
        f = self.facts
        if not (f.first_name and f.zip):
            return ""
        return f"My name is {f.first_name} {f.last_name or ''}".rstrip() + f" and my zip code is {f.zip}."

    def _email(self) -> str:
        return f"My email is {self.facts.email}." if self.facts.email else ""

    def opening_message(self) -> str:
        """The reason for contact in the persona's voice; identity only if forthcoming."""
        text = self._say("open", self._goal_text(self._pending()))
        return f"{text} {self._name_zip() or self._email()}".strip() if self.forthcoming else text

    def reply(self, agent_message: str) -> str:
        """The customer's answer to one agent message (see the module docstring for the rules)."""
        if self._finished:
            return ENDED
        text = str(agent_message)
        if _TRANSFER.search(text):
            self._finished = True
            if self._pending() is not None:
                self._feel(-0.5)
            return self._say("bye")
        asked = [fact for fact, cue in _CUES.items() if re.search(cue, text, re.I)] if _ASKING.search(text) else []
        if _CONFIRM.search(text):
            return self._answer_proposal(text)
        if asked:
            return self._answer_facts(asked)
        if _DONE.search(text) and self._pending() is not None:
            return self._mark_done(text)
        if _ERROR.search(text):
            self._feel(-0.15)
            return self._say("upset", self._goal_text(self._pending()))
        if _CLOSING.search(text) or self._pending() is None:
            return self._close()
        return self._say("open", self._goal_text(self._pending()))

    def _answer_proposal(self, text: str) -> str:
        lowered = text.lower()
        intents = {intent for key, intent in _PROPOSALS if key in lowered}
        # "change the address" also says "change": the generic item intent yields to a specific one.
        if intents & _SPECIFIC and "item" not in lowered:
            intents.discard("modify_order_items")
        if "modify_user_address" in intents:
            intents.discard("modify_order_address")
        ids = set(_ORDER_ID.findall(text))
        matching = [
            g
            for g in self.facts.goals
            if not g.done
            and (not intents or g.intent in intents)
            and (not ids or g.order_id in ids or g.order_id is None)
        ]
        if matching and (intents or ids):
            corrections = [self._mismatch(goal, text) for goal in matching]
            if any(not c for c in corrections):
                return self._say("yes")
            self._feel(-0.1)
            return f"{self._say('no', self._goal_text(matching[0]))} {corrections[0]}"
        self._feel(-0.1)
        return self._say("no", self._goal_text(self._pending()))

    def _mismatch(self, goal: Goal, text: str) -> str:
        """What the customer says to correct a proposal for `goal` that names what it did not ask
        for ("" when nothing it knows is wrong): items it wants left out, another payment method
        than the one it named, an address that is not the one it gave, another cancel reason than
        its own. What it does not know (the item ids, a payment method it never named) it cannot
        check."""
        lowered, f = text.lower(), self.facts
        if goal.intent in _ITEM_INTENTS:
            missing = [item for item in goal.items if item.lower() not in lowered]
            if missing:
                return f"I meant the {' and the '.join(missing)}."
        named = set(PAYMENT_ID.findall(text))
        if goal.intent in _PAYING_INTENTS and f.payment_method_id and named and f.payment_method_id not in named:
            return f"Please use {f.payment_method_id}."
        parts = f.address.split(", ") if f.address else []
        if goal.intent in _ADDRESS_INTENTS and any(part.lower() not in lowered for part in parts):
            return f"The address is {f.address}."
        reasons = {reason for reason in CANCEL_REASONS if reason in lowered}
        if goal.intent == "cancel_order" and f.reason and reasons and f.reason not in reasons:
            return f"The reason is: {f.reason}."
        return ""

    def _answer_facts(self, asked: list[str]) -> str:
        count = {fact: self._asked.get(fact, 0) + 1 for fact in asked}
        self._asked.update(count)
        if self.persona == "plays_dumb" and any(count[f] == 1 for f in asked if f in _AUTH_FACTS):
            return "Why do you need that? I just want my problem solved."
        # A question the customer already answered; playing dumb, the first refusal does not count.
        repeated = [f for f in asked if count[f] > (2 if self.persona == "plays_dumb" and f in _AUTH_FACTS else 1)]
        if repeated:
            self._feel(-0.1)
        f, parts = self.facts, []
        name_zip, email = self._name_zip(), self._email()
        if "name" in asked or "zip" in asked:
            parts.append(name_zip or (f"I don't remember that. {email}" if email else "I'd rather not say."))
        if "email" in asked:
            parts.append(email or (f"I don't remember my email. {name_zip}" if name_zip else "I don't remember it."))
        answers = {
            "order": f"It's order {' and '.join(f.order_ids)}." if f.order_ids else "I don't have the order number.",
            "items": f"The {', the '.join(f.item_names)}." if f.item_names else "I'm not sure of the item names.",
            "reason": f"The reason is: {f.reason}." if f.reason else "I'd rather not say why.",
            "payment": f"Please use {f.payment_method_id}." if f.payment_method_id else "The original payment method.",
            "address": f"The address is {f.address}." if f.address else "I don't have a new address.",
        }
        parts += [answers[fact] for fact in asked if fact in answers]
        text = " ".join(dict.fromkeys(p for p in parts if p))
        return f"{self._say('again')}{text}" if repeated else text

    def _mark_done(self, text: str) -> str:
        ids = set(_ORDER_ID.findall(text))
        goal = next((g for g in self.facts.goals if not g.done and g.order_id in ids), None) or self._pending()
        if goal is None:  # reply() only calls this with a goal pending
            raise RuntimeError("no pending goal to mark done")
        goal.done = True
        self._feel(0.4)
        nxt = self._pending()
        if nxt is None:
            return self._close()
        return f"{self._say('thanks')} I also need to {self._goal_text(nxt)}."

    def _close(self) -> str:
        nxt = self._pending()
        if nxt is not None:
            return self._say("open", self._goal_text(nxt))
        self._finished = True
        self._feel(0.2)
        return self._say("bye")
