"""A rule-based customer for any domain, from the facts the domain parses out of a scenario.

Domains with a simulator of their own (`Domain.make_customer`) use that one; every other domain
gets this one: it opens with its request, gives an identity field or a detail when the agent
names it, says yes to a proposal, says goodbye when the agent wraps up, and leaves after a
bounded number of turns. Deterministic for a seed (the phrasing varies by seed, never the facts).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from typing import Any

from domains.api import CustomerFacts
from training.customers.base import ENDED, SimulatedCustomerState

MAX_REPLIES = 12
_CONFIRM = re.compile(
    r"\b(confirm|proceed|go ahead|shall i|should i|do you want|would you like|is that ok|yes or no)\b", re.I
)
_WRAP_UP = re.compile(r"\b(anything else|is there anything|have a (?:great|good|nice) day|glad i could help)\b", re.I)
_MOOD = {"angry": -0.15, "demanding": -0.1, "confused": -0.05}
_PERSONA_SENTENCE = re.compile(r"\bYou are (?:a |an )?[a-z ,_-]+\.", re.I)


def _first_person(text: str) -> str:
    """The brief, as the customer would say it: "Your id is X. You want Y" -> "My id is X. I want Y"."""
    text = _PERSONA_SENTENCE.sub("", text)
    for pattern, replacement in (
        (r"\bYour\b", "My"),
        (r"\byour\b", "my"),
        (r"\bYou are\b", "I am"),
        (r"\byou are\b", "I am"),
    ):
        text = re.sub(pattern, replacement, text)
    text = re.sub(r"\bYou\b", "I", text)
    text = re.sub(r"\byou\b", "me", text)
    return " ".join(text.split())


class GenericSimulator(SimulatedCustomerState):
    """A customer who knows `facts` and behaves as `persona`."""

    def __init__(self, facts: CustomerFacts, persona: str = "polite", seed: int = 0) -> None:
        self.facts = facts
        self.persona = persona
        self._rng = random.Random(seed)
        self._replies = 0
        self._mood = 0.0
        self._finished = False

    def opening_message(self) -> str:
        greeting = self._rng.choice(("Hi.", "Hello.", "Hi there."))
        request = _first_person(self.facts.request) or "I need some help."
        return f"{greeting} {request}"

    def reply(self, agent_message: str) -> str:
        if self._finished:
            return ENDED
        self._replies += 1
        self._mood += _MOOD.get(self.persona, 0.0)
        text = str(agent_message)
        lowered = text.lower()
        if self._replies >= MAX_REPLIES or _WRAP_UP.search(text):
            self._finished = True
            return "No, that's all. Thank you."
        asked = [(k, v) for k, v in {**self.facts.identity, **self.facts.details}.items() if _names(lowered, k)]
        if asked:
            return " ".join(f"My {k.replace('_', ' ')} is {v}." for k, v in asked)
        if _CONFIRM.search(text):
            if self.facts.confirms:
                self._mood += 0.1
                return "Yes, please go ahead."
            return "No, please don't do that."
        if self.persona == "terse":
            return "Please just do what I asked."
        return _first_person(self.facts.request) or "Can you help me?"


def _names(text: str, field: str) -> bool:
    """Whether the agent's message asks for `field` ("user_id" -> "user id" or "user_id")."""
    spaced = field.replace("_", " ")
    return field in text or spaced in text or (field.endswith("_id") and spaced[:-3] + " id" in text)


def generic_simulator(facts: CustomerFacts, user_scenario: Mapping[str, Any], seed: int) -> GenericSimulator:
    return GenericSimulator(facts, persona=str(user_scenario.get("persona") or "polite"), seed=seed)
