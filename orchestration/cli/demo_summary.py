"""The demo summary's tables of served traffic: who served, and how each served version did per
intent and per persona (the climb, read from the store as an operator would query it).

In simulated traffic a record's `outcome` is `completed` exactly when the conversation replays
as a verified success (`training.rewards.outcome.outcome_of`), so the completed share is the served
verified success rate.
"""

from __future__ import annotations

from pathlib import Path

from dataplane.store import open_store

_BY_VERSION = (
    "SELECT policy_version, count(*), avg(CASE WHEN outcome = 'completed' THEN 1.0 ELSE 0.0 END), "
    "min(ended_at)::DATE, max(ended_at)::DATE FROM interactions GROUP BY 1 ORDER BY 4, 1"
)
# One query per breakdown, chosen from this fixed map (never built from input).
_BREAKDOWNS = {
    "intent": (
        "SELECT intent, policy_version, count(*), avg(CASE WHEN outcome = 'completed' THEN 1.0 ELSE 0.0 END) "
        "FROM interactions WHERE NOT starts_with(policy_version, $legacy) GROUP BY 1, 2"
    ),
    "persona": (
        "SELECT coalesce(json_extract_string(record, '$.user_scenario.persona'), 'unknown'), policy_version, "
        "count(*), avg(CASE WHEN outcome = 'completed' THEN 1.0 ELSE 0.0 END) "
        "FROM interactions WHERE NOT starts_with(policy_version, $legacy) GROUP BY 1, 2"
    ),
}


def served_rows(duckdb_path: Path) -> list[str]:
    """Who served the stored traffic: interactions and verified success per policy_version."""
    con = open_store(duckdb_path, read_only=True)
    try:
        rows = con.execute(_BY_VERSION).fetchall()
    finally:
        con.close()
    lines = [
        "traffic in DuckDB by the policy that served it:",
        f"  {'policy_version':24s} {'rows':>6s} {'completed':>9s}  days",
    ]
    lines += [f"  {v:24s} {n:6d} {rate:9.3f}  {first} .. {last}" for v, n, rate, first, last in rows]
    return lines


def climb_rows(duckdb_path: Path, legacy_prefix: str) -> list[str]:
    """Served verified success of every model version, per intent and per persona, one column a
    version in the order they first served (`n` conversations in brackets); traffic whose
    policy_version starts with `legacy_prefix` (the scripted agent) is left out."""
    con = open_store(duckdb_path, read_only=True)
    try:
        order = [
            version
            for (version,) in con.execute(
                "SELECT policy_version FROM interactions WHERE NOT starts_with(policy_version, $legacy) "
                "GROUP BY 1 ORDER BY min(ended_at), 1",
                {"legacy": legacy_prefix},
            ).fetchall()
        ]
        tables = {name: con.execute(sql, {"legacy": legacy_prefix}).fetchall() for name, sql in _BREAKDOWNS.items()}
    finally:
        con.close()
    if not order:
        return ["served verified success per intent and persona: no model has served yet"]
    lines = ["served verified success per intent and per persona (conversations in brackets):"]
    for name, rows in tables.items():
        cells = {(key, version): (n, rate) for key, version, n, rate in rows}
        lines.append(f"  {name:22s}" + "".join(f" {version:>22s}" for version in order))
        for key in sorted({key for key, _version, _n, _rate in rows}):
            line = f"  {key:22s}"
            for version in order:
                n, rate = cells.get((key, version), (0, None))
                line += f" {'-':>22s}" if rate is None else f" {f'{rate:.3f} ({n})':>22s}"
            lines.append(line)
    return lines
