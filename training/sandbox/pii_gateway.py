"""The PII gateway: a served model sees customer data as ingestion stores it, never raw.

Every conversation the product trains and judges on comes from the store, where ingestion has
masked PII and turned each e-mail address into a keyed pseudonym (`dataplane.scrub`). A model
served on raw traffic would meet text it never saw in training: measured on the shipped tiny
agent, level-1 conversations whose customer gives an e-mail address failed at once (the address
was garbled into a malformed call), while the same conversations replayed from the store passed.
A real model would cope better, but it would still be judged on one distribution and serve
another, and it would hold raw PII in its context.

`PseudonymisedPolicy` wraps any policy. Before each turn it shows the policy the conversation
scrubbed with the domain's scanner (the one ingestion uses, so the view is the text the store
will hold); after the turn it gives the reply's pseudonyms (in its text and in every tool-call
argument) back as the addresses the customer and the tools wrote, so the world, the customer
and the stored record see what really happened. Masked kinds (cards, phones, IDs) stay masked:
no served tool needs one, and ingestion would mask them anyway.

The view of each conversation is kept from turn to turn and only new messages are scrubbed, so a
policy that caches per conversation (`training.prefix_cache`) keeps its cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dataplane.pii_records import domain_scanner
from dataplane.scrub import PiiScanner
from training.sandbox.rollout import Conversation, Message, Policy


class _View:
    """One conversation as the policy sees it, and the pseudonyms met in it so far."""

    def __init__(self, source: Sequence[Message]):
        self.source = source
        # A conversation like the source (its task, trial, seed, intent and sandbox), for a policy
        # that reads them (a scripted one finds its script by task); only the text is scrubbed.
        self.messages = Conversation(
            env=getattr(source, "env", None),
            task_id=getattr(source, "task_id", None),
            trial=getattr(source, "trial", 0),
            seed=getattr(source, "seed", 0),
            intent=getattr(source, "intent", None),
        )
        self.written: dict[str, str] = {}

    def sync(self, scanner: PiiScanner) -> Conversation:
        """The view with every message added to the conversation since the last turn scrubbed."""
        for message in list(self.source)[len(self.messages) :]:
            self.messages.append(self._scrubbed(message, scanner))
        return self.messages

    def _scrubbed(self, value: Any, scanner: PiiScanner) -> Any:
        if isinstance(value, str):
            text, written = scanner.pseudonymise(value)
            self.written.update(written)
            return text
        if isinstance(value, dict):
            return {key: self._scrubbed(item, scanner) for key, item in value.items()}
        if isinstance(value, list):
            return [self._scrubbed(item, scanner) for item in value]
        return value

    def restored(self, value: Any) -> Any:
        """`value` (the policy's reply) with every pseudonym of this conversation written back."""
        if isinstance(value, str):
            for token, address in self.written.items():
                if token in value:
                    value = value.replace(token, address)
            return value
        if isinstance(value, dict):
            return {key: self.restored(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.restored(item) for item in value]
        return value


class PseudonymisedPolicy:
    """`policy` behind the PII gateway of `domain` (see the module docstring)."""

    def __init__(self, policy: Policy, domain: str):
        self.policy, self.domain = policy, domain
        self.scanner = domain_scanner(domain)
        self.name = getattr(policy, "name", type(policy).__name__)
        self.max_live = getattr(policy, "max_live", None)
        self._views: dict[int, _View] = {}

    def view_of(self, messages: Sequence[Message]) -> list[Message]:
        """`messages` as the policy behind the gateway reads them (for measuring what it saw)."""
        return list(_View(messages).sync(self.scanner))

    def act(self, conversations: Sequence[Sequence[Message]]) -> list[Message]:
        views: dict[int, _View] = {}
        current: list[_View] = []
        for conversation in conversations:
            view = self._views.get(id(conversation))
            if view is None or view.source is not conversation:
                view = _View(conversation)
            views[id(conversation)] = view
            current.append(view)
        # Conversations absent from this turn have ended: their views go.
        self._views = views
        # Each view is the same list from turn to turn, as the conversation is for a bare policy.
        replies = list(self.policy.act([view.sync(self.scanner) for view in current]))
        # A wrong number of replies passes through as it came: the rollout names the policy and the counts.
        restored = [view.restored(reply) for view, reply in zip(current, replies, strict=False)]
        return restored + replies[len(current) :]
