"""The Great Expectations window suite: a good window passes, each bad one fails by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dataplane.contract import validate_record
from dataplane.pii_records import scrub_record
from dataplane.validation import docs_index, validate_window
from dataplane.window import records_frame
from tests.helpers_data import NOW, build_records

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def good_frame(world, reference_tasks):
    # As stored: scrubbed (the reference customers' addresses pseudonymised).
    return records_frame([scrub_record(validate_record(r, NOW)) for r in build_records(world, reference_tasks, 30)])


def test_good_window_passes_and_leaves_json_and_docs(good_frame, home):
    report = validate_window(good_frame, home, min_rows=30, name="2024-W23")
    assert report.success, report.failed
    assert len(report.results) == 15 and all(r["success"] for r in report.results)
    assert report.result("min_gold_share")["observed"] == pytest.approx(20 / 30)
    saved = json.loads(Path(report.results_path).read_text())
    assert saved["report"]["success"] is True and saved["gx"]["success"] is True
    assert docs_index(home).exists()
    assert report.docs_path.endswith("index.html")
    json.dumps(report.to_dict())


def _broken(frame, column, value, rows=(3, 7)):
    bad = frame.copy()
    for row in rows:
        bad.loc[row, column] = value
    return bad


CASES = [
    ("interaction_id_unique", lambda f: _broken(f, "interaction_id", "int-000001", rows=(3,))),
    ("outcome_in_set", lambda f: _broken(f, "outcome", "vanished")),
    ("intent_in_set", lambda f: _broken(f, "intent", "complain")),
    ("sentiment_in_range", lambda f: _broken(f, "customer_sentiment_delta", 3.0)),
    ("actions_non_negative", lambda f: _broken(f, "actions_taken", -1)),
    ("escalation_consistent_with_outcome", lambda f: _broken(f, "escalation_flag", "true")),
    ("no_pii", lambda f: _broken(f, "text", "my card 4111 1111 1111 1111")),
    ("ended_at_rfc3339", lambda f: _broken(f, "ended_at_text", "2024-06-03 noon")),
]


@pytest.mark.parametrize("name,breaker", CASES, ids=[c[0] for c in CASES])
def test_bad_window_fails_on_the_right_expectation(good_frame, home, name, breaker):
    report = validate_window(breaker(good_frame), home)
    assert not report.success
    # An unknown outcome is also an outcome/flag pair outside the allowed set.
    also = {"escalation_consistent_with_outcome"} if name == "outcome_in_set" else set()
    assert set(report.failed) == {name} | also
    failing = report.result(name)
    assert failing["unexpected_count"] >= 1
    assert set(failing["sample_ids"]) <= set(good_frame["interaction_id"])
    assert failing["sample_ids"] and len(failing["sample_ids"]) <= 5


def test_ended_before_started_and_unparseable(good_frame, home):
    bad = good_frame.copy()
    bad.loc[2, "ended_at"] = bad.loc[2, "started_at"] - (bad.loc[2, "ended_at"] - bad.loc[2, "started_at"])
    bad.loc[4, "started_at"] = None
    report = validate_window(bad, home)
    assert set(report.failed) == {"started_not_after_ended", "started_at_parseable"}
    # the row without a start cannot show started <= ended either
    assert report.result("started_not_after_ended")["sample_ids"] == ["int-000002", "int-000004"]


def test_thresholds_gold_share_and_min_rows(good_frame, home):
    report = validate_window(good_frame, home, min_gold_share=0.9, min_rows=31)
    assert set(report.failed) == {"min_gold_share", "min_rows"}
    assert report.result("min_rows")["observed"] == 30


def test_escalation_flag_allowed_on_escalated(good_frame, home):
    ok = good_frame.copy()
    ok.loc[1, "outcome"], ok.loc[1, "escalation_flag"] = "escalated", "false"
    assert validate_window(ok, home).success


def test_loading_the_code_location_does_not_import_great_expectations():
    # GX takes seconds to import; only a window validation may pay for it.
    code = "import sys, orchestration.definitions; print('great_expectations' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "False"
