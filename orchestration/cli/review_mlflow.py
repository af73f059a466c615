"""The weekly review queue in the browser: the week's sample as MLflow traces, verdicts read back.

`retrain review export --week W --to mlflow` draws the same recorded, stratified, seeded sample as
the JSONL export (`orchestration.cli.review.draw_review_sample`) and logs each sampled interaction as
one trace (`tracking.traces`: a span per customer turn, assistant turn and tool call) in the
experiment `REVIEW_EXPERIMENT`, tagged `interaction_id`, `review_week` and `sample_id`, with what
the JSONL line says beside the transcript: intent, outcome, policy version and failure mode as
tags, the replayed verified success, proxy reward and reward terms as CODE feedback. Exporting
the week again logs only the interactions that have no trace yet.

A reviewer opens each trace in the MLflow UI and adds a feedback named `task_success`, a boolean,
with a HUMAN source. `retrain review import --from-mlflow --week W` reads those verdicts (the
valid ones: an edited verdict replaces the one it overrides) and stores them through
`dataplane.labels.import_label_rows`, the core of the file import, so the same rules hold: a
rater's name is checked and masked, only the sample's interactions are accepted, a rater's verdict
is never changed (a different second verdict is a `label_conflict`), a re-import stores nothing
new, and disagreements between raters are reported. Each rater's verdicts are stored all or none.

Who the rater is. A verdict logged with a source id (MLflow's assessment API, `mlflow.log_feedback`
with `AssessmentSource("HUMAN", "ann")`) is that source's: the rater is the source id, stored with
`os_user` `mlflow:<source id>` (the MLflow identity, not the OS account running the import, gave
it). MLflow 3.17's trace view, though, records every verdict typed into its form with the source id
`User`, whoever is signed in (measured on an open server and on one with `--app-name basic-auth`):
it names nobody. Those verdicts are refused (`ui_placeholder_rater`) unless the import names their
reviewer with `--by`, who then vouches for them as for a file, under the OS account running the
import. Two reviewers typing into one sample's traces cannot be told apart, so give each browser
reviewer their own sample (another `--seed`) or log verdicts through the API.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from assets.partitions import week_key
from assets.resources import MLflowTracking
from dataplane.home import Home
from dataplane.labels import ImportSummary, LabelFileError, LineProblem, disagreements, import_label_rows, labels_for
from dataplane.store import StoreLockedError, open_store
from domains.registry import DEFAULT_DOMAIN
from orchestration import environment
from orchestration.cli.errors import CliError
from orchestration.cli.review import SampleSettings, draw_review_sample, review_line
from tracking.registry import RegistryError, ensure_experiment, mlflow_client, mlflow_step
from tracking.traces import (
    KIND_TAG,
    REVIEW_KIND,
    ConversationTrace,
    all_traces,
    conversation_spans,
    judged_feedback,
    send_trace,
    tracing_to,
)

REVIEW_EXPERIMENT = "weekly-review"
VERDICT = "task_success"  # the feedback a reviewer adds, as in the JSONL file
UI_PLACEHOLDER = "User"  # the source id MLflow 3.17's trace view gives every verdict typed into it
WEEK_TAG, SAMPLE_TAG, INTERACTION_TAG = "review_week", "sample_id", "interaction_id"


def review_trace(record: Mapping[str, Any], line: Mapping[str, Any]) -> ConversationTrace:
    """The trace of one sampled interaction: its transcript, and its review line's facts."""
    messages = record.get("messages") or []
    tags = {
        KIND_TAG: REVIEW_KIND,
        INTERACTION_TAG: line["interaction_id"],
        WEEK_TAG: line["week"],
        SAMPLE_TAG: line["sample_id"],
        "intent": str(line.get("intent") or ""),
        "outcome": str(line.get("outcome") or ""),
        "policy_version": str(line.get("policy_version") or ""),
        "failure_mode": str(line.get("failure_mode") or "none"),
    }
    if line.get("replay_error"):
        tags["replay_error"] = str(line["replay_error"])[:500]
    return ConversationTrace(
        name=f"review {line['week']} {line['interaction_id']}",
        inputs={"persona": line.get("persona"), "instruction": line.get("instruction")},
        outputs={"outcome": line.get("outcome"), "started_at": line.get("started_at")},
        spans=conversation_spans(messages),
        tags=tags,
        feedback=judged_feedback(
            line.get("verified_success"), line.get("proxy_reward"), line.get("reward_terms") or {}
        ),
    )


def _tracking(home: Home) -> tuple[MLflowTracking, str]:
    tracking = environment.mlflow_tracking()  # MLFLOW_TRACKING_URI, else the home's sqlite store
    return tracking, tracking.uri(home)


def _review_traces(client: Any, experiment_id: str, week: str) -> list[Any]:
    """Every review trace of `week` in the experiment, with its assessments (no spans)."""
    return all_traces(client, experiment_id, f"tags.{KIND_TAG} = '{REVIEW_KIND}' AND tags.{WEEK_TAG} = '{week}'")


def export_to_mlflow(
    week: str, n: int = SampleSettings.n, seed: int = SampleSettings.seed, domain: str = DEFAULT_DOMAIN
) -> dict[str, Any]:
    """Log the review sample of the week holding `week` as traces; returns a summary with the
    experiment and where to open it."""
    drawn = draw_review_sample(week, n, seed, domain)
    home = environment.home().ensure()
    tracking, uri = _tracking(home)
    client = mlflow_client(uri)
    with mlflow_step(uri, "open the review experiment"):
        experiment_id = ensure_experiment(client, REVIEW_EXPERIMENT, home.mlflow_artifacts.as_uri())
        there = {t.info.tags.get(INTERACTION_TAG) for t in _review_traces(client, experiment_id, drawn.week)}
    sample_id = drawn.sample.sample_id
    fresh = [r for r in drawn.records if r["interaction_id"] not in there]
    with tracing_to(uri):
        for record in fresh:
            send_trace(review_trace(record, review_line(record, drawn.week, None, sample_id)), experiment_id)
    return {
        "week": drawn.week,
        "sample_id": sample_id,
        "to": "mlflow",
        "experiment": REVIEW_EXPERIMENT,
        "experiment_id": experiment_id,
        "url": tracking.traces_url(experiment_id),
        "population": drawn.population,
        "sampled": len(drawn.records),
        "logged": len(fresh),
        "already_logged": len(drawn.records) - len(fresh),
        "seed": seed,
        "strata": drawn.strata(),
    }


@dataclass(frozen=True)
class Verdict:
    """One reviewer's `task_success` feedback on one review trace."""

    trace_id: str
    interaction_id: str
    sample_id: str
    rater: str
    value: Any
    labeled_at: datetime
    note: str | None


@dataclass
class MlflowImport:
    """What `--from-mlflow` did: each rater's import (`ImportSummary`), each refused rater's
    problems, verdicts without a rater's name, and where the labels' raters disagree."""

    week: str
    experiment_id: str
    traces: int
    verdicts: int
    imported: list[ImportSummary] = field(default_factory=list)
    refused: dict[str, list[LineProblem]] = field(default_factory=dict)
    unnamed: list[str] = field(default_factory=list)
    placeholder: list[str] = field(default_factory=list)
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "week": self.week,
            "experiment_id": self.experiment_id,
            "traces": self.traces,
            "verdicts": self.verdicts,
            "stored": sum(s.inserted for s in self.imported),
            "already_stored": sum(s.unchanged for s in self.imported),
            "raters": {s.rater: {"labels": s.labels, "stored": s.inserted} for s in self.imported},
            "refused": {
                rater: [{"row": p.line_no, "rule": p.rule, "detail": p.detail} for p in problems]
                for rater, problems in self.refused.items()
            },
            "unnamed_verdicts": self.unnamed,
            "ui_placeholder_verdicts": self.placeholder,
            "disagreements": self.disagreements,
        }


def verdicts_of(traces: list[Any]) -> list[Verdict]:
    """Every valid HUMAN `task_success` feedback on `traces`, oldest first (an edit in the UI
    marks the verdict it overrides invalid: only the current one counts)."""
    found = []
    for trace in traces:
        info = trace.info
        for a in info.assessments:
            if a.name != VERDICT or a.feedback is None or a.valid is False or a.source.source_type != "HUMAN":
                continue
            found.append(
                Verdict(
                    trace_id=info.trace_id,
                    interaction_id=info.tags.get(INTERACTION_TAG, ""),
                    sample_id=info.tags.get(SAMPLE_TAG, ""),
                    rater=(a.source.source_id or "").strip(),
                    value=a.feedback.value,
                    labeled_at=datetime.fromtimestamp((a.last_update_time_ms or a.create_time_ms) / 1000, UTC),
                    note=a.rationale or None,
                )
            )
    return sorted(found, key=lambda v: (v.labeled_at, v.trace_id))


def import_from_mlflow(week: str, ui_rater: str | None = None) -> MlflowImport:
    """Store the reviewers' `task_success` verdicts on the review traces of the week holding `week`;
    `ui_rater` names the reviewer of the verdicts the MLflow UI recorded as `User` (else refused)."""
    key = week_key(week)
    home = environment.home().ensure()
    _tracking_config, uri = _tracking(home)
    client = mlflow_client(uri)
    with mlflow_step(uri, "read the review traces"):
        experiment = client.get_experiment_by_name(REVIEW_EXPERIMENT)
        if experiment is None:
            raise CliError(
                f"no experiment {REVIEW_EXPERIMENT!r} at {uri}: run `retrain review export --to mlflow` first"
            )
        traces = _review_traces(client, experiment.experiment_id, key)
    if not traces:
        raise CliError(
            f"week {key} has no review traces in {REVIEW_EXPERIMENT!r}: run `retrain review export --to mlflow`"
        )
    verdicts = verdicts_of(traces)
    result = MlflowImport(key, experiment.experiment_id, len(traces), len(verdicts))
    result.unnamed = sorted(v.trace_id for v in verdicts if not v.rater)
    if ui_rater is None:
        result.placeholder = sorted(v.trace_id for v in verdicts if v.rater == UI_PLACEHOLDER)
    # (rater, OS account, sample): a source id is its own account; the UI's placeholder verdicts
    # are the named reviewer's, vouched for by the account running the import (None: this one).
    by_rater: dict[tuple[str, str | None, str], list[Verdict]] = {}
    for v in verdicts:
        if v.rater == UI_PLACEHOLDER:
            if ui_rater is not None:
                by_rater.setdefault((ui_rater, None, v.sample_id), []).append(v)
        elif v.rater:
            by_rater.setdefault((v.rater, f"mlflow:{v.rater}", v.sample_id), []).append(v)
    touched: set[str] = set()
    try:
        with open_store(home.duckdb_path) as con:
            for (rater, os_user, sample_id), mine in sorted(by_rater.items(), key=lambda item: str(item[0])):
                rows = [
                    {
                        "interaction_id": v.interaction_id,
                        "task_success": v.value,
                        "labeled_at": v.labeled_at.isoformat(),
                        "note": v.note,
                        "sample_id": sample_id,
                    }
                    for v in mine
                ]
                source = f"mlflow experiment {REVIEW_EXPERIMENT} ({experiment.experiment_id}), week {key}"
                try:
                    summary = import_label_rows(
                        con, rows, sample_id=sample_id, rater=rater, source=source, os_user=os_user
                    )
                except LabelFileError as err:
                    # Rows are numbered in the order given: name the trace each one came from.
                    result.refused[rater] = [
                        LineProblem(p.line_no, p.rule, f"{p.detail} (trace {mine[p.line_no - 1].trace_id})")
                        for p in err.problems
                    ]
                    continue
                except ValueError as err:  # a source id that is no rater's name
                    result.refused[rater] = [LineProblem(0, "bad_rater", str(err))]
                    continue
                result.imported.append(summary)
                touched.update(v.interaction_id for v in mine)
            result.disagreements = disagreements(labels_for(con, sorted(touched))) if touched else []
    except StoreLockedError as err:
        raise CliError(str(err), code=1) from err
    return result


def cmd_export(args: argparse.Namespace) -> int:
    """`retrain review export --to mlflow`."""
    if args.out is not None:
        raise CliError("--out is the JSONL file of --to file; --to mlflow logs traces instead")
    try:
        summary = export_to_mlflow(args.week, n=args.n, seed=args.seed, domain=args.domain)
    except RegistryError as err:
        raise CliError(str(err), code=1) from err
    print(json.dumps(summary, indent=2, sort_keys=True))
    print(
        f"week {summary['week']}: {summary['logged']} traces logged ({summary['already_logged']} already there) "
        f"in experiment {summary['experiment']!r} (id {summary['experiment_id']}): {summary['url']}"
    )
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    """`retrain review import --from-mlflow --week W`."""
    if args.file is not None:
        raise CliError("--from-mlflow reads the verdicts from the traces' feedback: give no FILE")
    if not args.week:
        raise CliError("--from-mlflow needs --week")
    try:
        result = import_from_mlflow(args.week, ui_rater=args.by)
    except RegistryError as err:
        raise CliError(str(err), code=1) from err
    counts = result.to_dict()
    if args.json:
        print(json.dumps(counts, indent=2, sort_keys=True))
    else:
        print(
            f"week {counts['week']}: {counts['verdicts']} task_success verdicts on {counts['traces']} review traces: "
            f"stored {counts['stored']}, already stored {counts['already_stored']}; raters disagree on "
            f"{len(counts['disagreements'])}"
        )
        for rater, tally in sorted(counts["raters"].items()):
            print(f"  {rater}: {tally['labels']} labels, {tally['stored']} new")
        for item in counts["disagreements"]:
            verdicts = ", ".join(f"{rater}={value}" for rater, value in sorted(item["labels"].items()))
            print(f"  disagreement {item['interaction_id']}: {verdicts}")
        for rater, problems in sorted(counts["refused"].items()):
            print(f"  refused, nothing stored for {rater!r}:")
            for p in problems:
                print(f"    {p['rule']}: {p['detail']}")
        for trace_id in counts["unnamed_verdicts"]:
            print(f"  refused: trace {trace_id}: a task_success verdict with no source id (the reviewer's name)")
        for trace_id in counts["ui_placeholder_verdicts"]:
            print(
                f"  refused: ui_placeholder_rater: trace {trace_id}: the MLflow UI recorded this verdict as "
                f"{UI_PLACEHOLDER!r}, which names nobody; import it with --by NAME (its reviewer)"
            )
    if counts["refused"] or counts["unnamed_verdicts"] or counts["ui_placeholder_verdicts"]:
        return 2
    return 0
