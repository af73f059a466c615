"""Deterministic train / calibration / shadow split by a salted sha256 of `customer_id`.

The split depends on nothing but the customer id and the salt, so a customer held out in one week
is held out in every week: a held-out customer can never reach training. Python's `hash()` is
salted per process and would break that, hence sha256. A split is cut per domain: `split_window`
keeps only the records of the domain it is asked for (a window holds one domain's rows anyway).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import astuple, dataclass

from dataplane.domain_rules import DEFAULT_DOMAIN
from dataplane.settings import setting

SPLITS = ("train", "calibration", "shadow")


@dataclass(frozen=True)
class SplitSettings:
    """The share of customers (not interactions) each split gets (`window_splits`' run config);
    the fields are in `SPLITS` order and sum to 1."""

    train: float = setting(0.8, "share of customers whose interactions train the candidate")
    calibration: float = setting(0.1, "share of customers held out for the calibration set (never trained on)")
    shadow: float = setting(0.1, "share of customers held out for the shadow replay (never trained on)")

    @property
    def fractions(self) -> tuple[float, float, float]:
        return astuple(self)


DEFAULT_FRACTIONS = SplitSettings().fractions
DEFAULT_SALT = "agent-retrain/splits/v1"


def _check_fractions(fractions: tuple[float, float, float]) -> None:
    if len(fractions) != len(SPLITS) or any(f < 0 for f in fractions) or not math.isclose(sum(fractions), 1.0):
        raise ValueError(f"fractions must be {len(SPLITS)} non-negative numbers summing to 1, got {fractions}")


def stable_point(key: str, salt: str) -> float:
    """A point in [0, 1) fixed by `key` and `salt` alone (a salted sha256): the same on every run and
    machine, and unrelated between salts. The split places customers by it; other stable draws
    (the calibration draw) use it with their own salt."""
    digest = hashlib.sha256(f"{salt}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64  # uniform in [0, 1)


def split_of(
    customer_id: str, fractions: tuple[float, float, float] = DEFAULT_FRACTIONS, salt: str = DEFAULT_SALT
) -> str:
    """ "train", "calibration" or "shadow" for this customer, stable across runs and machines."""
    _check_fractions(fractions)
    point = stable_point(customer_id, salt)
    edge = 0.0
    for name, share in zip(SPLITS, fractions):
        edge += share
        if point < edge:
            return name
    return SPLITS[-1]  # float rounding at the top edge


def split_window(
    records: list[dict],
    fractions: tuple[float, float, float] = DEFAULT_FRACTIONS,
    salt: str = DEFAULT_SALT,
    domain: str = DEFAULT_DOMAIN,
) -> dict[str, list[dict]]:
    """`domain`'s records grouped by their customer's split, window order kept; every split key
    present. Records of other domains are left out (a record without `domain` is the default's)."""
    out: dict[str, list[dict]] = {name: [] for name in SPLITS}
    memo: dict[str, str] = {}
    for record in records:
        if record.get("domain", DEFAULT_DOMAIN) != domain:
            continue
        customer = record["customer_id"]
        if customer not in memo:
            memo[customer] = split_of(customer, fractions, salt)
        out[memo[customer]].append(record)
    return out


def customers_in_several_splits(splits: dict[str, list[dict]]) -> dict[str, list[str]]:
    """Customers found in more than one split, with the splits they were found in (empty = ok)."""
    seen: dict[str, set[str]] = {}
    for name, records in splits.items():
        for record in records:
            seen.setdefault(record["customer_id"], set()).add(name)
    return {customer: sorted(names) for customer, names in sorted(seen.items()) if len(names) > 1}


def split_counts(splits: dict[str, list[dict]]) -> dict[str, int]:
    """Rows and distinct customers per split, for asset metadata."""
    counts: dict[str, int] = {}
    for name, records in splits.items():
        counts[f"{name}_rows"] = len(records)
        counts[f"{name}_customers"] = len({r["customer_id"] for r in records})
    return counts
