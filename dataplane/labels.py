"""Human review labels: the label file's rules and the `labels` table (schema in dataplane/store.py).

A reviewer fills `task_success` in an exported sample (`dataplane/review_sample.py`, one JSON
object a line) and imports it under their name. The import is all or nothing: every line is
checked first, against the file and against the store, and a file with any bad line is refused
whole, naming every bad line by number, so a half-imported file never has to be untangled. A label
is one row per (interaction, rater): importing the same file again finds every label already
stored and changes nothing, and a second rater's label sits beside the first. A record's own
`human_label` is a label by its rater too; `labels_for` reads both sources as one.

Provenance: a label answers one recorded review sample (`dataplane.review_sample`), and an import
refuses a label of an interaction its sample did not hold (`not_in_sample`), so nobody labels a
hand-picked set. A label stores the name typed (`--by`, checked and refused when the PII scrub
would mask it) and the OS account that ran the import: names are free to type, so two names
typed from one account are one rater. That account's second verdict on an interaction, under any
name, is held to the same rule as a rater's own: identical is already stored, different is a
`label_conflict` (a stored label is never changed), so one person cannot veto a verdict by
answering again as someone else. The core, `import_label_rows`, takes rows from any source (a
file: `import_labels`).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb

from dataplane.contract import FUTURE_TOLERANCE, ContractError, parse_timestamp
from dataplane.review_sample import review_sample, week_population
from dataplane.scrub import find_pii, scrub_text
from dataplane.store import load_records

# What an exported review line holds; an import accepts these keys (plus `labeled_at`) and no
# other, so a misspelt `task_succes` is refused instead of leaving the line unlabelled.
EXPORT_FIELDS = (
    "sample_id",
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
# A name a person types: letters and digits of any script (after NFC), space and _.@+-, at most
# 64 characters; control and format characters (a right-to-left override, a zero-width space) are
# not letters, so a name reads as it is stored.
MAX_RATER_CHARS = 64
RATER_RE = re.compile(r"[\w.@+-][\w.@+ -]*")
MAX_OS_USER_CHARS = 256
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
    os_user: str | None = None  # the OS account that imported it; None for record labels and old rows


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
    os_user: str
    sample_id: str | None
    labels: int
    inserted: int
    unchanged: int
    positives: int
    disagreements: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_rater(rater: Any) -> str:
    """The rater's name as stored: NFC-normalised and trimmed. Raises ValueError naming the rule for
    a name that is not text (`rater_not_text`), empty (`rater_empty`), over 64 characters
    (`rater_too_long`), of other characters than letters, digits, space and _.@+-
    (`rater_characters`), or holding a number the PII scrub masks (`rater_pii`: a card, phone or
    national id number typed as a name is refused, and no message echoes it).

    An e-mail address is masked as in any stored text: the scrub pseudonymises it (the same address
    always gives the same pseudonym), so the rater is still told apart from the others, while a
    masked number would make every such rater the same `[CARD]`.
    """
    if not isinstance(rater, str):
        raise ValueError(f"rater: rater_not_text: a rater's name is text, got {type(rater).__name__}")
    name = unicodedata.normalize("NFC", rater).strip()
    masked = scrub_text(name)  # what is stored, and all a message may echo
    if not name:
        raise ValueError("rater: rater_empty: name the person giving the labels (--by)")
    if not RATER_RE.fullmatch(name):
        raise ValueError(
            f"rater {masked[:MAX_RATER_CHARS]!r}: rater_characters: use letters, digits, space and _.@+- "
            "(a name starts with no space)"
        )
    numbers = sorted(set(find_pii(name)) - {"email"}) if masked != name else []
    if numbers:
        raise ValueError(
            f"rater {masked[:MAX_RATER_CHARS]!r}: rater_pii: the name holds PII the scrub masks ({', '.join(numbers)}); "
            "it is refused, never stored: give the person's name"
        )
    if len(masked) > MAX_RATER_CHARS:
        raise ValueError(
            f"rater {masked[:20]!r}...: rater_too_long: {len(masked)} characters as stored, at most {MAX_RATER_CHARS}"
        )
    return masked


def current_os_user() -> str:
    """The login name of the OS account running this process (`getpass.getuser()`)."""
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        # No login name in the environment or the password database (a container's bare uid, say):
        # the uid still tells one account from another.
        return f"uid:{os.getuid()}"


def check_os_user(os_user: Any) -> str:
    """An OS account name as stored: masked by the PII scrub like any text (the person cannot pick
    another one, so it is masked rather than refused). Raises ValueError (`os_user_invalid`) for one
    that is not printable text of 1-256 characters."""
    if not isinstance(os_user, str) or not os_user.strip() or len(os_user) > MAX_OS_USER_CHARS:
        raise ValueError(f"os user: os_user_invalid: 1-{MAX_OS_USER_CHARS} characters of text, got {os_user!r}")
    if not os_user.isprintable():
        raise ValueError(f"os user {os_user!r}: os_user_invalid: holds non-printable characters")
    return scrub_text(os_user.strip())


@dataclass(frozen=True)
class Rater:
    """Who gives one import's labels: the checked name (`--by`) and the OS account running it."""

    name: str
    os_user: str

    @classmethod
    def of(cls, name: Any, os_user: str | None = None) -> Rater:
        """The checked identity; `os_user` None: this process's account (`current_os_user`)."""
        return cls(check_rater(name), check_os_user(current_os_user() if os_user is None else os_user))


def _line_label(obj: Any, rater: Rater, now: datetime) -> tuple[Label | None, list[tuple[str, str]]]:
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
    return Label(rid, rater.name, obj["task_success"], labeled_at, clean_note, os_user=rater.os_user), []


def read_label_lines(path: str | Path) -> tuple[list[tuple[int, Any]], list[LineProblem]]:
    """Every line of the file parsed as JSON with its number, and the lines that do not parse.

    Blank lines are skipped (line numbers still count them, as an editor does). Raises
    FileNotFoundError for a missing file.
    """
    rows: list[tuple[int, Any]] = []
    problems: list[LineProblem] = []
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
                rows.append((line_no, json.loads(text)))
            except json.JSONDecodeError as err:
                problems.append(LineProblem(line_no, "invalid_json", f"{err.msg} at column {err.colno}"))
    return rows, problems


def _row_labels(
    rows: Iterable[tuple[int, Any]], rater: Rater, sample_id: str | None, now: datetime
) -> tuple[list[tuple[int, Label]], list[LineProblem]]:
    """Every label of the numbered rows, and every problem found without the store. A row naming a
    sample (`sample_id`) must name `sample_id`, the one the import answers."""
    labels: list[tuple[int, Label]] = []
    problems: list[LineProblem] = []
    first_line: dict[str, int] = {}
    for line_no, obj in rows:
        label, broken = _line_label(obj, rater, now)
        problems += [LineProblem(line_no, rule, detail) for rule, detail in broken]
        named = obj.get("sample_id") if isinstance(obj, dict) else None
        if named not in (None, "") and named != sample_id:  # a missing one is the caller's to name
            problems.append(
                LineProblem(
                    line_no, "sample_mismatch", f"the line is of review sample {named!r}, the import of {sample_id!r}"
                )
            )
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
    SELECT interaction_id, rater, task_success, labeled_at, note, 'review' AS source, os_user FROM labels
    WHERE ($ids IS NULL OR interaction_id IN (SELECT unnest($ids)))
    UNION ALL
    SELECT interaction_id, record->'human_label'->>'rater' AS rater, human_task_success AS task_success,
           CAST(record->'human_label'->>'labeled_at' AS TIMESTAMPTZ) AS labeled_at, NULL AS note,
           'record' AS source, NULL AS os_user FROM interactions
    WHERE human_task_success IS NOT NULL AND ($ids IS NULL OR interaction_id IN (SELECT unnest($ids)))
) WHERE ($since IS NULL OR labeled_at >= $since) AND ($before IS NULL OR labeled_at < $before)
    ORDER BY interaction_id, labeled_at, rater"""
_RECORD_LABELS_ONLY = """SELECT * FROM (
    SELECT interaction_id, record->'human_label'->>'rater' AS rater, human_task_success AS task_success,
           CAST(record->'human_label'->>'labeled_at' AS TIMESTAMPTZ) AS labeled_at, NULL AS note,
           'record' AS source, NULL AS os_user FROM interactions
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
    for rid, rater, success, at, note, source, os_user in rows:
        found.setdefault(rid, []).append(Label(rid, rater, bool(success), at.astimezone(UTC), note, source, os_user))
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


def _same_person(stored: Label, label: Label) -> bool:
    """Whether a stored label is by the person giving `label`: the same name, or the same OS account
    (names are free to type; the account that ran the import is not)."""
    return stored.rater == label.rater or (stored.os_user is not None and stored.os_user == label.os_user)


def _store_problems(
    con: duckdb.DuckDBPyConnection, labels: list[tuple[int, Label]], sample_ids: frozenset[str] | None
) -> tuple[list[LineProblem], list[Label]]:
    """Lines naming an unknown interaction, one outside the sample (`sample_ids`; None: the sample
    is unknown, already reported), or changing a label the same person stored; and the new labels."""
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
        if sample_ids is not None and label.interaction_id not in sample_ids:
            problems.append(
                LineProblem(
                    line_no,
                    "not_in_sample",
                    f"{label.interaction_id!r} was not drawn in this review sample; only interactions an export "
                    "sampled can be labelled (retrain review export)",
                )
            )
            continue
        mine = next((s for s in stored.get(label.interaction_id, []) if _same_person(s, label)), None)
        if mine is None:
            new.append(label)
            continue
        # A record's own human_label has no note: its verdict alone is what a re-import must match.
        same = mine.task_success == label.task_success and (mine.source == "record" or mine.note == label.note)
        if same:
            continue
        who = (
            f"{label.rater!r}"
            if mine.rater == label.rater
            else f"OS account {label.os_user!r} (as {mine.rater!r}; another name typed from one account is the "
            "same rater)"
        )
        problems.append(
            LineProblem(
                line_no,
                "label_conflict",
                f"{who} already labelled {label.interaction_id!r} task_success={mine.task_success} "
                f"note={mine.note!r} ({mine.source}); a stored label is never changed",
            )
        )
    return problems, new


def import_label_rows(
    con: duckdb.DuckDBPyConnection,
    rows: Iterable[Mapping[str, Any]],
    *,
    sample_id: str,
    rater: str,
    source: str,
    os_user: str | None = None,
    now: datetime | None = None,
) -> ImportSummary:
    """Store the labels `rows` give (objects with `interaction_id`, `task_success`, and optionally
    `note`, `labeled_at`, `sample_id`) by `rater`, answering the recorded review sample `sample_id`;
    all or none. `source` names where the rows came from (stored as each label's `source_file`, and
    in errors); rows are numbered from 1 in errors. `os_user` None: this process's OS account.

    Raises ValueError for a bad `rater` or `os_user` and LabelFileError naming every bad row.
    """
    return _import(con, list(enumerate(rows, start=1)), [], sample_id, Rater.of(rater, os_user), source, source, now)


def import_labels(
    con: duckdb.DuckDBPyConnection,
    path: str | Path,
    rater: str,
    now: datetime | None = None,
    os_user: str | None = None,
) -> ImportSummary:
    """Store the labels of the review file `path` by `rater`, all or none; raises LabelFileError
    naming every bad line. Every line must carry the `sample_id` its export wrote (one sample a
    file); `os_user` None: this process's OS account."""
    who = Rater.of(rater, os_user)
    rows, problems = read_label_lines(path)
    named = [(line_no, obj.get("sample_id")) for line_no, obj in rows if isinstance(obj, dict)]
    sample_id = next((sid for _, sid in named if isinstance(sid, str) and sid), None)
    problems += [
        LineProblem(
            line_no,
            "missing_field",
            "sample_id is missing: only the lines of a `retrain review export` file can be imported",
        )
        for line_no, sid in named
        if sid is None or sid == ""
    ]
    return _import(con, rows, problems, sample_id, who, str(path), str(Path(path).resolve()), now)


def _import(
    con: duckdb.DuckDBPyConnection,
    rows: list[tuple[int, Any]],
    problems: list[LineProblem],
    sample_id: str | None,
    rater: Rater,
    name: str,
    source: str,
    now: datetime | None,
) -> ImportSummary:
    """The import of numbered rows; `problems` holds what the caller found already."""
    now = now or datetime.now(UTC)
    labels, row_problems = _row_labels(rows, rater, sample_id, now)
    problems = problems + row_problems
    # The checks against the store and the insert share one transaction: what was checked is
    # what is written to.
    con.begin()
    try:
        sample = None if sample_id is None else review_sample(con, sample_id)
        if sample_id is not None and sample is None and rows:
            problems.append(
                LineProblem(
                    rows[0][0],
                    "unknown_sample",
                    f"review sample {sample_id!r} is not recorded in this store: import a file that "
                    "`retrain review export` wrote from it",
                )
            )
        members = None if sample is None else frozenset(sample.interaction_ids)
        store_problems, new = _store_problems(con, labels, members)
        problems = sorted(problems + store_problems, key=lambda p: p.line_no)
        if problems:
            raise LabelFileError(name, problems)
        values = [
            (x.interaction_id, x.rater, x.task_success, x.labeled_at, x.note, source, now, x.os_user, sample_id)
            for x in new
        ]
        if values:
            con.executemany(
                "INSERT INTO labels (interaction_id, rater, task_success, labeled_at, note, source_file, "
                "imported_at, os_user, sample_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                values,
            )
        con.commit()
    except BaseException:
        con.rollback()
        raise
    return ImportSummary(
        file=name,
        rater=rater.name,
        os_user=rater.os_user,
        sample_id=sample_id,
        labels=len(labels),
        inserted=len(new),
        unchanged=len(labels) - len(new),
        positives=sum(label.task_success for _, label in labels),
        disagreements=disagreements(labels_for(con, [label.interaction_id for _, label in labels])),
    )
