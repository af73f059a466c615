"""The weekly review sample: a seeded random sample of a week's interactions, stratified by
(outcome, intent).

Stratifying keeps the rare cells in view: with 200 of 10,000 drawn purely at random, a week's few
failed cancellations could all be missed, and reward alignment is judged precisely where outcomes
differ. Every stratum gets one interaction when the sample has room for one of each; the rest of
the sample is shared out in proportion to each stratum's size (largest remainders, exact
fractions). The same week, size and seed always give the same interactions in the same order.

Every exported sample is recorded in DuckDB `review_samples` under a sample id that the export
writes on each line: an import accepts labels only of the interactions that sample holds, so a
file cannot label interactions nobody drew (a labeller choosing what gets labelled is a labeller
choosing what the labels say).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction

import duckdb

Stratum = tuple[str, str]  # (outcome, intent)


def week_population(
    con: duckdb.DuckDBPyConnection, start: datetime, end: datetime, domain: str | None = None
) -> list[tuple[str, str, str]]:
    """(interaction_id, outcome, intent) of every stored interaction that ended in [start, end), of
    `domain` only when one is named (None: every domain's)."""
    if domain is None:
        return con.execute(
            "SELECT interaction_id, outcome, intent FROM interactions WHERE ended_at >= ? AND ended_at < ? "
            "ORDER BY interaction_id",
            [start, end],
        ).fetchall()
    return con.execute(
        "SELECT interaction_id, outcome, intent FROM interactions WHERE ended_at >= ? AND ended_at < ? "
        "AND domain = ? ORDER BY interaction_id",
        [start, end, domain],
    ).fetchall()


def allocate(sizes: dict[Stratum, int], n: int) -> dict[Stratum, int]:
    """How many to draw from each stratum so that they sum to min(n, total)."""
    if n < 0:
        raise ValueError(f"sample size must be >= 0, got {n}")
    total = sum(sizes.values())
    if n >= total:
        return dict(sizes)
    # One of each first when there is room, so no stratum is left out by rounding.
    base = 1 if n >= len(sizes) else 0
    quota = dict.fromkeys(sizes, base)
    left = n - sum(quota.values())
    ideal = {s: Fraction(left * size, total) for s, size in sizes.items()}
    for s in sizes:
        extra = min(int(ideal[s]), sizes[s] - quota[s])
        quota[s] += extra
        left -= extra
    # The remaining seats go to the largest remainders (ties: stratum order), skipping full strata.
    while left > 0:
        open_strata = [s for s in sorted(sizes) if quota[s] < sizes[s]]
        best = max(open_strata, key=lambda s: ideal[s] - (quota[s] - base))
        quota[best] += 1
        left -= 1
    return quota


def stratified_sample(population: Iterable[tuple[str, str, str]], n: int, seed: int = 0) -> list[str]:
    """Up to `n` interaction ids from (id, outcome, intent) rows, stratified by (outcome, intent)."""
    strata: dict[Stratum, list[str]] = {}
    for rid, outcome, intent in population:
        strata.setdefault((outcome, intent), []).append(rid)
    quota = allocate({s: len(ids) for s, ids in strata.items()}, n)
    chosen: list[str] = []
    for stratum in sorted(strata):
        # A generator per stratum: one stratum growing does not reshuffle what the others draw.
        rng = random.Random(f"{seed}:{stratum[0]}:{stratum[1]}")
        chosen += rng.sample(sorted(strata[stratum]), quota[stratum])
    # Mixed, so a reviewer does not label one stratum after another in a block.
    random.Random(seed).shuffle(chosen)
    return chosen


@dataclass(frozen=True)
class ReviewSample:
    """One recorded review sample: the week it was drawn from, its interactions, when and by which
    OS account it was first exported."""

    sample_id: str
    week: str
    interaction_ids: tuple[str, ...]
    created_at: datetime
    exported_by: str


def sample_id_for(week: str, ids: Iterable[str]) -> str:
    """The id of the sample of `week` holding `ids`: derived from its content (ids in any order), so
    exporting the same sample again writes the same file and records nothing new."""
    digest = hashlib.sha256(f"review-sample\x00{week}\x00".encode())
    for rid in sorted(ids):
        digest.update(f"{rid}\n".encode())
    return "rs-" + digest.hexdigest()[:20]


def record_sample(
    con: duckdb.DuckDBPyConnection,
    week: str,
    ids: Sequence[str],
    exported_by: str,
    now: datetime | None = None,
) -> ReviewSample:
    """Record the sample of `week` holding `ids` (kept as it was when already recorded) and return it.

    `exported_by` is stored as given; the caller masks it (`orchestration.cli.review` passes the OS
    account through the PII scrub)."""
    if not ids:
        raise ValueError(f"a review sample of week {week} needs at least one interaction")
    if len(set(ids)) != len(ids):
        raise ValueError(f"a review sample of week {week} names an interaction twice")
    sample_id = sample_id_for(week, ids)
    con.execute(
        "INSERT INTO review_samples (sample_id, week, interaction_ids, created_at, exported_by) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
        [sample_id, week, sorted(ids), now or datetime.now(UTC), exported_by],
    )
    found = review_sample(con, sample_id)
    assert found is not None
    return found


def review_sample(con: duckdb.DuckDBPyConnection, sample_id: str) -> ReviewSample | None:
    """The recorded sample `sample_id`, or None (also for a store from before review samples)."""
    has_table = (
        con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'review_samples'").fetchone()[0] > 0
    )
    if not has_table:
        return None
    row = con.execute(
        "SELECT week, interaction_ids, created_at, exported_by FROM review_samples WHERE sample_id = ?", [sample_id]
    ).fetchone()
    if row is None:
        return None
    week, ids, created_at, exported_by = row
    return ReviewSample(sample_id, week, tuple(ids), created_at.astimezone(UTC), exported_by)
