"""Identifier relabelling: SFT copies of a trajectory that can be fitted only by copying.

A policy must copy the customer's name, zip and order id from the conversation into its calls.
A tiny policy SFT-trained on a few hundred real trajectories fits the identifiers by memorising
them instead (each training customer's zip follows from their name after a few epochs), and
then writes a training customer's zip for a customer it never saw: measured in
bench/results/learning.md, copying took ~1,000 SFT steps to emerge. Relabelling removes the
shortcut: each copy of a trajectory gets fresh identifiers, consistently throughout the
conversation (every identifier-like run of digits becomes another run of the same length; the
customer's names become other names from the log; an e-mail pseudonym, `user_<16 hex>@masked.invalid`
as ingestion writes it, gets fresh hex; amounts are kept), so an identifier in a call is predictable only from
where it appears earlier in the same conversation. The system prompt and the tool schemas are
left as they are, and the structure (which tool, which argument, which words) never changes.
"""

from __future__ import annotations

import functools
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from dataplane.scrub import PSEUDONYM_RE
from training.fields import as_dict

# Identifiers are runs of four or more digits (zip, order id, user id suffix, item and payment
# ids). Shorter runs and any run inside a decimal amount are left alone: prices, refunds and
# counts must still add up the way the conversation states them.
_DIGIT_RUN = re.compile(r"(?<![\d.])\d{4,}(?![\d])(?!\.\d)")


def customer_names(record: Mapping[str, Any]) -> tuple[str, ...]:
    """The customer's first and last name as the scenario knows them (empty when unknown)."""
    known = as_dict(record.get("user_scenario")).get("known_info") or {}
    return tuple(str(known[k]) for k in ("first_name", "last_name") if known.get(k))


def name_pool(names: Iterable[Sequence[str]]) -> tuple[str, ...]:
    """Every name in `names` (one sequence per customer, e.g. from `customer_names`): the names a
    relabelled copy draws from (a log's own names, so the tokenizer built on that log spells them)."""
    return tuple(sorted({name for customer in names for name in customer}))


@functools.lru_cache(maxsize=8)
def _opening_pattern(openings: frozenset[str]) -> re.Pattern | None:
    """The openings where they open a digit run (longest first), compiled once per set: a copy is
    relabelled for every example a stage trains on."""
    if not openings:
        return None
    alternatives = "|".join(map(re.escape, sorted(openings, key=len, reverse=True)))
    return re.compile(rf"(?<![A-Za-z0-9_])({alternatives})(?=\d{{4,}})")


class Relabeller:
    """One consistent renaming: the same digit run or name maps to the same replacement.

    `prefix_groups` (a domain's `Domain.interchangeable_prefixes`): openings of identifiers that
    name one kind of record each, such as a payment method's source (`credit_card_`, `paypal_`).
    A copy swaps the members of each group by one random permutation, wherever one opens a digit
    run. A log in which most methods are credit cards otherwise lets a policy fit the source by its
    prior: the shop stage's agent named `credit_card_` in every proposal, whichever method the
    customer said. Swapped, the source in a call is predictable only from the conversation.
    """

    def __init__(
        self,
        names: Sequence[str],
        pool: Sequence[str],
        rng: random.Random,
        prefix_groups: Sequence[Sequence[str]] = (),
    ):
        self._rng = rng
        self._digits: dict[str, str] = {}
        self._pseudonyms: dict[str, str] = {}
        self._names: dict[str, str] = {}
        self._groups = [tuple(group) for group in prefix_groups if len(group) > 1]
        self._swaps: dict[str, str] | None = None  # drawn at the first prefix the copy meets
        self._prefix_re = _opening_pattern(frozenset(prefix for group in self._groups for prefix in group))
        for name in names:
            if name not in self._names:
                new = rng.choice(pool) if pool else name
                self._names[name], self._names[name.lower()] = new, new.lower()
        words = sorted(self._names, key=len, reverse=True)
        # Letters only as the boundary: a user id (`omar_schmidt_5859`) or an email spells the
        # name between underscores and dots, which `\b` would not split.
        alternatives = "|".join(map(re.escape, words))
        self._name_re = re.compile(rf"(?<![A-Za-z])({alternatives})(?![A-Za-z])") if words else None

    def _digit_run(self, match: re.Match) -> str:
        run = match.group(0)
        if run not in self._digits:
            self._digits[run] = "".join(self._rng.choice("0123456789") for _ in run)
        return self._digits[run]

    def _pseudonym(self, match: re.Match) -> str:
        # A pseudonym is a keyed hash: without fresh hex, a model could learn each training
        # customer's hash instead of copying the one in the conversation.
        old = match.group(0)
        if old not in self._pseudonyms:
            fresh = "".join(self._rng.choice("0123456789abcdef") for _ in range(16))
            self._pseudonyms[old] = f"user_{fresh}{old[len('user_') + 16 :]}"
        return self._pseudonyms[old]

    def _prefix(self, match: re.Match) -> str:
        # Drawn lazily: a copy with no such identifier takes nothing from the stream, so copies of
        # conversations without one are relabelled exactly as before the swap existed.
        if self._swaps is None:
            self._swaps = {}
            for group in self._groups:
                self._swaps.update(zip(group, self._rng.sample(group, len(group)), strict=True))
        return self._swaps[match.group(0)]

    def text(self, value: str) -> str:
        if self._prefix_re is not None:
            value = self._prefix_re.sub(self._prefix, value)
        value = PSEUDONYM_RE.sub(self._pseudonym, value)
        value = _DIGIT_RUN.sub(self._digit_run, value)
        if self._name_re is not None:
            value = self._name_re.sub(lambda m: self._names[m.group(0)], value)
        return value

    def value(self, value: Any) -> Any:
        """Strings relabelled, inside dicts and lists too; numbers and other values as they are."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        if isinstance(value, list):
            return [self.value(item) for item in value]
        return value


def relabel_messages(
    messages: Sequence[Mapping[str, Any]],
    names: Sequence[str],
    pool: Sequence[str],
    rng: random.Random,
    prefix_groups: Sequence[Sequence[str]] = (),
) -> list[dict[str, Any]]:
    """A copy of a chat-form trajectory with its identifiers relabelled (the system message kept);
    `prefix_groups` as `Relabeller`'s."""
    relabeller = Relabeller(names, pool, rng, prefix_groups)
    out = []
    for message in messages:
        if message.get("role") == "system":
            out.append(dict(message))
            continue
        copy = {
            key: relabeller.value(item) if key in ("content", "tool_calls") else item for key, item in message.items()
        }
        out.append(copy)
    return out
