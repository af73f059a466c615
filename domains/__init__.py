"""Domains: what is particular to one agent (its tools, world, policy text, customers, traffic).

`domains.api` is the interface the engine speaks; `domains.registry` finds installed domains by
name through the `agent_retrain.domains` entry-point group. The engine imports only these two;
each domain package (`domains.retail`, `domains.airline`, or a third party's) is loaded by name.
"""
