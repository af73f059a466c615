"""The demo summary's served-traffic tables, read from a real DuckDB store of simulated traffic."""

from __future__ import annotations

from collections import Counter
from datetime import date

from dataplane.ingest import ingest_paths
from domains.retail.traffic.simulate import simulate
from orchestration.cli.demo_summary import climb_rows, served_rows
from tests.helpers_traffic import NOW, day_files, generated_world, read_records

LEGACY = "rules-agent/legacy"


def _store(tmp_path):
    """One legacy day, then a day each 'served' by versions 1 and 2 (the rules agent stands in for
    them: the tables only read policy_version, intent, persona and outcome)."""
    for offset, version in enumerate((LEGACY, "retail-agent/1", "retail-agent/2")):
        simulate(
            days=1,
            per_day=30,
            seed=offset,
            out_dir=tmp_path / "landing" / str(offset),
            start=date(2026, 11, 2 + offset),
            policy_version=version,
            world=generated_world(),
        )
    ingest_paths(tmp_path / "store.duckdb", [tmp_path / "landing"], now=NOW)
    return tmp_path / "store.duckdb", read_records(
        day_files(tmp_path / "landing" / "1") + day_files(tmp_path / "landing" / "2")
    )


def _cell(lines, section, key, column):
    """The text of one cell: rows are a 24-character key column, then 23 characters a version."""
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [section])
    index = lines[start].split()[1:].index(column)
    for line in lines[start + 1 :]:
        if line[:24].strip() == key:
            return line[24 + 23 * index : 24 + 23 * (index + 1)].strip()
    raise AssertionError(f"no row {key!r} under {section!r}")


def test_climb_rows_give_each_served_versions_success_per_intent_and_persona(tmp_path):
    store, served = _store(tmp_path)
    lines = climb_rows(store, LEGACY)
    assert LEGACY not in "\n".join(lines)
    header = next(line for line in lines if line.split()[:1] == ["intent"]).split()
    assert header[1:] == ["retail-agent/1", "retail-agent/2"]  # in the order they first served
    for section, key_of in (
        ("intent", lambda r: r["intent"]),
        ("persona", lambda r: r["user_scenario"]["persona"]),
    ):
        for version in ("retail-agent/1", "retail-agent/2"):
            mine = [r for r in served if r["policy_version"] == version]
            counts = Counter(key_of(r) for r in mine)
            for key, n in counts.items():
                done = sum(r["outcome"] == "completed" for r in mine if key_of(r) == key)
                assert _cell(lines, section, key, version) == f"{done / n:.3f} ({n})"


def test_served_rows_count_every_stored_interaction_per_version(tmp_path):
    store, served = _store(tmp_path)
    lines = served_rows(store)
    rows = {line.split()[0]: line.split() for line in lines[2:]}
    assert set(rows) == {LEGACY, "retail-agent/1", "retail-agent/2"}
    mine = [r for r in served if r["policy_version"] == "retail-agent/2"]
    assert int(rows["retail-agent/2"][1]) == len(mine) == 30
    assert float(rows["retail-agent/2"][2]) == round(sum(r["outcome"] == "completed" for r in mine) / 30, 3)


def test_climb_rows_say_so_when_no_model_has_served(tmp_path):
    simulate(days=1, per_day=5, seed=0, out_dir=tmp_path / "landing", start=date(2026, 11, 2), policy_version=LEGACY)
    ingest_paths(tmp_path / "store.duckdb", [tmp_path / "landing"], now=NOW)
    assert climb_rows(tmp_path / "store.duckdb", LEGACY) == [
        "served verified success per intent and persona: no model has served yet"
    ]
