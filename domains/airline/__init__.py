"""The tau-bench airline domain (sierra-research/tau-bench at 59a200c, MIT; see data/LICENSE.tau-bench).

Entry point `airline = "domains.airline:domain"` (group `agent_retrain.domains`) loads `domain`.
"""

from domains.airline.domain import AirlineDomain

domain = AirlineDomain()

__all__ = ["AirlineDomain", "domain"]
