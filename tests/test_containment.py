"""Containment: `retrain contain` records a mode on the registered model; served conversations obey it.

Real sandbox rollouts (the expert policy on generated retail records) and a real sqlite MLflow store.
"""

from __future__ import annotations

import json

import pytest
from mlflow import MlflowClient

from domains.api import ToolKind
from domains.registry import load_domain
from evaluation.rollout import run_rollouts
from orchestration.cli import main
from tests.helpers_eval import expert_policy, make_records
from tracking.containment import (
    CONTAINMENT_EXPERIMENT,
    ContainmentRecordError,
    containment_of,
    set_containment,
)
from training.sandbox.containment import ContainedPolicy, ContainmentError, contained
from training.sandbox.core import READ_ONLY_ERROR

WRITES = {s.name for s in load_domain("retail").tool_specs if s.kind == ToolKind.WRITE}


@pytest.fixture(scope="module")
def records():
    return make_records(12)


class Counting:
    """A policy wrapper that counts how often it is asked."""

    def __init__(self, policy):
        self.policy, self.name, self.asked = policy, policy.name, 0

    def act(self, conversations):
        self.asked += 1
        return self.policy.act(conversations)


def _writes_in(trial):
    return [e for e in trial.episode.audit_log if e.tool in WRITES]


def test_off_is_the_policy_itself(records):
    policy = expert_policy(records)
    assert contained(policy, "off") is policy


def test_read_only_refuses_every_write_with_a_message_and_changes_nothing(records):
    free = run_rollouts(expert_policy(records), records, k=1, seed=0)
    held = run_rollouts(contained(expert_policy(records), "read-only"), records, k=1, seed=0)
    writing = [i for i, t in enumerate(free) if _writes_in(t)]
    assert writing, "the records hold no write request: the test would show nothing"
    for i in writing:
        assert free[i].success
        attempted = _writes_in(held[i])
        assert attempted and all(e.error for e in attempted)
        results = [m["content"] for m in held[i].messages if m["role"] == "tool" and m.get("name") in WRITES]
        assert results and all(r == READ_ONLY_ERROR for r in results)
        assert not held[i].success  # the change the customer asked for was not made
    for trial in held:  # reads still work: the agent can still tell the customer their order's status
        reads = [e for e in trial.episode.audit_log if e.tool == "get_order_details"]
        assert all(not e.error for e in reads)


def test_handoff_hands_every_conversation_to_a_person_without_asking_the_policy(records):
    inner = Counting(expert_policy(records))
    trials = run_rollouts(ContainedPolicy(inner, "handoff"), records, k=1, seed=0)
    assert inner.asked == 0
    assert all(t.episode.transferred and t.turns == 1 and not _writes_in(t) for t in trials)
    call = trials[0].messages[2]["tool_calls"][0]
    assert call["name"] == "transfer_to_human_agents" and call["arguments"]["summary"]


def test_an_unknown_mode_is_refused_naming_the_modes(records):
    with pytest.raises(ContainmentError, match="'halt' is not one of \\['off', 'read-only', 'handoff'\\]"):
        contained(expert_policy(records), "halt")


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    MlflowClient(tracking_uri=uri, registry_uri=uri).create_registered_model("retail-agent")
    return uri, tmp_path


def test_the_mode_is_recorded_on_the_model_with_who_and_why_and_its_history(store):
    uri, tmp_path = store
    assert containment_of(uri, "retail-agent").mode == "off"
    state = set_containment(uri, "retail-agent", "read-only", "ann", "refund loop", (tmp_path / "a").as_uri())
    assert (state.mode, state.by, state.reason) == ("read-only", "ann", "refund loop")
    assert containment_of(uri, "retail-agent") == state
    set_containment(uri, "retail-agent", "off", "bob", "fixed in v3", (tmp_path / "a").as_uri())
    assert containment_of(uri, "retail-agent").mode == "off"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name(CONTAINMENT_EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"])
    assert [(r.data.params["mode"], r.data.params["by"]) for r in runs] == [("read-only", "ann"), ("off", "bob")]


def test_a_change_without_a_name_or_reason_or_model_is_refused(store):
    uri, _ = store
    with pytest.raises(ContainmentRecordError, match="--by"):
        set_containment(uri, "retail-agent", "handoff", " ", "why")
    with pytest.raises(ContainmentRecordError, match="--reason"):
        set_containment(uri, "retail-agent", "handoff", "ann", "")
    with pytest.raises(ContainmentRecordError, match="no registered model 'other'"):
        set_containment(uri, "other", "handoff", "ann", "why")
    assert containment_of(uri, "retail-agent").mode == "off"  # nothing was recorded


def test_retrain_contain_records_the_mode_for_the_homes_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    from orchestration import environment

    home = environment.home().ensure()
    uri = environment.mlflow_tracking().uri(home)
    MlflowClient(tracking_uri=uri, registry_uri=uri).create_registered_model("retail-agent")
    assert main(["contain", "--mode", "handoff", "--by", "ann", "--reason", "wrong refunds"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["mode"] == "handoff" and shown["model"] == "retail-agent"
    assert containment_of(uri, "retail-agent").mode == "handoff"
    assert main(["contain", "--mode", "off", "--by", "ann", "--reason", ""]) == 2  # no reason: refused
