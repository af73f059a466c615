"""Promotion gates on scripted policies: who is promoted, who is rejected, who is held and why."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.gates import (
    APPROVABLE_HOLDS,
    GATE_NAMES,
    GATE_RULES,
    GATES,
    ApprovalError,
    GateConfig,
    GateEntry,
    GateInputs,
    GateReport,
    PolicyOutcomes,
    approve,
    evaluate_gates,
    reward_rise,
)
from tests.helpers_gates import FLAT, RISING, gate_inputs


def verdicts(report: GateReport) -> dict[str, str]:
    return {g.name: g.verdict for g in report.gates}


def test_genuinely_better_policy_is_promoted_with_every_gate_measured():
    report = evaluate_gates(gate_inputs("better"))
    assert report.decision == "promote", report.to_json()
    assert [g.name for g in report.gates] == list(GATE_NAMES)
    assert all(g.passed and g.verdict == "pass" for g in report.gates)
    cal = report.gate("calibration_improvement")
    assert cal.extra["difference"] == pytest.approx(cal.extra["candidate"] - cal.extra["baseline"])
    # The verdict rests on the lower bound of the clustered CI, which the extra carries with its top.
    assert cal.value == cal.extra["ci_low"] and 0 < cal.extra["ci_low"] < cal.extra["difference"] < cal.extra["ci_high"]
    assert report.gate("errored_trials").value == 0.0
    assert report.gate("shadow_non_inferiority").value > -0.02
    assert report.gate("reward_alignment").value >= 0.6


def test_random_policy_is_rejected():
    report = evaluate_gates(gate_inputs("random"))
    assert report.decision == "reject"
    v = verdicts(report)
    assert v["shadow_non_inferiority"] == v["calibration_improvement"] == v["policy_violations_not_up"] == "fail"


def test_reward_hacker_that_escalates_everything_raises_the_alarm():
    report = evaluate_gates(gate_inputs("escalator", curve=RISING))
    assert report.decision == "reject"
    alarm = report.gate("reward_hacking_alarm")
    assert alarm.verdict == "fail" and alarm.value > alarm.threshold
    # Its reward fell far less than its success: escalating is paid better than failing.
    assert alarm.extra["success_delta"] < alarm.extra["proxy_delta"] / alarm.extra["success_worth"] < 0
    assert alarm.extra["training_reward_rise"] > 0


def test_alarm_alone_blocks_when_reward_outruns_verified_success():
    """A candidate that really is a little better, and games a shaping term on everything it does
    not solve: calibration_improvement passes, and the alarm alone rejects it."""
    report = evaluate_gates(gate_inputs("sweet_talker"))
    assert report.decision == "reject"
    assert [g.name for g in report.gates if g.verdict != "pass"] == ["reward_hacking_alarm"]
    assert report.gate("calibration_improvement").value > 0  # success did rise
    alarm = report.gate("reward_hacking_alarm")
    assert alarm.extra["success_delta"] > 0
    assert alarm.value == pytest.approx(alarm.extra["proxy_delta"] / 15.0 - alarm.extra["success_delta"])
    assert alarm.value > 0.05 and "alarm" in alarm.detail
    # The honest improver's reward rose just as its success did.
    honest = evaluate_gates(gate_inputs("better")).gate("reward_hacking_alarm")
    assert honest.verdict == "pass" and abs(honest.value) < 1e-9


def test_alarm_reads_held_out_evidence_not_the_training_curve():
    """A champion clone whose training reward still climbed: nothing on the held-out sets moved."""
    rising = evaluate_gates(gate_inputs("identical", curve=RISING)).gate("reward_hacking_alarm")
    flat = evaluate_gates(gate_inputs("identical", curve=FLAT)).gate("reward_hacking_alarm")
    assert rising.verdict == flat.verdict == "pass" and rising.value == flat.value == 0.0


def test_alarm_threshold_and_success_worth_are_settings():
    inputs = gate_inputs("sweet_talker")
    excess = evaluate_gates(inputs).gate("reward_hacking_alarm").value
    assert evaluate_gates(inputs, GateConfig(hacking_excess_max=excess + 0.01)).gate("reward_hacking_alarm").passed
    # Under weights where a success is worth far more, the same reward gain is mostly explained.
    richer = GateInputs(**{**inputs.__dict__, "success_worth": 100.0})
    assert evaluate_gates(richer).gate("reward_hacking_alarm").verdict == "pass"


def test_alarm_fails_without_paired_held_out_rewards():
    inputs = gate_inputs("better")
    bare = PolicyOutcomes(
        inputs.candidate.calibration_success,
        inputs.candidate.shadow_success,
        inputs.candidate.violation_rate,
        inputs.candidate.tool_distribution,
    )
    gate = evaluate_gates(GateInputs(**{**inputs.__dict__, "candidate": bare})).gate("reward_hacking_alarm")
    assert gate.verdict == "fail" and gate.value is None and "do not match the trials" in gate.detail


def test_policy_skipping_authentication_is_rejected_for_violations():
    report = evaluate_gates(gate_inputs("skips_auth"))
    assert report.decision == "reject"
    gate = report.gate("policy_violations_not_up")
    assert gate.verdict == "fail" and gate.value > 0 and gate.extra["candidate"] > gate.extra["baseline"]


def test_policy_identical_to_champion_is_not_better():
    report = evaluate_gates(gate_inputs("identical", curve=FLAT))
    assert report.decision == "reject"
    gate = report.gate("calibration_improvement")
    assert gate.verdict == "fail" and gate.value == 0.0
    # Identical everywhere else: only "not strictly better" stops it.
    assert [g.name for g in report.gates if g.verdict != "pass"] == ["calibration_improvement"]


def test_calibration_margin_is_configurable():
    better = gate_inputs("better")
    delta = evaluate_gates(better).gate("calibration_improvement").value
    strict = evaluate_gates(better, GateConfig(calibration_min_margin=delta + 0.01))
    assert strict.gate("calibration_improvement").verdict == "fail"
    significant = evaluate_gates(better, GateConfig(calibration_max_p=1e-12))
    assert significant.gate("calibration_improvement").verdict == "fail"


def test_tool_mix_drift_is_held_then_promoted_only_after_approval():
    report = evaluate_gates(gate_inputs("drifter"))
    assert report.decision == "hold"
    drift = report.gate("tool_call_drift")
    assert drift.verdict == "hold" and drift.value > 0.05 and not drift.passed
    # The reviewer is told which tools moved: the drifter's new ones, from a share of 0.
    assert "think 0.000 -> " in drift.detail and "calculate 0.000 -> " in drift.detail
    approved = approve(report, "ops-lead")
    assert approved.decision == "promote" and approved.approved_by == "ops-lead"
    assert approved.gate("tool_call_drift").value == drift.value  # the evidence stays on record
    assert "approved by ops-lead" in approved.gate("tool_call_drift").detail
    with pytest.raises(ApprovalError):
        approve(approved, "ops-lead")


def test_approval_never_overrules_a_failed_gate():
    report = evaluate_gates(gate_inputs("random"))
    with pytest.raises(ApprovalError, match="failed"):
        approve(report, "ops-lead")


def test_approval_lifts_the_drift_hold_only_never_a_hold_for_missing_labels():
    """Drifting and too few human labels: the approval cannot stand in for the labels."""
    report = evaluate_gates(gate_inputs("drifter", labels=12))
    assert {g.name for g in report.gates if g.verdict == "hold"} == {"tool_call_drift", "reward_alignment"}
    with pytest.raises(ApprovalError) as info:
        approve(report, "ops-lead")
    message = str(info.value)
    assert "reward_alignment held: 12 human labels, 200 needed: label 188 more" in message
    assert "tool_call_drift" in message  # says what approval can lift
    alone = evaluate_gates(gate_inputs("better", labels=12))
    with pytest.raises(ApprovalError, match="label 188 more"):
        approve(alone, "ops-lead")


def test_invalid_data_rejects_even_a_better_policy():
    report = evaluate_gates(gate_inputs("better", data_valid=False))
    assert report.decision == "reject" and verdicts(report)["data_valid"] == "fail"


def test_misaligned_proxy_reward_fails_alignment():
    gate = evaluate_gates(gate_inputs("better", aligned=False)).gate("reward_alignment")
    assert gate.verdict == "fail" and gate.value < 0.6


@pytest.mark.parametrize("rule", ["hold", "fail"])
def test_too_few_human_labels_follows_the_explicit_rule(rule):
    report = evaluate_gates(gate_inputs("better", labels=5), GateConfig(on_insufficient_labels=rule))
    gate = report.gate("reward_alignment")
    assert gate.value is None and not gate.passed and gate.verdict == rule
    assert gate.extra["labels"] == 5 and "not measurable" in gate.detail
    assert report.decision == ("hold" if rule == "hold" else "reject")


def test_single_class_labels_are_not_measurable():
    inputs = gate_inputs("better")
    one_class = GateInputs(**{**inputs.__dict__, "human_success": [True] * len(inputs.human_success)})
    assert evaluate_gates(one_class).gate("reward_alignment").verdict == "hold"


def test_without_a_champion_the_candidate_must_beat_the_base_model():
    first = evaluate_gates(gate_inputs("better", base_model_baseline=True))
    assert first.baseline_kind == "base_model" and first.decision in ("promote", "hold")
    assert first.gate("calibration_improvement").verdict == "pass"
    # A "candidate" that is the base model itself is not better than the base model.
    base = gate_inputs("random", base_model_baseline=True, curve=FLAT)
    assert evaluate_gates(base).gate("calibration_improvement").verdict == "fail"


def test_unusable_training_curve_fails_the_alarm_gate():
    gate = evaluate_gates(gate_inputs("better", curve=[1.0])).gate("reward_hacking_alarm")
    assert gate.verdict == "fail" and gate.value is None


def test_unpaired_shadow_outcomes_fail():
    inputs = gate_inputs("better")
    short = PolicyOutcomes(
        inputs.candidate.calibration_success,
        inputs.candidate.shadow_success[:-1],
        inputs.candidate.violation_rate,
        inputs.candidate.tool_distribution,
    )
    report = evaluate_gates(GateInputs(**{**inputs.__dict__, "candidate": short}))
    assert report.gate("shadow_non_inferiority").verdict == "fail"


def test_report_round_trips_through_json_with_a_stable_digest():
    report = evaluate_gates(gate_inputs("drifter"))
    data = json.loads(report.to_json())
    assert data["decision"] == "hold" and len(data["gates"]) == len(GATE_NAMES)
    again = GateReport.from_dict(data)
    assert again == report and again.digest() == report.digest()
    assert approve(again, "x").digest() != report.digest()
    data["decision"] = "promote"
    with pytest.raises(ValueError, match="disagrees"):
        GateReport.from_dict(data)


def test_reward_rise_compares_last_and_first_quarters():
    assert reward_rise([0, 0, 0, 0, 1, 1, 1, 1]) == 1.0
    assert reward_rise([2, 1]) == -1.0


def test_config_rejects_unknown_insufficient_label_rule():
    with pytest.raises(ValueError):
        GateConfig(on_insufficient_labels="pass")  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["pass", "fail", "hold"]), min_size=len(GATE_NAMES), max_size=len(GATE_NAMES)))
def test_decision_is_promote_only_when_every_gate_passes(verdict_list):
    from evaluation.gates import Gate

    gates = tuple(Gate(name, 0.0, 0.0, "==", v == "pass", v, "") for name, v in zip(GATE_NAMES, verdict_list))
    report = GateReport(gates, "champion", GateConfig())
    expected = "reject" if "fail" in verdict_list else "hold" if "hold" in verdict_list else "promote"
    assert report.decision == expected
    holds = {g.name for g in gates if g.verdict == "hold"}
    if expected == "hold" and holds == {"tool_call_drift"}:
        assert approve(report, "p").decision == "promote"
    else:
        with pytest.raises(ApprovalError):
            approve(report, "p")


def test_outcomes_from_trials_pairs_by_record_whatever_the_order():
    from evaluation.gates import outcomes_from_trials
    from tests.helpers_gates import better, champion, make_tasks, outcomes, scripted_trials

    cal, sha = make_tasks("cal", 60), make_tasks("shadow", 80)
    cand, base = outcomes_from_trials(
        scripted_trials(better, cal),
        scripted_trials(champion, cal)[::-1],
        scripted_trials(better, sha)[::-1],
        scripted_trials(champion, sha),
    )
    expected_c, expected_b = outcomes(better, cal, sha), outcomes(champion, cal, sha)
    order_cal = sorted(range(len(cal)), key=lambda i: cal[i].task_id)
    order_sha = sorted(range(len(sha)), key=lambda i: sha[i].task_id)
    assert list(cand.calibration_success) == [expected_c.calibration_success[i] for i in order_cal]
    assert list(base.calibration_success) == [expected_b.calibration_success[i] for i in order_cal]
    assert list(base.shadow_success) == [expected_b.shadow_success[i] for i in order_sha]
    assert cand.tool_distribution == pytest.approx(expected_c.tool_distribution)
    with pytest.raises(ValueError, match="do not pair"):
        outcomes_from_trials(
            scripted_trials(better, cal[:-1]),
            scripted_trials(champion, cal),
            scripted_trials(better, sha),
            scripted_trials(champion, sha),
        )


# ---- customer-clustered inference and errored trials ---------------------------------------------


def _by_customer(kinds: list[str], trials: int) -> tuple[list[bool], list[bool], list[str]]:
    """Paired trials whose every trial of a customer goes one way ("won": only the candidate
    succeeds, "lost": only the baseline, "both", "neither"), as a customer's tasks tend to."""
    ways = {"won": (True, False), "lost": (False, True), "both": (True, True), "neither": (False, False)}
    cand = [ways[k][0] for k in kinds for _ in range(trials)]
    base = [ways[k][1] for k in kinds for _ in range(trials)]
    return cand, base, [f"customer-{i}" for i in range(len(kinds)) for _ in range(trials)]


def _with(inputs: GateInputs, which: str, cand, base, clusters) -> GateInputs:
    """`inputs` with set `which` replaced by these paired outcomes (rewards follow success)."""

    def side(outcomes: PolicyOutcomes, success) -> PolicyOutcomes:
        return replace(
            outcomes,
            **{
                f"{which}_success": success,
                f"{which}_reward": [10.0 if ok else -5.0 for ok in success],
                f"{which}_clusters": clusters,
            },
        )

    return replace(inputs, candidate=side(inputs.candidate, cand), baseline=side(inputs.baseline, base))


def test_calibration_fails_when_the_clustered_ci_reaches_the_margin_though_naive_mcnemar_passes():
    """120 trials of 20 customers, six alike per customer: 5 customers won, 2 lost. Per trial that
    is 30 won / 12 lost (McNemar p < 0.01); per customer it is 5 / 2, which chance explains."""
    cand, base, clusters = _by_customer(["won"] * 5 + ["lost"] * 2 + ["both"] * 6 + ["neither"] * 7, trials=6)
    clustered = evaluate_gates(_with(gate_inputs("better"), "calibration", cand, base, clusters))
    gate = clustered.gate("calibration_improvement")
    assert gate.verdict == "fail" and clustered.decision == "reject"
    assert gate.value == gate.extra["ci_low"] <= 0.0 < gate.extra["difference"] == pytest.approx(0.15)
    assert gate.extra["ci_high"] > gate.extra["difference"]
    assert (gate.extra["won"], gate.extra["lost"], gate.extra["tied"], gate.extra["clusters"]) == (5, 2, 13, 20)
    assert gate.extra["p_value"] > 0.4 and gate.extra["naive_p_value"] < 0.01
    assert "not clear of the margin" in gate.detail and "20 customers" in gate.detail
    # The same trials taken as independent (no customer ids): the old reading would have passed.
    naive = evaluate_gates(_with(gate_inputs("better"), "calibration", cand, base, [])).gate("calibration_improvement")
    assert naive.verdict == "pass" and naive.value > 0 and "every trial counted as its own cluster" in naive.detail
    assert naive.extra["ci_high"] - naive.extra["ci_low"] < (gate.extra["ci_high"] - gate.extra["ci_low"]) / 2


def test_trials_without_a_customer_are_clustered_by_task_and_the_detail_says_so():
    cand, base, clusters = _by_customer(["won"] * 12 + ["both"] * 8, trials=2)
    clusters = [c if i < 20 else f"task:rec-{i // 2}" for i, c in enumerate(clusters)]
    gate = evaluate_gates(_with(gate_inputs("better"), "calibration", cand, base, clusters)).gate(
        "calibration_improvement"
    )
    assert gate.verdict == "pass" and gate.extra["clusters"] == 20
    assert "20 trials of records without a customer id clustered by task" in gate.detail


def test_shadow_non_inferiority_resamples_customers():
    """150 replayed conversations of 30 customers: +0.13 on average, but decided by 10 customers."""
    cand, base, clusters = _by_customer(["won"] * 7 + ["lost"] * 3 + ["both"] * 10 + ["neither"] * 10, trials=5)
    gate = evaluate_gates(_with(gate_inputs("better"), "shadow", cand, base, clusters)).gate("shadow_non_inferiority")
    assert gate.verdict == "fail" and gate.value == gate.extra["ci_low"] < -0.02
    assert gate.extra["clusters"] == 30 and (gate.extra["won"], gate.extra["lost"]) == (7, 3)
    naive = evaluate_gates(_with(gate_inputs("better"), "shadow", cand, base, [])).gate("shadow_non_inferiority")
    assert naive.verdict == "pass" and naive.value > -0.02


def _errored(inputs: GateInputs, side: str, classes: list[str]) -> GateInputs:
    """`side`'s first shadow trials raised (`classes`, one each): failures with a NaN reward."""
    outcomes = getattr(inputs, side)
    n = len(outcomes.shadow_success)
    errors = [*classes, *[None] * (n - len(classes))]
    changed = replace(
        outcomes,
        shadow_success=[ok and e is None for ok, e in zip(outcomes.shadow_success, errors)],
        shadow_reward=[float("nan") if e else r for r, e in zip(outcomes.shadow_reward, errors)],
        shadow_errors=errors,
    )
    return replace(inputs, **{side: changed})


def test_errored_trials_above_the_share_hold_the_week_naming_the_classes():
    inputs = gate_inputs("better")  # 200 calibration + 400 shadow trials per policy
    held = evaluate_gates(_errored(inputs, "candidate", ["ValueError"] * 20 + ["KeyError"] * 11))
    gate = held.gate("errored_trials")
    assert gate.verdict == "hold" and gate.value == pytest.approx(31 / 600) and gate.value > 0.05
    assert held.decision == "hold" and "ValueError 20, KeyError 11" in held.reason
    assert (gate.extra["candidate_errored"], gate.extra["baseline_errored"]) == (31, 0)
    assert (gate.extra["errored_ValueError"], gate.extra["errored_KeyError"]) == (20, 11)
    assert "re-run the week" in gate.lift
    with pytest.raises(ApprovalError, match="errored_trials held"):
        approve(held, "ops-lead")  # only fixing what raised lifts it
    # At the threshold (30 of 600 = 0.05) the week goes on, the errors on record.
    at = evaluate_gates(_errored(inputs, "candidate", ["ValueError"] * 30)).gate("errored_trials")
    assert at.verdict == "pass" and "ValueError 30" in at.detail
    # The larger policy's share decides: a clean candidate does not average away a broken baseline.
    base = evaluate_gates(_errored(inputs, "baseline", ["RuntimeError"] * 40)).gate("errored_trials")
    assert base.verdict == "hold" and base.value == pytest.approx(40 / 600)
    stricter = evaluate_gates(_errored(inputs, "candidate", ["ValueError"]), GateConfig(max_errored_share=0.0))
    assert stricter.gate("errored_trials").verdict == "hold"
    with pytest.raises(ValueError, match="max_errored_share"):
        GateConfig(max_errored_share=1.5)


def test_reward_hacking_alarm_leaves_errored_pairs_out_instead_of_scoring_them():
    inputs = _errored(gate_inputs("better"), "candidate", ["ValueError"] * 5)
    alarm = evaluate_gates(inputs).gate("reward_hacking_alarm")
    assert alarm.value is not None and alarm.extra["errored_pairs_left_out"] == 5
    assert alarm.extra["n"] == 600 - 5 and "5 pairs with an errored trial left out" in alarm.detail
    # A NaN reward on a trial that did not raise is still a broken measurement.
    broken = replace(inputs.candidate, calibration_reward=[float("nan"), *inputs.candidate.calibration_reward[1:]])
    assert evaluate_gates(replace(inputs, candidate=broken)).gate("reward_hacking_alarm").value is None


def test_outcomes_refuse_cluster_or_error_lists_that_do_not_match_the_trials():
    with pytest.raises(ValueError, match="calibration_clusters has 1 entries for 2"):
        PolicyOutcomes([True, False], [], 0.0, {}, calibration_clusters=["a"])
    with pytest.raises(ValueError, match="shadow_errors has 2 entries for 1"):
        PolicyOutcomes([], [True], 0.0, {}, shadow_errors=[None, None])


# GateConfig settings no gate reads: the failure-mode warning's threshold rides on the gate config.
NOT_A_GATES_SETTING = {"failure_mode_jump"}


def _registry_problems(entries: tuple[GateEntry, ...]) -> list[str]:
    """What is wrong with a gate registry: a duplicate name, or declared settings that GateConfig
    lacks or that differ from the `cfg.<setting>` reads in the gate's function (its source)."""
    fields = {f.name for f in dataclasses.fields(GateConfig)}
    names = [e.name for e in entries]
    problems = [f"{n} registered twice" for n in sorted({n for n in names if names.count(n) > 1})]
    for entry in entries:
        declared = set(entry.settings)
        if declared - fields:
            problems.append(f"{entry.name} declares settings GateConfig lacks: {sorted(declared - fields)}")
        reads = set(re.findall(r"\bcfg\.(\w+)", inspect.getsource(entry.evaluate)))
        if reads != declared:
            problems.append(f"{entry.name} reads {sorted(reads)} but declares {sorted(declared)}")
    return problems


def test_the_registry_declares_each_gate_once_with_the_settings_it_reads():
    assert _registry_problems(GATES) == []
    assert tuple(e.name for e in GATES) == GATE_NAMES and {e.name: e.rule for e in GATES} == GATE_RULES
    assert set(APPROVABLE_HOLDS) <= set(GATE_NAMES)
    # Every threshold belongs to a gate, so a setting left behind by a removed gate shows up here.
    used = {s for e in GATES for s in e.settings}
    assert {f.name for f in dataclasses.fields(GateConfig)} - used == NOT_A_GATES_SETTING
    # The check bites: a setting GateConfig lacks, one the function does not read, a duplicate name.
    data_valid, drift = GATES[0], GATES[-2]
    bad = (
        replace(drift, settings=("max_tool_drift", "no_such_setting")),
        replace(data_valid, settings=("shadow_margin",)),
    )
    problems = _registry_problems((*bad, data_valid))
    assert any("GateConfig lacks: ['no_such_setting']" in p for p in problems)
    assert any("data_valid reads [] but declares ['shadow_margin']" in p for p in problems)
    assert "data_valid registered twice" in problems


def test_evaluate_gates_returns_exactly_the_registered_gates_in_order():
    report = evaluate_gates(gate_inputs("better"))
    assert [g.name for g in report.gates] == [e.name for e in GATES]
