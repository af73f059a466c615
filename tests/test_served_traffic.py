"""Traffic served by a model (`simulate(policy=..., level=1)`): the level-1 shop, in one batch a day."""

from __future__ import annotations

import pytest

from domains.retail.level1 import LEVEL1_INTENTS, level1_opening
from domains.retail.traffic.simulate import TrafficConfigError, simulate
from tests.helpers_traffic import day_files, generated_world, read_records, validate_all
from training.policies import ScriptedPolicy

LEVEL1_MIX = {"order_status": 0.5, "cancel_order": 0.5}


class _Batches(ScriptedPolicy):
    """Hands every customer to a person, and remembers how many conversations each call held."""

    def __init__(self) -> None:
        super().__init__(lambda conv: {"name": "transfer_to_human_agents", "arguments": {"summary": "a person"}})
        self.sizes: list[int] = []

    def act(self, conversations):
        self.sizes.append(len(conversations))
        return super().act(conversations)


def _serve(out, policy, **kwargs):
    args = {"days": 2, "per_day": 12, "seed": 5, "out_dir": out, "world": generated_world(), "start": "2026-11-02"}
    return simulate(**{**args, "intent_mix": LEVEL1_MIX, "policy": policy, "level": 1, **kwargs})


def _refused(out, **kwargs):
    return _serve(out, kwargs.pop("policy", _Batches()), **kwargs)


def test_level1_traffic_is_the_level1_shop_served_by_the_policy_a_day_in_one_batch(tmp_path):
    policy = _Batches()
    summary = _serve(tmp_path / "a", policy, policy_version="retail-agent/3")
    records = read_records(day_files(tmp_path / "a"))
    assert len(records) == 24 and summary["outcomes"] == {"escalated": 24}
    # A day's twelve conversations go to the model together (one call per turn, not per customer).
    assert policy.sizes[0] == 12 and len(policy.sizes) < 24
    for record in validate_all(records):
        assert record["intent"] in LEVEL1_INTENTS
        assert record["policy_version"] == "retail-agent/3"
        assert record["user_scenario"]["persona"] == "polite forthcoming"
        # The customer opens with identity and request, as the level-1 task of this record says
        # (a record without gold, the unverified share, no longer says which task it was).
        opening = record["messages"][1]
        assert opening["role"] == "user" and opening["content"].startswith("Hi, ")
        if record["gold"] is not None:
            assert opening["content"] == level1_opening(record)
        assert record["messages"][2]["tool_calls"][0]["name"] == "transfer_to_human_agents"
        assert record["escalation_was_necessary"] is False  # an order question never needs a person
    # The same arguments give the same bytes: the day is drawn from seeded generators only.
    _serve(tmp_path / "b", _Batches(), policy_version="retail-agent/3")
    assert [p.read_bytes() for p in day_files(tmp_path / "a")] == [p.read_bytes() for p in day_files(tmp_path / "b")]


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"policy": None}, "pass the policy"),
        ({"intent_mix": {"order_status": 0.5, "return_items": 0.5}}, "return_items"),
        ({"level": 2}, "level=2"),
        ({"drift": {"action_drift_day": 1}}, "scripted agent"),
    ],
)
def test_level1_traffic_refuses_what_it_cannot_serve(tmp_path, kwargs, says):
    with pytest.raises(TrafficConfigError, match=says):
        _refused(tmp_path, **kwargs)
    assert not day_files(tmp_path)


def test_retrain_simulate_served_by_the_shipped_agent_records_its_conversations(tmp_path, capsys):
    from orchestration.cli import main
    from training.tiny.manifest import SHIPPED_AGENT_DIR

    args = ["simulate", "--days", "1", "--per-day", "4", "--start", "2026-11-02", "--out", str(tmp_path / "a")]
    served = ["--served-by", str(SHIPPED_AGENT_DIR), "--level", "1"]
    assert main([*args, *served, "--policy-version", "retail-agent/1"]) == 0
    records = validate_all(read_records(day_files(tmp_path / "a")))
    assert len(records) == 4 and {r["policy_version"] for r in records} == {"retail-agent/1"}
    # The level-1 shop (only a model can serve it): the customer opens with identity and request.
    assert all(r["intent"] in LEVEL1_INTENTS and r["messages"][1]["content"].startswith("Hi, ") for r in records)
    capsys.readouterr()
    assert main([*args[:-1], str(tmp_path / "b"), "--served-by", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err and not day_files(tmp_path / "b")
