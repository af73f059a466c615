"""Simulated customers: the rule-based persona simulator (the default) and the LLM-backed one."""

from __future__ import annotations

from typing import Any

from training.customers.base import CustomerSimulator, SimulatedCustomerState
from training.customers.llm import LLMSimulator
from training.customers.persona import ENDED, PERSONAS, PersonaSimulator, scenario_facts

__all__ = [
    "ENDED",
    "PERSONAS",
    "CustomerSimulator",
    "LLMSimulator",
    "PersonaSimulator",
    "SimulatedCustomerState",
    "make_simulator",
    "scenario_facts",
]


def make_simulator(user_scenario: dict[str, Any], seed: int = 0, backend: Any = None) -> CustomerSimulator:
    """The persona simulator, or an LLM-backed one when a chat `backend` is given."""
    if backend is None:
        return PersonaSimulator(user_scenario, seed=seed)
    return LLMSimulator(backend, user_scenario, seed=seed)
