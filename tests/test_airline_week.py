"""A week of airline traffic through `retrain run --domain airline` at the product's defaults.

There is no airline agent: the tiny model built for the domain does not call tools. The week must
still end in a decision, an honest reject, and must not make that model the airline champion."""

from __future__ import annotations

import dagster as dg
import pytest

from assets.training import _acts_check
from tests.helpers_traffic import retrain

WEEK = "2026-11-16"


def test_a_model_that_cannot_act_blocks_unless_its_domain_has_no_agent_yet():
    broken = _acts_check(0.0, 0.5, "/models/x", no_agent=False)
    assert not broken.passed and broken.severity == dg.AssetCheckSeverity.ERROR  # blocking: the week stops
    new = _acts_check(0.0, 0.5, "/models/x", no_agent=True)
    assert not new.passed and new.severity == dg.AssetCheckSeverity.WARN  # the week goes on to a reject
    assert "no agent of this domain yet" in new.description
    assert _acts_check(0.75, 0.5, "/models/x", no_agent=True).passed


@pytest.mark.slow
def test_an_airline_week_at_the_defaults_ends_in_an_honest_reject(tmp_path):
    home = tmp_path / "home"
    simulated = retrain(
        "simulate", "--domain", "airline", "--days", "7", "--per-day", "30", "--start", WEEK,
        "--out", str(home / "landing"), home=home,
    )  # fmt: skip
    assert simulated.returncode == 0, simulated.stderr[-3000:]
    run = retrain("run", "--domain", "airline", "--week", WEEK, home=home)
    assert run.returncode == 0, (run.stdout + run.stderr)[-4000:]
    assert "(airline): succeeded" in run.stdout and "decision: reject" in run.stdout

    from assets.decisions import latest_decision
    from dataplane.home import Home
    from tracking.registry import champion_info

    with dg.DagsterInstance.from_config(str(Home(home).dagster_home)) as instance:
        decision = latest_decision(instance, WEEK, "airline")
    assert decision is not None
    assert decision.decision == "reject"
    gate = decision.report.gate("calibration_improvement")
    assert not gate.passed and gate.value is not None and gate.value <= 0  # nothing to beat, nothing gained
    # The model that cannot act is neither the champion nor registered as one.
    assert champion_info(Home(home).mlflow_uri, "airline-agent") is None

    # A person cannot approve a rejected week; the command finds the airline's decision, not retail's.
    refused = retrain("approve", "--domain", "airline", "--week", WEEK, "--by", "ann", home=home)
    assert refused.returncode != 0 and "calibration_improvement" in refused.stderr
    retail = retrain("approve", "--week", WEEK, "--by", "ann", home=home)
    assert retail.returncode != 0 and "of retail has no promotion decision" in retail.stderr
