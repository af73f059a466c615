"""A third-party domain through the plug-in API: installed as a package, found by its entry point,
and evaluated by the engine's own calibration path (rollouts, verifier, reward terms, failure modes,
paired report) without a line of it in the engine."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from domains import registry
from domains.api import ToolKind
from evaluation.failure_modes import failure_modes
from evaluation.reports import compare
from evaluation.rollout import run_rollouts
from training.policies import ScriptedPolicy
from training.sandbox.environment import environment_class, tool_names

PLUGIN = Path(__file__).parent / "plugins" / "toy-helpdesk"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """pip-install the toy domain into a folder of its own and put that folder on the path, as an
    installed distribution: its entry point is then visible to `importlib.metadata`."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--disable-pip-version-check",
            "--target",
            str(target),
            str(PLUGIN),
        ],
        check=True,
        capture_output=True,
    )
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    registry.clear_cache()
    yield target
    sys.path.remove(str(target))
    for name in [m for m in sys.modules if m.startswith("toy_helpdesk")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    registry.clear_cache()


def _world() -> dict:
    users = {f"u{i}": {"name": f"User {i}", "tickets": [f"T-{i}"]} for i in range(6)}
    tickets = {
        f"T-{i}": {"ticket_id": f"T-{i}", "user_id": f"u{i}", "status": "open", "title": "VPN down"} for i in range(6)
    }
    return {"users": users, "tickets": tickets}


def _records() -> list[dict]:
    world = _world()
    records = []
    for i in range(6):
        ticket = f"T-{i}"
        state = {"users": {f"u{i}": world["users"][f"u{i}"]}, "tickets": {ticket: world["tickets"][ticket]}}
        records.append(
            {
                "interaction_id": f"hd-{i}",
                "domain": "helpdesk",
                "customer_id": f"u{i}",
                "intent": "close_ticket",
                "initial_state": state,
                "user_scenario": {
                    "instruction": f"Your user id is u{i}. You want ticket {ticket} closed: the VPN works again.",
                    "known_info": {"user_id": f"u{i}", "ticket_id": ticket},
                    "persona": "polite",
                },
                "gold": {
                    "actions": [{"name": "close_ticket", "arguments": {"ticket_id": ticket, "resolution": "fixed"}}],
                    "outputs": ["closed"],
                },
            }
        )
    return records


def _expert(records: list[dict]) -> ScriptedPolicy:
    table = {}
    for r in records:
        ticket = r["user_scenario"]["known_info"]["ticket_id"]
        table[r["interaction_id"]] = [
            {"name": "get_ticket", "arguments": {"ticket_id": ticket}},
            {"name": "close_ticket", "arguments": {"ticket_id": ticket, "resolution": "fixed"}},
            {"name": "send_message_to_customer", "arguments": {"message": f"Ticket {ticket} is closed."}},
        ]
    return ScriptedPolicy.from_table(table, name="expert")


def _careless(records: list[dict]) -> ScriptedPolicy:
    """Closes without reading, with another resolution: a step-order violation and a wrong argument."""
    table = {
        r["interaction_id"]: [
            {
                "name": "close_ticket",
                "arguments": {"ticket_id": r["user_scenario"]["known_info"]["ticket_id"], "resolution": "?"},
            }
        ]
        for r in records
    }
    return ScriptedPolicy.from_table(table, name="careless")


def test_the_installed_domain_is_found_by_its_entry_point(installed):
    assert "helpdesk" in registry.domain_names()
    domain = registry.load_domain("helpdesk")
    assert [t["function"]["name"] for t in domain.tools] == ["get_user", "get_ticket", "close_ticket", "escalate"]
    env = domain.make_environment()
    state = _world()
    env.reset(initial_state=state)
    assert json.loads(env.call("close_ticket", {"ticket_id": "T-1", "resolution": "x"}))["status"] == "closed"
    assert state["tickets"]["T-1"]["status"] == "open"  # reset never writes through
    assert env.call("get_ticket", {"ticket_id": "nope"}).startswith("Error")


def test_the_engine_builds_its_sandbox_from_the_domain_alone(installed):
    assert set(tool_names("helpdesk")) == {
        "get_user",
        "get_ticket",
        "close_ticket",
        "escalate",
        "send_message_to_customer",
    }
    env = environment_class("helpdesk")()
    env.reset(initial_state=_world())
    env.escalate(summary="stuck")
    assert env.done and env.episode.transferred  # the hand-over kind ends the conversation
    assert env.close_ticket(ticket_id="T-0", resolution="x").startswith("Error: the conversation was transferred")


def test_a_calibration_evaluation_runs_on_the_plugged_in_domain(installed):
    records = _records()
    expert = run_rollouts(_expert(records), records, k=2, seed=3)
    careless = run_rollouts(_careless(records), records, k=2, seed=3)
    assert [t.success for t in expert] == [True] * 12
    assert not any(t.success for t in careless)
    # The reward's process terms are written over tool kinds: the careless policy wrote before reading.
    assert all(t.reward_terms["step_order"] < 0 for t in careless)
    assert all(t.reward_terms["step_order"] == 0 for t in expert)
    assert all(t.episode.kind_of(t.episode.audit_log[0]) == ToolKind.WRITE for t in careless)
    assert "policy_violation" in failure_modes(careless[0])
    report = compare(expert, careless, seed=0)
    assert report.pairs == 12
    assert report.candidate.summary["success_rate"] == 1.0 and report.baseline.summary["success_rate"] == 0.0
    assert report.mcnemar.only_a == 12 and report.mcnemar.only_b == 0 and report.bootstrap_ci.low > 0.5
    assert set(report.candidate.tool_counts) == {"get_ticket", "close_ticket", "send_message_to_customer"}


def test_the_generic_customer_answers_from_the_domains_facts(installed):
    env = environment_class("helpdesk")()
    record = _records()[0]
    env.reset(initial_state=record["initial_state"], user_scenario=record["user_scenario"], seed=1)
    reply = env.send_message_to_customer(message="What is your ticket id?")
    assert "T-0" in reply


def test_retrain_domains_lists_the_plugin_with_its_tool_count(installed):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(installed), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "domains", "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    listed = {d["name"]: d for d in json.loads(out.stdout)}
    assert {"retail", "airline", "helpdesk"} <= set(listed)
    assert listed["helpdesk"]["tools"] == 4
