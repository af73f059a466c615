"""Human review labels: the label file's rules and the `labels` table (schema in dataplane/store.py).

A reviewer fills `task_success` in an exported sample (`dataplane/review_sample.py`, one JSON
object a line) and imports it under their name. The import is all or nothing: every line is
checked first, against the file and against the store, and a file with any bad line is refused
whole, naming every bad line by number, so a half-imported file never has to be untangled. A label
is one row per (interaction, rater): importing the same file again finds every label already
stored and changes nothing, and a second rater's label sits beside the first. A record's own
`human_label` is a label by its rater too; `labels_for` reads both sources as one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from dataplane.contract import FUTURE_TOLERANCE, ContractError, parse_timestamp
from dataplane.review_sample import week_population
from dataplane.scrub import scrub_text
from dataplane.store import load_records

# What an exported review line holds; an import accepts these keys (plus `labeled_at`) and no
# other, so a misspelt `task_succes` is refused instead of leaving the line unlabelled.
EXPORT_FIELDS = (
    "interaction_id",
    "week",
    "started_at",
    "policy_version",
    "intent",
    "outcome",
    "persona",
    "instruction",
    "transcript",
    "proxy_reward",
    "reward_terms",
    "verified_success",
    "failure_mode",
    "replay_error",
    "task_success",
    "note",
)
IMPORT_FIELDS = frozenset(EXPORT_FIELDS) | {"labeled_at"}
RATER_RE = re.compile(r"[A-Za-z0-9_.@+-][A-Za-z0-9_.@+ -]{0,63}")
MAX_NOTE_CHARS = 2_000


@dataclass(frozen=True)
class Label:
    """One rater's verdict on one interaction; `source` is `review` (the table) or `record`."""

    interaction_id: str
    rater: str
    task_success: bool
    labeled_at: datetime
    note: str | None = None
    source: str = "review"


@dataclass(frozen=True)
class LineProblem:
    """Why one line of a label file was refused: its 1-based number, the rule and the detail."""

    line_no: int
    rule: str
    detail: str

    def __str__(self) -> str:
        return f"line {self.line_no}: {self.rule}: {self.detail}"


class LabelFileError(ValueError):
    """A label file refused whole; `.problems` lists every bad line, and nothing was stored."""

    def __init__(self, path: str, problems: list[LineProblem]) -> None:
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{path}: refused, nothing stored: {len(problems)} bad line(s)\n{lines}")
        self.path = path
        self.problems = problems


@dataclass
class ImportSummary:
    """What an import did: labels stored, labels already there, and where raters disagree."""

    file: str
    rater: str
    labels: int
    inserted: int
    unchanged: int
    positives: int
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_rater(rater: Any) -> str:
    """The rater's name, trimmed; a name that is empty, too long or odd raises ValueError."""
    name = str(rater).strip() if isinstance(rater, str) else ""
    if not RATER_RE.fullmatch(name):
        raise ValueError(f"rater {rater!r} must be 1-64 of letters, digits, space and _.@+-")
    return name


def _line_label(obj: Any, rater: str, now: datetime) -> tuple[Label | None, list[tuple[str, str]]]:
    """The label one parsed line gives, or the (rule, detail) pairs it breaks."""
    if not isinstance(obj, dict):
        return None, [("not_an_object", f"a line must be a JSON object, got {type(obj).__name__}")]
    broken: list[tuple[str, str]] = []
    unknown = sorted(set(obj) - IMPORT_FIELDS)
    if unknown:
        broken.append(("unknown_field", f"unknown field(s) {unknown}"))
    rid = obj.get("interaction_id")
    if not isinstance(rid, str) or not rid:
        broken.append(("bad_interaction_id", f"interaction_id must be a non-empty string, got {rid!r}"))
    if "task_success" not in obj:
        broken.append(("missing_field", "task_success is missing"))
    elif obj["task_success"] is None:
        broken.append(("not_labelled", "task_success is still null: label it true or false, or delete the line"))
    elif not isinstance(obj["task_success"], bool):
        broken.append(("wrong_type", f"task_success must be true or false, got {obj['task_success']!r}"))
    note = obj.get("note")
    if note is not None and not isinstance(note, str):
        broken.append(("wrong_type", f"note must be text or null, got {type(note).__name__}"))
    elif isinstance(note, str) and len(note) > MAX_NOTE_CHARS:
        broken.append(("note_too_long", f"note has {len(note)} characters, at most {MAX_NOTE_CHARS}"))
    labeled_at = now
    if obj.get("labeled_at") is not None:
        try:
            labeled_at = parse_timestamp(obj["labeled_at"], "labeled_at")
        except ContractError as err:
            broken.append((err.rule, err.detail))
        else:
            if labeled_at > now + FUTURE_TOLERANCE:
                broken.append(("future_timestamp", f"labeled_at {obj['labeled_at']} is in the future"))
    if broken:
        return None, broken
    # Notes are free text typed by a person: masked like every other stored text.
    clean_note = scrub_text(note) if isinstance(note, str) and note.strip() else None
    return Label(rid, rater, obj["task_success"], labeled_at, clean_note), []


def read_label_file(path: str | Path, rater: str, now: datetime) -> tuple[list[tuple[int, Label]], list[LineProblem]]:
    """Every label of the file with its line number, and every problem found without the store.

    Blank lines are skipped (line numbers still count them, as an editor does). Raises
    FileNotFoundError for a missing file.
    """
    labels: list[tuple[int, Label]] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    with open(path, "rb") as handle:
        for line_no, raw in enumerate(handle, start=1):
            try:
                text = raw.decode("utf-8").strip()
            except UnicodeDecodeError as err:
                problems.append(LineProblem(line_no, "invalid_utf8", str(err)))
                continue
            if not text:
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as err:
                problems.append(LineProblem(line_no, "invalid_json", f"{err.msg} at column {err.colno}"))
                continue
            label, broken = _line_label(obj, rater, now)
            problems += [LineProblem(line_no, rule, detail) for rule, detail in broken]
            if label is None:
                continue
            if label.interaction_id in first_line:
                problems.append(
                    LineProblem(
                        line_no,
                        "duplicate_in_file",
                        f"{label.interaction_id!r} is labelled on line {first_line[label.interaction_id]} already",
                    )
                )
                continue
            first_line[label.interaction_id] = line_no
            labels.append((line_no, label))
    return labels, problems


# Two fixed statements (SQL is never assembled at run time): with the review table, and without it
# (a read-only reader of a store that predates the table).
_ALL_LABELS = """SELECT * FROM (
    SELECT interaction_id, rater, task_success, labeled_at, note, 'review' AS source FROM labels
    WHERE ($ids IS NULL OR interaction_id IN (SELECT unnest($ids)))
    UNION ALL
    SELECT interaction_id, record->'human_label'->>'rater' AS rater, human_task_success AS task_success,
           CAST(record->'human_label'->>'labeled_at' AS TIMESTAMPTZ) AS labeled_at, NULL AS note,
           'record' AS source FROM interactions
    WHERE human_task_success IS NOT NULL AND ($ids IS NULL OR interaction_id IN (SELECT unnest($ids)))
) WHERE ($since IS NULL OR labeled_at >= $since) AND ($before IS NULL OR labeled_at < $before)
    ORDER BY interaction_id, labeled_at, rater"""
_RECORD_LABELS_ONLY = """SELECT * FROM (
    SELECT interaction_id, record->'human_label'->>'rater' AS rater, human_task_success AS task_success,
           CAST(record->'human_label'->>'labeled_at' AS TIMESTAMPTZ) AS labeled_at, NULL AS note,
           'record' AS source FROM interactions
    WHERE human_task_success IS NOT NULL AND ($ids IS NULL OR interaction_id IN (SELECT unnest($ids)))
) WHERE ($since IS NULL OR labeled_at >= $since) AND ($before IS NULL OR labeled_at < $before)
    ORDER BY interaction_id, labeled_at, rater"""


def labels_for(
    con: duckdb.DuckDBPyConnection,
    ids: Iterable[str] | None = None,
    labeled_since: datetime | None = None,
    labeled_before: datetime | None = None,
) -> dict[str, list[Label]]:
    """Every label of `ids` (None: of every interaction), reviews and records' own `human_label`
    alike, optionally only those labelled in [labeled_since, labeled_before); sorted by time."""
    wanted = None if ids is None else list(ids)
    # A store created before the labels table existed gets it from its next writer; until then a
    # read-only reader finds the records' own labels only.
    has_table = con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'labels'").fetchone()[0] > 0
    query = _ALL_LABELS if has_table else _RECORD_LABELS_ONLY
    rows = con.execute(query, {"ids": wanted, "since": labeled_since, "before": labeled_before}).fetchall()
    found: dict[str, list[Label]] = {}
    for rid, rater, success, at, note, source in rows:
        found.setdefault(rid, []).append(Label(rid, rater, bool(success), at.astimezone(UTC), note, source))
    return found


def agreed_task_success(labels: Iterable[Label]) -> bool | None:
    """The raters' common verdict, or None when they disagree (or there is no label)."""
    verdicts = {label.task_success for label in labels}
    return verdicts.pop() if len(verdicts) == 1 else None


def week_labels(con: duckdb.DuckDBPyConnection, start: datetime, end: datetime) -> dict[str, list[Label]]:
    """Every label (reviews and records' own alike) of the interactions that ended in [start, end).

    Chosen by when the interaction was served, not when it was labelled: this is the population
    `retrain review export --week` samples, so a week's review file lands in that week's labels
    whenever it is imported.
    """
    ids = [rid for rid, _outcome, _intent in week_population(con, start, end)]
    return labels_for(con, ids) if ids else {}


@dataclass(frozen=True)
class LabelTally:
    """What a set of labels says: `agreed` holds each interaction whose raters agree (its verdict),
    `disagreements` the others with every rater's verdict; `labels` counts label rows."""

    labels: int
    raters: tuple[str, ...]
    agreed: dict[str, bool]
    disagreements: list[dict[str, Any]]

    def counts(self) -> dict[str, int]:
        return {
            "labels": self.labels,
            "labelled_interactions": len(self.agreed) + len(self.disagreements),
            "raters": len(self.raters),
            "agreed": len(self.agreed),
            "disagreements": len(self.disagreements),
        }


def tally(by_id: dict[str, list[Label]]) -> LabelTally:
    """The labels of `labels_for` / `week_labels` reduced to verdicts and disagreements."""
    agreed = {rid: verdict for rid, labels in by_id.items() if (verdict := agreed_task_success(labels)) is not None}
    return LabelTally(
        labels=sum(len(labels) for labels in by_id.values()),
        raters=tuple(sorted({label.rater for labels in by_id.values() for label in labels})),
        agreed=dict(sorted(agreed.items())),
        disagreements=disagreements(by_id),
    )


def disagreements(by_id: dict[str, list[Label]]) -> list[dict[str, Any]]:
    """Interactions whose raters disagree, each with every rater's verdict."""
    return [
        {"interaction_id": rid, "labels": {label.rater: label.task_success for label in labels}}
        for rid, labels in sorted(by_id.items())
        if agreed_task_success(labels) is None and labels
    ]


def records_with_verdicts(con: duckdb.DuckDBPyConnection, verdicts: dict[str, bool]) -> list[dict[str, Any]]:
    """The stored records of `verdicts`' interactions (in id order), each with `human_label.task_success`
    set to the raters' agreed verdict; the rest of a record's own label is kept."""
    ids = sorted(verdicts)
    records = load_records(con, ids)
    return [
        {**r, "human_label": {**(r.get("human_label") or {}), "task_success": verdicts[rid]}}
        for rid, r in zip(ids, records)
    ]


def _store_problems(
    con: duckdb.DuckDBPyConnection, labels: list[tuple[int, Label]]
) -> tuple[list[LineProblem], list[Label]]:
    """Lines naming an unknown interaction or changing a stored label; and the labels that are new."""
    ids = [label.interaction_id for _, label in labels]
    known = {
        row[0]
        for row in con.execute(
            "SELECT interaction_id FROM interactions WHERE interaction_id IN (SELECT unnest(?))", [ids]
        ).fetchall()
    }
    stored = labels_for(con, ids)
    problems: list[LineProblem] = []
    new: list[Label] = []
    for line_no, label in labels:
        if label.interaction_id not in known:
            problems.append(
                LineProblem(line_no, "unknown_interaction", f"{label.interaction_id!r} is not in the store")
            )
            continue
        mine = next((s for s in stored.get(label.interaction_id, []) if s.rater == label.rater), None)
        if mine is None:
            new.append(label)
            continue
        # A record's own human_label has no note: its verdict alone is what a re-import must match.
        same = mine.task_success == label.task_success and (mine.source == "record" or mine.note == label.note)
        if not same:
            problems.append(
                LineProblem(
                    line_no,
                    "label_conflict",
                    f"{label.rater!r} already labelled {label.interaction_id!r} task_success={mine.task_success} "
                    f"note={mine.note!r} ({mine.source}); a stored label is never changed",
                )
            )
    return problems, new


def import_labels(
    con: duckdb.DuckDBPyConnection, path: str | Path, rater: str, now: datetime | None = None
) -> ImportSummary:
    """Store the labels of `path` by `rater`, all or none; raises LabelFileError naming every bad line."""
    rater = check_rater(rater)
    now = now or datetime.now(UTC)
    labels, problems = read_label_file(path, rater, now)
    # The checks against the store and the insert share one transaction: what was checked is
    # what is written to.
    con.begin()
    try:
        store_problems, new = _store_problems(con, labels)
        problems = sorted(problems + store_problems, key=lambda p: p.line_no)
        if problems:
            raise LabelFileError(str(path), problems)
        source = str(Path(path).resolve())
        rows = [(x.interaction_id, x.rater, x.task_success, x.labeled_at, x.note, source, now) for x in new]
        if rows:
            con.executemany("INSERT INTO labels VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return ImportSummary(
        file=str(path),
        rater=rater,
        labels=len(labels),
        inserted=len(new),
        unchanged=len(labels) - len(new),
        positives=sum(label.task_success for _, label in labels),
        disagreements=disagreements(labels_for(con, [label.interaction_id for _, label in labels])),
    )
