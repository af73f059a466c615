"""What every simulated customer offers the environment, and the mood state they share."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

# The behaviours every rule-based simulator plays (the operators' persona mix).
PERSONAS = ("polite", "angry", "confused", "terse", "plays_dumb")
ENDED = "(The customer has left the conversation.)"


@runtime_checkable
class CustomerSimulator(Protocol):
    """What the environment's `send_message_to_customer` talks to."""

    def opening_message(self) -> str: ...
    def reply(self, agent_message: str) -> str: ...
    @property
    def sentiment_delta(self) -> float: ...
    @property
    def finished(self) -> bool: ...


class SimulatedCustomerState:
    """Mood and presence shared by every simulator: `_mood` accumulates, `_finished` ends the talk."""

    _mood: float = 0.0
    _finished: bool = False

    @property
    def sentiment_delta(self) -> float:
        return max(-1.0, min(1.0, self._mood))

    @property
    def finished(self) -> bool:
        return self._finished
