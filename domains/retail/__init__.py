"""The retail domain (tau-bench retail): registered as `retail` in the `agent_retrain.domains` group."""

from domains.retail.domain import RetailDomain

domain = RetailDomain()

__all__ = ["RetailDomain", "domain"]
