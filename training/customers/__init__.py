"""Simulated customers: the rule-based persona simulator (the default) and the LLM-backed one,
chosen by the `RETRAIN_CUSTOMER` setting (`training.customers.config`)."""

from __future__ import annotations

from typing import Any

from domains.registry import DEFAULT_DOMAIN, load_domain
from training.customers.base import ENDED, PERSONAS, CustomerSimulator, SimulatedCustomerState
from training.customers.config import CustomerConfigError, configured_backend
from training.customers.generic import GenericSimulator, generic_simulator
from training.customers.llm import LLMSimulator, SimulatorBackendError
from training.customers.prompts import PERSONA_PROMPTS

__all__ = [
    "ENDED",
    "PERSONAS",
    "PERSONA_PROMPTS",
    "CustomerConfigError",
    "CustomerSimulator",
    "GenericSimulator",
    "LLMSimulator",
    "SimulatedCustomerState",
    "SimulatorBackendError",
    "make_simulator",
]


def make_simulator(
    user_scenario: dict[str, Any], seed: int = 0, backend: Any = None, domain: str = DEFAULT_DOMAIN
) -> CustomerSimulator:
    """An LLM-played customer when a chat `backend` is given or `RETRAIN_CUSTOMER` names one, else
    the domain's rule-based customer, else the generic one built from the domain's scenario facts."""
    chosen = backend if backend is not None else configured_backend()
    if chosen is not None:
        return LLMSimulator(chosen, user_scenario, seed=seed)
    loaded = load_domain(domain)
    own = loaded.make_customer(user_scenario, seed)
    if own is not None:
        return own
    return generic_simulator(loaded.scenario_facts(user_scenario), user_scenario, seed)
