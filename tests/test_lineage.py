"""ChampionLineage: what a model version is registered with, written as tags and read back typed."""

from __future__ import annotations

from dataclasses import fields

import pytest

from dataplane.hashing import MODEL_DIGEST_KEY
from evaluation.decision import EVALUATED_MIX_TAG, ChampionLineage, LineageTagError, PromotionDecision
from evaluation.gates import evaluate_gates
from tests.helpers_gates import gate_inputs

FULL = ChampionLineage(
    window_hash="ab" * 32,
    window_rows=10_000,
    validation="passed",
    base_model="models/retail-agent-tiny",
    dagster_run_id="d-run",
    domain="retail",
    shadow_success=0.1234567890123,
    violation_rate=0.03,
    calibration_success=0.5,
    calibration_rows=120,
    calibration_version="v3",
    calibration_set_hash="cd" * 32,
    shadow_rows=269,
    evaluated_tool_mix={"get_order_details": 0.25, "unknown_tool": 0.75},
    week="2026-11-16",
    run_id="m-run",
    model_digest="ef" * 32,
    approved_by="alice",
    trained_from="models/canary-v2",
)


def test_tags_round_trip_every_field_with_its_type():
    tags = FULL.to_tags()
    assert all(isinstance(v, str) for v in tags.values()) and set(tags) == {f.name for f in fields(FULL)}
    assert ChampionLineage.from_tags(tags) == FULL
    # The tag names other rooms look up are the field names.
    assert tags[MODEL_DIGEST_KEY] == FULL.model_digest and EVALUATED_MIX_TAG in tags


def test_an_unset_field_writes_no_tag_and_reads_back_as_none():
    base = ChampionLineage(shadow_success=0.25, violation_rate=0.0)
    # The base model must carry no `week` tag: that tag is how the registry finds a week's candidate.
    assert base.to_tags() == {"shadow_success": "0.25", "violation_rate": "0.0"}
    # A version's other tags (gate_decision, role, ...) are not lineage and are ignored.
    assert ChampionLineage.from_tags({**base.to_tags(), "gate_decision": "promote"}) == base


def test_a_tag_that_does_not_parse_is_named():
    with pytest.raises(LineageTagError, match="shadow_success"):
        ChampionLineage.from_tags({"shadow_success": "high"})
    with pytest.raises(LineageTagError, match=EVALUATED_MIX_TAG):
        ChampionLineage.from_tags({EVALUATED_MIX_TAG: "not json"})


def test_the_decision_keeps_the_lineage_typed_through_its_json_record():
    decision = PromotionDecision("2026-11-16", evaluate_gates(gate_inputs("better")), "/m", FULL, "m-run")
    assert PromotionDecision.from_dict(decision.to_dict()).lineage == FULL
    # A decision recorded before the type existed held the same names in a plain dict.
    old = {**decision.to_dict(), "lineage": {"window_hash": "h", MODEL_DIGEST_KEY: "x", "dropped_key": 1}}
    assert PromotionDecision.from_dict(old).lineage == ChampionLineage(window_hash="h", model_digest="x")
