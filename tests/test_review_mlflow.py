"""The weekly review queue in the browser: `retrain review export --to mlflow` and `retrain review
import --from-mlflow`, on simulated traffic in a real store and a real MLflow tracking store
(sqlite in tmp). Verdicts are recorded through MLflow's assessment API with a HUMAN source, as the
MLflow UI records them."""

from __future__ import annotations

import json
import shutil

import mlflow
import pytest
from mlflow.entities import AssessmentSource, AssessmentSourceType

from dataplane.store import open_store
from orchestration.cli import main
from orchestration.cli.review_mlflow import REVIEW_EXPERIMENT
from tests.helpers_traffic import simulated_store
from tracking.registry import mlflow_client
from tracking.traces import tracing_to

WEEK = "2026-11-23"  # a Monday


@pytest.fixture(scope="module")
def week_store(tmp_path_factory):
    """One week of simulated traffic (252 interactions) ingested into a store; tests work on copies."""
    return simulated_store(tmp_path_factory.mktemp("week"), WEEK, days=7, per_day=36, seed=5, label_share=0.0)


@pytest.fixture()
def home_with_week(home, week_store, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    shutil.copy(week_store, home.duckdb_path)
    return home


def _export(capsys, n: int = 200) -> dict:
    assert main(["review", "export", "--week", WEEK, "--n", str(n), "--to", "mlflow"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[: out.rindex("}") + 1])
    assert f"experiment {REVIEW_EXPERIMENT!r} (id {summary['experiment_id']})" in out and summary["url"] in out
    return summary


def _review_traces(uri: str, experiment_id: str) -> list:
    return list(mlflow_client(uri).search_traces(locations=[experiment_id], max_results=1000, include_spans=False))


def _judge(uri: str, traces: list, rater: str, verdict=lambda i: i % 3 != 0) -> None:
    """`rater` gives each trace a boolean `task_success` feedback, as the UI's assessment form does."""
    source = AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id=rater)
    with tracing_to(uri):
        for i, trace in enumerate(traces):
            mlflow.log_feedback(trace_id=trace.info.trace_id, name="task_success", value=verdict(i), source=source)


def _import(capsys) -> tuple[int, dict]:
    code = main(["review", "import", "--from-mlflow", "--week", WEEK, "--json"])
    return code, json.loads(capsys.readouterr().out)


def _labels(home) -> list[tuple]:
    with open_store(home.duckdb_path, read_only=True) as con:
        return con.execute(
            "SELECT interaction_id, rater, task_success, os_user, sample_id FROM labels ORDER BY interaction_id, rater"
        ).fetchall()


def test_200_traces_50_verdicts_imported_twice_give_50_labels(home_with_week, capsys, tmp_path):
    home = home_with_week
    summary = _export(capsys)
    assert (summary["sampled"], summary["logged"], summary["already_logged"]) == (200, 200, 0)
    assert summary["url"].endswith(f"/#/experiments/{summary['experiment_id']}/traces")

    # The same recorded sample the JSONL export writes: same sample id, same interactions.
    out = tmp_path / "review.jsonl"
    assert main(["review", "export", "--week", WEEK, "--n", "200", "--out", str(out)]) == 0
    capsys.readouterr()
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {line["sample_id"] for line in lines} == {summary["sample_id"]}
    traces = _review_traces(home.mlflow_uri, summary["experiment_id"])
    assert len(traces) == 200
    assert {t.info.tags["interaction_id"] for t in traces} == {line["interaction_id"] for line in lines}
    assert {(t.info.tags["review_week"], t.info.tags["sample_id"]) for t in traces} == {(WEEK, summary["sample_id"])}
    by_id = {line["interaction_id"]: line for line in lines}
    one = next(t for t in traces if by_id[t.info.tags["interaction_id"]]["verified_success"] is not None)
    line = by_id[one.info.tags["interaction_id"]]
    code = {a.name: a.value for a in one.info.assessments}
    assert code["verified_success"] == line["verified_success"] and code["proxy_reward"] == line["proxy_reward"]
    assert one.info.tags["intent"] == line["intent"] and one.info.tags["outcome"] == line["outcome"]

    # Exporting again logs nothing twice.
    again = _export(capsys)
    assert (again["logged"], again["already_logged"]) == (0, 200)
    assert len(_review_traces(home.mlflow_uri, summary["experiment_id"])) == 200

    judged = sorted(traces, key=lambda t: t.info.tags["interaction_id"])[:50]
    _judge(home.mlflow_uri, judged, "ann")
    code, first = _import(capsys)
    assert code == 0 and (first["verdicts"], first["stored"], first["already_stored"]) == (50, 50, 0)
    code, second = _import(capsys)
    assert code == 0 and (second["stored"], second["already_stored"]) == (0, 50)
    labels = _labels(home)
    assert len(labels) == 50
    expected = {t.info.tags["interaction_id"]: i % 3 != 0 for i, t in enumerate(judged)}
    assert {rid: ok for rid, _rater, ok, _os, _sid in labels} == expected
    assert {(rater, os_user, sid) for _rid, rater, _ok, os_user, sid in labels} == {
        ("ann", "mlflow:ann", summary["sample_id"])
    }


def test_a_second_rater_is_kept_and_disagreements_reported_and_a_changed_verdict_refused(home_with_week, capsys):
    home = home_with_week
    summary = _export(capsys, n=20)
    traces = sorted(_review_traces(home.mlflow_uri, summary["experiment_id"]), key=lambda t: t.info.trace_id)[:6]
    _judge(home.mlflow_uri, traces, "ann", verdict=lambda i: True)
    _judge(home.mlflow_uri, traces[:3], "bob", verdict=lambda i: i != 0)  # bob disagrees on the first
    code, result = _import(capsys)
    assert code == 0 and result["stored"] == 9 and set(result["raters"]) == {"ann", "bob"}
    first = traces[0].info.tags["interaction_id"]
    assert result["disagreements"] == [{"interaction_id": first, "labels": {"ann": True, "bob": False}}]

    # ann changes her mind in the browser (an edit overrides her verdict): a stored label is never
    # changed, so ann's verdicts are refused, named by trace, and bob's still count as stored.
    with tracing_to(home.mlflow_uri):
        mine = next(a for a in mlflow.get_trace(traces[1].info.trace_id).info.assessments if a.name == "task_success")
        mlflow.override_feedback(
            trace_id=traces[1].info.trace_id,
            assessment_id=mine.assessment_id,
            value=False,
            source=AssessmentSource(source_type=AssessmentSourceType.HUMAN, source_id="ann"),
        )
    code, result = _import(capsys)
    assert code == 2 and result["stored"] == 0 and result["already_stored"] == 3
    (problem,) = result["refused"]["ann"]
    assert problem["rule"] == "label_conflict" and traces[1].info.trace_id in problem["detail"]
    assert len(_labels(home)) == 9


def test_mlflow_tracking_uri_is_where_the_review_goes(home_with_week, capsys, tmp_path, monkeypatch):
    from orchestration.environment import default_resources

    elsewhere = f"sqlite:///{tmp_path / 'server.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", elsewhere)
    assert default_resources()["mlflow"].uri(home_with_week) == elsewhere  # the weekly run's resource too
    summary = _export(capsys, n=5)
    assert len(_review_traces(elsewhere, summary["experiment_id"])) == 5
    assert mlflow_client(home_with_week.mlflow_uri).get_experiment_by_name(REVIEW_EXPERIMENT) is None
    _judge(elsewhere, _review_traces(elsewhere, summary["experiment_id"]), "cy")
    code, result = _import(capsys)
    assert code == 0 and result["stored"] == 5


def test_the_cli_says_which_flags_go_together(home_with_week, capsys, tmp_path):
    assert main(["review", "export", "--week", WEEK, "--to", "mlflow", "--out", str(tmp_path / "x.jsonl")]) == 2
    assert main(["review", "export", "--week", WEEK]) == 2  # --to file needs --out
    assert main(["review", "import", "--from-mlflow"]) == 2  # needs --week
    assert main(["review", "import", "x.jsonl", "--from-mlflow", "--week", WEEK]) == 2  # a file or MLflow
    assert main(["review", "import", "x.jsonl"]) == 2  # a file needs --by
    assert main(["review", "import", "--from-mlflow", "--week", WEEK]) == 2  # nothing exported yet
    err = capsys.readouterr().err
    assert "--from-mlflow needs --week" in err and "no experiment 'weekly-review'" in err
    assert "give no FILE" in err


def test_verdicts_the_ui_records_as_user_are_stored_only_under_the_reviewer_named_with_by(home_with_week, capsys):
    from dataplane.labels import check_os_user, current_os_user

    home = home_with_week
    summary = _export(capsys, n=10)
    traces = _review_traces(home.mlflow_uri, summary["experiment_id"])[:4]
    _judge(home.mlflow_uri, traces, "User")  # what MLflow 3.17's trace view records for whoever types
    code, result = _import(capsys)
    assert code == 2 and result["stored"] == 0
    assert result["ui_placeholder_verdicts"] == sorted(t.info.trace_id for t in traces)
    assert _labels(home) == []
    code = main(["review", "import", "--from-mlflow", "--week", WEEK, "--by", "dee", "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and result["stored"] == 4 and result["ui_placeholder_verdicts"] == []
    # The file import's provenance: the name given, and the OS account that vouched for it.
    assert {(rater, os_user) for _rid, rater, _ok, os_user, _sid in _labels(home)} == {
        ("dee", check_os_user(current_os_user()))
    }
