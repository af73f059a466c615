"""Tool-call distribution and its shift between two policies (total variation distance).

A candidate whose mix of tool calls moves far from the champion's is behaving differently in ways
the success metrics may not show yet (e.g. it stopped authenticating, or talks instead of acting);
the gate holds such a run for a person.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping


def distribution(names: Iterable[str]) -> dict[str, float]:
    """Shares of each name among all occurrences, sorted by name; empty input gives {}."""
    counts = Counter(names)
    total = sum(counts.values())
    return {name: counts[name] / total for name in sorted(counts)} if total else {}


def total_variation(p: Mapping[str, float], q: Mapping[str, float]) -> float:
    """Total variation distance: half the L1 distance over the union of keys.

    0 for identical distributions, 1 for disjoint ones. Each input must sum to 1 (within 1e-6),
    except that an empty mapping stands for "no calls at all": the distance to an empty
    distribution is 1 unless both are empty (0).

    >>> total_variation({"a": 0.5, "b": 0.5}, {"a": 1.0})
    0.5
    """
    for label, dist in (("p", p), ("q", q)):
        total = sum(dist.values())
        if dist and abs(total - 1.0) > 1e-6:
            raise ValueError(f"{label} is not a distribution: its shares sum to {total}")
        if any(v < 0 for v in dist.values()):
            raise ValueError(f"{label} has a negative share: {dict(dist)}")
    if not p and not q:
        return 0.0
    if not p or not q:
        return 1.0
    # fsum: the correctly rounded sum does not depend on the (hash-seeded) order of the keys, so the
    # same two distributions give the same distance in every process.
    return 0.5 * math.fsum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def largest_shifts(p: Mapping[str, float], q: Mapping[str, float], top: int = 3) -> list[tuple[str, float, float]]:
    """The `top` names whose share moved most from `q` to `p`, as (name, share in q, share in p):
    what a person reviewing a drift reads first.

    >>> largest_shifts({"a": 0.75, "b": 0.25}, {"a": 0.5, "c": 0.5}, top=2)
    [('c', 0.5, 0.0), ('a', 0.5, 0.75)]
    """
    names = sorted(set(p) | set(q), key=lambda k: (-abs(p.get(k, 0.0) - q.get(k, 0.0)), k))
    return [(k, q.get(k, 0.0), p.get(k, 0.0)) for k in names[:top] if p.get(k, 0.0) != q.get(k, 0.0)]
