"""Simulated customers: the rule-based persona simulator (the default) and the LLM-backed one,
chosen by the `RETRAIN_CUSTOMER` setting (`training.customers.config`)."""

from __future__ import annotations

from typing import Any

from training.customers.base import CustomerSimulator, SimulatedCustomerState
from training.customers.config import CustomerConfigError, configured_backend
from training.customers.llm import LLMSimulator, SimulatorBackendError
from training.customers.persona import ENDED, PERSONAS, PersonaSimulator, scenario_facts
from training.customers.prompts import PERSONA_PROMPTS

__all__ = [
    "ENDED",
    "PERSONAS",
    "PERSONA_PROMPTS",
    "CustomerConfigError",
    "CustomerSimulator",
    "LLMSimulator",
    "PersonaSimulator",
    "SimulatedCustomerState",
    "SimulatorBackendError",
    "make_simulator",
    "scenario_facts",
]


def make_simulator(user_scenario: dict[str, Any], seed: int = 0, backend: Any = None) -> CustomerSimulator:
    """An LLM-played customer when a chat `backend` is given or `RETRAIN_CUSTOMER` names one, else
    the rule-based persona simulator."""
    chosen = backend if backend is not None else configured_backend()
    if chosen is None:
        return PersonaSimulator(user_scenario, seed=seed)
    return LLMSimulator(chosen, user_scenario, seed=seed)
