"""The live watch's judgements on crafted inputs: action drift, the reward-distribution alarm,
and failure-mode shares. No Dagster, no MLflow (the pause they raise: tests/test_pause.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dataplane.served import ServedDay
from domains.retail.traffic.agents import EXPERT_RATES
from domains.retail.traffic.simulate import simulate
from evaluation.decision import EVALUATED_MIX_TAG, UNKNOWN_TOOL, fold_unknown_tools
from monitoring.watch import (
    EvaluatedMixError,
    WatchSettings,
    action_drift,
    evaluated_mix,
    reference_day,
    reward_shift,
    watch_day,
)
from tests.helpers_traffic import day_files, generated_world, read_records

SMALL = WatchSettings(min_interactions=20)
MIX = {"get_order_details": 0.5, "send_message_to_customer": 0.5}


def _rewards(seed: int, n: int, shift: float = 0.0) -> list[float]:
    """Rewards shaped like served traffic: mostly completions (+10.5), some failures (-5)."""
    rng = np.random.default_rng(seed)
    return list(np.where(rng.random(n) < 0.85 - shift, 10.5, -5.0) + rng.normal(0, 0.3, n))


# ---- action drift ----


def test_action_drift_alarms_above_the_threshold_and_names_the_moves():
    drifted = {"get_order_details": 0.4, "send_message_to_customer": 0.5, "transfer_to_human_agents": 0.1}
    finding = action_drift(drifted, MIX, n=500, settings=WatchSettings())
    assert finding.status == "alarm" and finding.value == pytest.approx(0.1)
    assert "action drift TV=0.1000 > 0.05" in finding.detail
    assert finding.extra["largest_moves"]["get_order_details"] == pytest.approx(-0.1)
    close = {"get_order_details": 0.48, "send_message_to_customer": 0.52}
    assert action_drift(close, MIX, n=500, settings=WatchSettings()).status == "ok"


def test_action_drift_is_not_measured_without_an_evaluated_mix_or_enough_traffic():
    missing = action_drift(MIX, None, n=5000, settings=WatchSettings())
    assert missing.status == "not_measured" and missing.value is None
    assert EVALUATED_MIX_TAG in missing.detail and "not measured" in missing.detail
    few = action_drift({"transfer_to_human_agents": 1.0}, MIX, n=399, settings=WatchSettings())
    assert few.status == "not_measured" and "399 interactions, 400 needed" in few.detail


def test_the_evaluated_mix_comes_from_the_version_tag_and_a_bad_one_is_named():
    assert evaluated_mix({EVALUATED_MIX_TAG: json.dumps(MIX)}, "retail-agent/3") == MIX
    assert evaluated_mix({}, "retail-agent/3") is None  # an old champion: said, not guessed
    with pytest.raises(EvaluatedMixError, match="retail-agent/3: tag evaluated_tool_mix"):
        evaluated_mix({EVALUATED_MIX_TAG: '{"a": 0.3}'}, "retail-agent/3")
    with pytest.raises(EvaluatedMixError, match="retail-agent/3"):
        evaluated_mix({EVALUATED_MIX_TAG: "not json"}, "retail-agent/3")
    # Invented tool names are one name, on both sides of the comparison.
    invented = {"get_order_details": 0.5, "lookup_everything": 0.3, "x" * 100: 0.2}
    assert fold_unknown_tools(invented) == {"get_order_details": 0.5, UNKNOWN_TOOL: pytest.approx(0.5)}
    assert evaluated_mix({EVALUATED_MIX_TAG: json.dumps(invented)}, "v")[UNKNOWN_TOOL] == pytest.approx(0.5)


# ---- reward distribution ----


def test_a_reward_shift_alarms_against_the_reference_day():
    reference = _rewards(1, 300)
    same = reward_shift(_rewards(2, 300), reference, "2026-11-23", SMALL)
    assert same.status == "ok" and same.value < SMALL.reward_max_ks
    shifted = reward_shift(_rewards(3, 300, shift=0.3), reference, "2026-11-23", SMALL)
    assert shifted.status == "alarm" and shifted.value > SMALL.reward_max_ks
    assert shifted.extra["p_value"] < SMALL.reward_alarm_p and "2026-11-23" in shifted.detail


def test_a_reward_shift_needs_both_distance_and_significance():
    # A wide gap between tiny samples is noise: distance above the limit, p-value not below alpha.
    tiny = WatchSettings(min_interactions=3)
    noisy = reward_shift([10.5, 10.5, -5.0], [10.5, -5.0, -5.0], "2026-11-23", tiny)
    assert noisy.value > tiny.reward_max_ks and noisy.extra["p_value"] > tiny.reward_alarm_p
    assert noisy.status == "ok"
    # A tiny shift between huge samples is significant but no news.
    reference = _rewards(4, 20_000)
    small = reward_shift(_rewards(5, 20_000, shift=0.04), reference, "2026-11-23", SMALL)
    assert small.extra["p_value"] < SMALL.reward_alarm_p and small.status == "ok"


def test_no_reference_or_too_few_rewards_is_not_measured():
    assert reward_shift(_rewards(1, 50), [], None, SMALL).status == "not_measured"
    few = reward_shift(_rewards(1, 10), _rewards(2, 50), "2026-11-23", SMALL)
    assert few.status == "not_measured" and "10 interactions with gold" in few.detail


def test_the_reference_is_the_first_day_with_enough_gold_before_the_watched_day():
    days = [ServedDay("2026-11-22", 30, 10), ServedDay("2026-11-23", 500, 450), ServedDay("2026-11-24", 500, 450)]
    assert reference_day(days, "2026-11-25", 400) == "2026-11-23"
    assert reference_day(days, "2026-11-23", 400) is None  # the first full day has nothing before it
    assert reference_day(days, "2026-11-25", 1000) is None


# ---- failure modes and the day's numbers ----


def _served(tmp_path, name: str, rates: dict, n: int, seed: int) -> list[dict]:
    out = tmp_path / name
    simulate(
        days=1,
        per_day=n,
        seed=seed,
        out_dir=out,
        world=generated_world(),
        mistake_rates=rates,
        intent_mix={"order_status": 0.5, "cancel_order": 0.5},
        verified_share=1.0,
    )
    return read_records(day_files(out))


def test_failure_mode_shares_of_a_day_count_each_mode_among_the_judged(tmp_path):
    expert = _served(tmp_path, "expert", EXPERT_RATES, 12, seed=1)
    looping = _served(tmp_path, "looping", {**EXPERT_RATES, "looping": 1.0}, 4, seed=2)
    escalating = _served(tmp_path, "escalating", {**EXPERT_RATES, "unnecessary_escalation": 1.0}, 4, seed=3)
    watch = watch_day("2026-11-23", "retail-agent/1", expert + looping + escalating, MIX, None, [], SMALL)
    assert watch.interactions == watch.judged_with_gold == 20
    assert watch.failure_modes["looping"] == pytest.approx(4 / 20)
    assert watch.failure_modes["unnecessary_escalation"] == pytest.approx(4 / 20)
    assert sum(watch.failure_modes.values()) == pytest.approx(8 / 20)  # the shares sum to the failure rate
    assert watch.tool_mix["transfer_to_human_agents"] > 0 and sum(watch.tool_mix.values()) == pytest.approx(1.0)
    assert sum(watch.reward_histogram.counts) == 20 and watch.reward_quantiles["p90"] >= watch.reward_quantiles["p10"]


def test_records_without_gold_count_for_the_mix_but_not_for_rewards_or_modes(tmp_path):
    records = _served(tmp_path, "expert", EXPERT_RATES, 6, seed=4)
    records[0] = {**records[0], "gold": None}
    records[1] = {**records[1], "messages": "not a transcript"}
    watch = watch_day("2026-11-23", "retail-agent/1", records, MIX, None, [], SMALL)
    assert watch.interactions == 6 and watch.judged_with_gold == 4
    [skipped] = watch.skipped
    assert skipped["interaction_id"] == records[1]["interaction_id"] and "bad_messages" in skipped["reason"]
