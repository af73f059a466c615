"""The record contract speaks of any domain: intents, initial_state and the customer table are the
record's domain's; windows, splits, calibration and shadow sets are cut per domain; a store from
before domains is migrated on open and keeps its retail hashes. A throwaway `servicedesk` domain,
registered for the test only, stands beside retail."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar

import duckdb
import pytest

from dataplane.contract import ContractError, validate_record
from dataplane.domain_rules import DomainLookup
from dataplane.home import PII_KEY_ENV
from dataplane.ingest import ingest_paths
from dataplane.splits import split_of, split_window
from dataplane.store import load_records, open_store, prepare_row
from dataplane.window import cut_window, window_ids, window_records
from domains import registry
from domains.api import Domain, RecordRef, ToolKind, ToolSpec
from evaluation.calibration_versions import pinned_version, week_calibration
from evaluation.eval_sets import EvalSetError, build_shadow_set, calibration_set, freeze_calibration_set
from orchestration.cli import main
from tests.helpers_data import NOW, build_records, record_from_task, write_jsonl

# Pinned content and window hashes of a retail-only store: adding domains must not move them.
# First computed with the code from before domains (commit 6a61564); re-pinned once when e-mails
# became keyed pseudonyms (stored content changed by design), under the fixed key below.
RETAIL_RECORD_HASH = "11919546dd5805188d74645f582ec31cff904fa6ae27eee96d2ef2080816cc76"
RETAIL_WINDOW_HASH = "f47f729ec4d3729e2526d48c6451eebb701680fbc32075d0ad4be69d5736aa2c"
PINNED_PII_KEY = "contract-domains-test-key-0123456789abcdef"
WEEK_END = datetime(2024, 6, 10, tzinfo=UTC)


@pytest.fixture(autouse=True)
def _pinned_pii_key(monkeypatch):
    """The pseudonyms, so the pinned hashes, depend on the key: every test here uses one key."""
    monkeypatch.setenv(PII_KEY_ENV, PINNED_PII_KEY)


def _tool(name: str, kind: ToolKind, record: RecordRef | None = None, **params: str) -> ToolSpec:
    schema = {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": {p: {"type": t} for p, t in params.items()}},
        },
    }
    return ToolSpec(schema=schema, kind=kind, record=record)


class ServicedeskWorld:
    """accounts and tickets; `close_ticket` closes an open ticket."""

    def reset(self, initial_state: Mapping[str, Any], **options: Any) -> None:
        self._state = json.loads(json.dumps(initial_state))

    @property
    def state(self) -> dict[str, Any]:
        return self._state

    def call(self, name: str, arguments: Mapping[str, Any]) -> str:
        if name == "find_account":
            found = [k for k, v in self._state["accounts"].items() if v["email"] == arguments.get("email")]
            return found[0] if found else "Error: no such account"
        if name in ("get_account", "get_ticket"):
            table, key = ("accounts", "account_id") if name == "get_account" else ("tickets", "ticket_id")
            record = self._state[table].get(arguments.get(key))
            return json.dumps(record) if record is not None else f"Error: {table[:-1]} not found"
        if name == "close_ticket":
            ticket = self._state["tickets"].get(arguments.get("ticket_id"))
            if ticket is None or ticket["status"] != "open":
                return "Error: ticket is not open"
            ticket["status"] = "closed"
            return json.dumps(ticket)
        if name == "escalate":
            return "Transferred."
        return f"Error: unknown tool {name!r}"


class Servicedesk(Domain):
    name: ClassVar[str] = "servicedesk"
    tables: ClassVar[tuple[str, ...]] = ("accounts", "tickets")
    intents: ClassVar[tuple[str, ...]] = ("close_ticket", "question", "other")
    customer_table: ClassVar[str] = "accounts"
    owner_field: ClassVar[str] = "account_id"
    tool_specs: ClassVar[tuple[ToolSpec, ...]] = (
        _tool("find_account", ToolKind.IDENTIFY, email="string"),
        _tool("get_account", ToolKind.READ, RecordRef("account_id", "accounts"), account_id="string"),
        _tool("get_ticket", ToolKind.READ, RecordRef("ticket_id", "tickets"), ticket_id="string"),
        _tool("close_ticket", ToolKind.WRITE, RecordRef("ticket_id", "tickets"), ticket_id="string"),
        _tool("escalate", ToolKind.HAND_OVER, summary="string"),
        _tool("note", ToolKind.THINK, thought="string"),
    )

    def make_environment(self) -> ServicedeskWorld:
        return ServicedeskWorld()

    def validate_initial_state(self, initial_state: Any) -> dict[str, Any]:
        state = super().validate_initial_state(initial_state)
        for key, ticket in state["tickets"].items():
            if not isinstance(ticket, dict) or ticket.get("status") not in ("open", "closed"):
                raise ValueError(f"tickets[{key!r}]: status must be open or closed")
        return state

    def classify_intent(self, messages) -> str:
        names = [c["name"] for m in messages for c in m.get("tool_calls") or ()]
        return "close_ticket" if "close_ticket" in names else "question"


class _Point:
    def __init__(self, name: str, target: Any):
        self.name, self._target = name, target

    def load(self) -> Any:
        return self._target


@pytest.fixture()
def servicedesk(monkeypatch) -> Servicedesk:
    """The servicedesk domain installed beside the real ones, for this test only."""
    real = registry.installed
    domain = Servicedesk()
    monkeypatch.setattr(registry, "installed", lambda: {**real(), "servicedesk": _Point("servicedesk", domain)})
    registry.clear_cache()
    yield domain
    registry.clear_cache()


def servicedesk_record(n: int, customer: str | None = None, *, gold: bool = True, minute: int | None = None) -> dict:
    customer = customer or f"acct_{n % 50}"
    ended = datetime(2024, 6, 4, 9, tzinfo=UTC) + timedelta(minutes=n if minute is None else minute)
    return {
        "interaction_id": f"hd-{n:05d}",
        "domain": "servicedesk",
        "started_at": (ended - timedelta(minutes=2)).isoformat(),
        "ended_at": ended.isoformat(),
        "policy_version": "servicedesk-agent/1",
        "customer_id": customer,
        "intent": "close_ticket",
        "initial_state": {
            "accounts": {customer: {"email": f"{customer}@example.com"}},
            "tickets": {f"T{n}": {"status": "open", "account_id": customer}},
        },
        "user_scenario": {"instruction": "close my ticket", "known_info": {}, "persona": "terse"},
        "messages": [
            {"role": "user", "content": f"please close ticket T{n}"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"name": "close_ticket", "arguments": {"ticket_id": f"T{n}"}}],
            },
            {"role": "tool", "name": "close_ticket", "content": "{}"},
            {"role": "assistant", "content": "Closed."},
        ],
        "outcome": "completed",
        "actions_taken": 1,
        "customer_sentiment_delta": 0.0,
        "gold": {"actions": [{"name": "close_ticket", "arguments": {"ticket_id": f"T{n}"}}], "outputs": []}
        if gold
        else None,
        "human_label": {"task_success": True, "rater": "r1", "labeled_at": (ended + timedelta(hours=1)).isoformat()},
        "schema_version": 1,
    }


def _rule(record: dict) -> ContractError:
    with pytest.raises(ContractError) as info:
        validate_record(record, now=NOW)
    return info.value


# ---- the contract ----


def test_a_record_without_domain_is_retail_and_hashes_as_before(world, reference_tasks, tmp_path):
    record = record_from_task(world, reference_tasks[0], 0)
    assert "domain" not in record
    assert validate_record(record, now=NOW)["domain"] == "retail"
    explicit = prepare_row(validate_record({**record, "domain": "retail"}, now=NOW))
    implicit = prepare_row(validate_record(record, now=NOW))
    assert explicit.content_hash == implicit.content_hash == RETAIL_RECORD_HASH
    assert '"domain"' not in implicit.values[13]  # the stored text, as before domains
    db = tmp_path / "db.duckdb"
    ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", build_records(world, reference_tasks, 30))], now=NOW)
    with open_store(db) as con:
        assert cut_window(con, WEEK_END, size=20).content_hash == RETAIL_WINDOW_HASH
        [loaded] = load_records(con, ["int-000000"])
        assert loaded["domain"] == "retail"  # put back on reading


def test_the_intent_state_and_customer_are_the_domain_s(servicedesk, world, reference_tasks):
    good = servicedesk_record(1)
    assert validate_record(good, now=NOW)["domain"] == "servicedesk"
    retail_intent = _rule({**good, "intent": "cancel_order"})
    assert retail_intent.rule == "unknown_intent" and "servicedesk" in retail_intent.detail
    bad_state = _rule({**good, "initial_state": {**good["initial_state"], "tickets": {"T1": {"status": "lost"}}}})
    assert bad_state.rule == "bad_initial_state" and "status must be open or closed" in bad_state.detail
    no_table = _rule({**good, "initial_state": {"accounts": good["initial_state"]["accounts"]}})
    assert no_table.rule == "bad_initial_state" and "tickets" in no_table.detail
    stranger = _rule({**good, "customer_id": "acct_999"})
    assert stranger.rule == "customer_not_in_state" and "initial_state.accounts" in stranger.detail
    # A retail record is still judged by retail's rules, beside the servicedesk one.
    retail = record_from_task(world, reference_tasks[0], 0)
    assert _rule({**retail, "intent": "close_ticket"}).rule == "unknown_intent"


def test_an_unknown_domain_is_quarantined_naming_it_and_its_line(tmp_path, world, reference_tasks):
    good = record_from_task(world, reference_tasks[0], 0)
    alien = {**record_from_task(world, reference_tasks[1], 1), "domain": "telecom"}
    assert (error := _rule(alien)).rule == "unknown_domain" and "'telecom'" in error.detail
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", [good, alien])], now=NOW)
    assert (summary.accepted, summary.quarantined_by_rule) == (1, {"unknown_domain": 1})
    with open_store(db) as con:
        assert con.execute("SELECT line_no, rule, interaction_id FROM quarantine").fetchall() == [
            (2, "unknown_domain", "int-000001")
        ]


def test_a_lookup_reads_the_installed_domains_once_per_pass(monkeypatch):
    calls = []
    real = registry.domain_names
    monkeypatch.setattr("dataplane.domain_rules.domain_names", lambda: calls.append(1) or real())
    lookup = DomainLookup()
    for _ in range(100):
        assert lookup("retail").name == "retail"
        with pytest.raises(ContractError):
            lookup("telecom")
    assert len(calls) == 1


# ---- per-domain windows, splits and evaluation sets ----


@pytest.fixture()
def mixed_store(servicedesk, world, reference_tasks, tmp_path):
    """Retail records and servicedesk records (ending in the same week) in one store."""
    retail = build_records(world, reference_tasks, 30)
    desk = [servicedesk_record(n) for n in range(40)]
    db = tmp_path / "db.duckdb"
    summary = ingest_paths(db, [write_jsonl(tmp_path / "a.jsonl", retail + desk)], now=NOW)
    assert summary.accepted == 70
    con = open_store(db)
    yield con
    con.close()


def test_windows_and_splits_hold_only_their_domain(mixed_store):
    con = mixed_store
    retail = cut_window(con, WEEK_END, size=20)
    desk = cut_window(con, WEEK_END, size=20, domain="servicedesk")
    assert retail.content_hash == RETAIL_WINDOW_HASH  # the servicedesk rows change nothing of retail's
    assert retail.week == desk.week and desk.content_hash != retail.content_hash
    assert all(i.startswith("hd-") for i in window_ids(con, desk.week, "servicedesk"))
    assert not any(i.startswith("hd-") for i in window_ids(con, retail.week))
    records = window_records(con, desk.week, "servicedesk")
    assert {r["domain"] for r in records} == {"servicedesk"}
    mixed = records + window_records(con, retail.week)
    assert sum(map(len, split_window(mixed).values())) == 20
    assert {r["domain"] for s in split_window(mixed, domain="servicedesk").values() for r in s} == {"servicedesk"}


def test_calibration_and_shadow_sets_are_per_domain_and_replayable_only(mixed_store):
    con = mixed_store
    week = "2024-W23"
    desk = week_calibration(con, week, before=WEEK_END, refresh_after=1, domain="servicedesk")
    retail = week_calibration(con, week, before=WEEK_END, refresh_after=1)
    assert desk.version.version == retail.version.version == "v1"  # each domain's own first version
    assert all(i.startswith("hd-") for i in desk.version.interaction_ids)
    assert not any(i.startswith("hd-") for i in retail.version.interaction_ids)
    assert pinned_version(con, week, "servicedesk") == pinned_version(con, week) == "v1"
    assert calibration_set(con, "v1", "servicedesk").interaction_ids == desk.version.interaction_ids
    shadow = build_shadow_set(con, week, WEEK_END, domain="servicedesk")
    assert shadow.rows and all(i.startswith("hd-") for i in shadow.interaction_ids)
    assert all(split_of(r["customer_id"]) == "shadow" for r in shadow.records(con))
    # A row that cannot be replayed is never drawn, and cannot be frozen in.
    con.execute("UPDATE interactions SET replayable = false WHERE interaction_id = ?", [shadow.interaction_ids[0]])
    con.execute("DELETE FROM shadow_sets WHERE domain = 'servicedesk'")
    again = build_shadow_set(con, week, WEEK_END, domain="servicedesk")
    assert shadow.interaction_ids[0] not in again.interaction_ids
    member = desk.version.interaction_ids[0]
    con.execute("UPDATE interactions SET replayable = false WHERE interaction_id = ?", [member])
    with pytest.raises(EvalSetError) as info:
        freeze_calibration_set(con, load_records(con, [member]), force_new=True, domain="servicedesk")
    assert info.value.rule == "not_replayable" and info.value.record_id == member
    with pytest.raises(EvalSetError) as info:
        freeze_calibration_set(
            con, load_records(con, list(retail.version.interaction_ids[:1])), "v9", domain="servicedesk"
        )
    assert info.value.rule == "wrong_domain"


# ---- a store from before domains ----

OLD_SCHEMA = (  # the tables of commit 6a61564 that domains changed
    """CREATE TABLE interactions (interaction_id VARCHAR PRIMARY KEY, started_at TIMESTAMPTZ NOT NULL,
    ended_at TIMESTAMPTZ NOT NULL, policy_version VARCHAR NOT NULL, customer_id VARCHAR NOT NULL,
    intent VARCHAR NOT NULL, outcome VARCHAR NOT NULL, escalation_was_necessary BOOLEAN,
    actions_taken BIGINT NOT NULL, customer_sentiment_delta DOUBLE NOT NULL, has_gold BOOLEAN NOT NULL,
    human_task_success BOOLEAN, schema_version INTEGER NOT NULL, record VARCHAR NOT NULL,
    content_hash VARCHAR NOT NULL, source_file VARCHAR NOT NULL, ingested_at TIMESTAMPTZ NOT NULL)""",
    """CREATE TABLE windows (week VARCHAR NOT NULL, position INTEGER NOT NULL, interaction_id VARCHAR NOT NULL,
    content_hash VARCHAR NOT NULL, window_hash VARCHAR NOT NULL, week_end TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (week, position))""",
    """CREATE TABLE calibration_sets (version VARCHAR NOT NULL, position INTEGER NOT NULL,
    interaction_id VARCHAR NOT NULL, set_hash VARCHAR NOT NULL, created_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (version, position))""",
    "CREATE TABLE calibration_week (week VARCHAR PRIMARY KEY, version VARCHAR NOT NULL, pinned_at TIMESTAMPTZ NOT NULL)",
    """CREATE TABLE shadow_sets (week VARCHAR NOT NULL, position INTEGER NOT NULL, interaction_id VARCHAR NOT NULL,
    set_hash VARCHAR NOT NULL, created_at TIMESTAMPTZ NOT NULL, PRIMARY KEY (week, position))""",
)


def _old_store(path, records: list[dict]) -> None:
    con = duckdb.connect(str(path))
    for statement in OLD_SCHEMA:
        con.execute(statement)
    for record in records:
        row = prepare_row(validate_record(record, now=NOW)).values[:15]
        con.execute("INSERT INTO interactions VALUES (" + ", ".join("?" * 17) + ")", [*row, "old.jsonl", NOW])
    con.execute("INSERT INTO windows VALUES ('2024-W23', 0, 'int-000000', 'h', 'w', ?)", [WEEK_END])
    con.execute("INSERT INTO calibration_sets VALUES ('v1', 0, 'int-000000', 's', ?)", [NOW])
    con.execute("INSERT INTO calibration_week VALUES ('2024-W23', 'v1', ?)", [NOW])
    con.execute("INSERT INTO shadow_sets VALUES ('2024-W23', 0, 'int-000001', 's', ?)", [NOW])
    con.close()


@pytest.mark.parametrize("read_only", [False, True])
def test_a_store_from_before_domains_is_migrated_on_open(tmp_path, world, reference_tasks, read_only):
    db = tmp_path / "old.duckdb"
    _old_store(db, build_records(world, reference_tasks, 30))
    with open_store(db, read_only=read_only) as con:
        assert con.execute("SELECT DISTINCT domain, replayable FROM interactions").fetchall() == [("retail", True)]
        for table in ("windows", "calibration_sets", "calibration_week", "shadow_sets"):
            assert con.execute(f"SELECT DISTINCT domain FROM {table}").fetchall() == [("retail",)]
        assert window_ids(con, "2024-W23") == ["int-000000"]
        if not read_only:
            assert pinned_version(con, "2024-W23") == "v1"
            assert calibration_set(con, "v1").interaction_ids == ("int-000000",)
            assert cut_window(con, WEEK_END, size=20).content_hash == RETAIL_WINDOW_HASH
            with pytest.raises(duckdb.ConstraintException):  # the new key: (domain, week)
                con.execute(
                    "INSERT INTO calibration_week (week, version, pinned_at) VALUES ('2024-W23', 'v2', ?)", [NOW]
                )


# ---- the command line ----


def test_schema_per_domain_and_the_domain_listing(servicedesk, capsys):
    assert main(["schema", "--domain", "servicedesk"]) == 0
    schema = json.loads(capsys.readouterr().out)
    assert schema["properties"]["intent"]["enum"] == ["close_ticket", "question", "other"]
    assert schema["$defs"]["InitialState"]["required"] == ["accounts", "tickets"]
    assert schema["properties"]["domain"]["const"] == "servicedesk" and "domain" in schema["required"]
    assert main(["schema"]) == 0
    retail = json.loads(capsys.readouterr().out)
    assert "domain" not in retail["required"] and "cancel_order" in retail["properties"]["intent"]["enum"]
    assert main(["schema", "--domain", "telecom"]) == 2
    assert "telecom" in capsys.readouterr().err
    assert main(["domains", "--json"]) == 0
    listing = {row["name"]: row for row in json.loads(capsys.readouterr().out)}
    assert listing["servicedesk"] == {
        "name": "servicedesk",
        "tools": 6,
        "intents": 3,
        "tables": ["accounts", "tickets"],
        "customer_table": "accounts",
    }
    assert {"retail", "airline"} <= set(listing)
    assert main(["domains"]) == 0
    assert "servicedesk: 6 tools, 3 intents, tables accounts, tickets" in capsys.readouterr().out
