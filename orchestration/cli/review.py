"""`retrain review export` and `retrain review import`: the weekly human review queue.

Export writes a stratified random sample of a week's interactions (`dataplane.review_sample`), one
JSON object a line, each with what a reviewer needs to judge it: a readable transcript, the
outcome, the proxy reward and its terms (`evaluation.replay`), the primary failure mode
(`evaluation.failure_modes`), and `task_success: null` to fill. The sample is recorded in DuckDB
`review_samples` and its id written on every line. Import stores the filled file in the `labels`
table by the rules of `dataplane.labels`: only the sample's interactions, under the name given and
the OS account running the import. The file format is in docs/REVIEW.md.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from assets.partitions import WeekError, week_end, week_key
from dataplane.labels import EXPORT_FIELDS, ImportSummary, LabelFileError, check_os_user, current_os_user, import_labels
from dataplane.review_sample import ReviewSample, record_sample, stratified_sample, week_population
from dataplane.settings import setting
from dataplane.store import StoreLockedError, load_records, open_store
from domains.registry import DEFAULT_DOMAIN
from evaluation.failure_modes import primary_failure_mode
from evaluation.replay import ReplayError, judge_record
from orchestration import environment
from orchestration.cli.errors import CliError
from orchestration.cli.options import settings_options
from training.rewards import GoldError
from training.sandbox.episode import MESSAGE_TOOL


@dataclass(frozen=True)
class SampleSettings:
    """The weekly review sample (`retrain review export`'s options are generated from these fields)."""

    n: int = setting(200, "sample size")
    seed: int = setting(0, "sampling seed; the same seed gives the same sample")


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def transcript(messages: list[Mapping[str, Any]]) -> list[str]:
    """The conversation as lines a person reads: who spoke, what the agent called, what came back.

    The system prompt is left out (it is the same in every conversation). A message sent with the
    customer-message tool is the agent speaking and its tool result is the customer's answer, so
    both read as speech rather than as tool traffic.
    """
    lines: list[str] = []
    for message in messages:
        role, content = message.get("role"), _text(message.get("content") or "")
        if role == "user":
            lines.append(f"customer: {content}")
        elif role == "assistant":
            if content.strip():
                lines.append(f"agent: {content}")
            for call in message.get("tool_calls") or ():
                arguments = call.get("arguments") or {}
                if call.get("name") == MESSAGE_TOOL and isinstance(arguments, Mapping):
                    lines.append(f"agent: {arguments.get('message', '')}")
                else:
                    lines.append(f"agent calls {call.get('name')}({_text(arguments)})")
        elif role == "tool":
            speaker = "customer" if message.get("name") == MESSAGE_TOOL else f"tool {message.get('name')}"
            lines.append(f"{speaker}: {content}")
    return lines


def _judged(record: Mapping[str, Any], weights: Any) -> dict[str, Any]:
    """Proxy reward, its terms, verified success and failure mode of a recorded conversation.

    A record that cannot be replayed still goes to the reviewer (a person can judge what a replay
    cannot), with `replay_error` saying why the numbers are missing.
    """
    try:
        judged = judge_record(record, weights)
    except (ReplayError, GoldError) as err:
        return {"replay_error": f"{type(err).__name__}: {err}"}
    return {
        "proxy_reward": round(judged.reward, 6),
        "reward_terms": {name: round(value, 6) + 0.0 for name, value in judged.reward_terms.items()},  # no -0.0
        "verified_success": judged.success,
        "failure_mode": None if judged.trial is None else primary_failure_mode(judged.trial),
    }


def review_line(
    record: Mapping[str, Any], week: str, weights: Any = None, sample_id: str | None = None
) -> dict[str, Any]:
    """One line of the review file (fields: `dataplane.labels.EXPORT_FIELDS`) of the recorded
    review sample `sample_id`."""
    scenario = record.get("user_scenario") or {}
    line = dict.fromkeys(EXPORT_FIELDS)
    line.update(
        sample_id=sample_id,
        interaction_id=record["interaction_id"],
        week=week,
        started_at=record.get("started_at"),
        policy_version=record.get("policy_version"),
        intent=record.get("intent"),
        outcome=record.get("outcome"),
        persona=scenario.get("persona"),
        instruction=scenario.get("instruction"),
        transcript=transcript(record.get("messages") or []),
        **_judged(record, weights),
    )
    return line


@dataclass(frozen=True)
class DrawnSample:
    """A week's review sample as every export draws it: the week's key, how many interactions the
    week holds, the sampled records (in the sample's order) and the sample as recorded."""

    week: str
    population: int
    records: list[dict[str, Any]]
    sample: ReviewSample

    def strata(self) -> dict[str, int]:
        """How many records of each `outcome/intent` the sample holds."""
        found: dict[str, int] = {}
        for record in self.records:
            name = f"{record.get('outcome')}/{record.get('intent')}"
            found[name] = found.get(name, 0) + 1
        return dict(sorted(found.items()))


def draw_review_sample(
    week: str, n: int = SampleSettings.n, seed: int = SampleSettings.seed, domain: str = DEFAULT_DOMAIN
) -> DrawnSample:
    """The stratified, seeded sample of `domain`'s week holding `week`, recorded in `review_samples`
    (exported by this OS account): the JSONL file and the MLflow traces are drawn here alike."""
    if n < 1:
        raise CliError(f"--n must be >= 1, got {n}")
    key = week_key(week)
    end = week_end(key)
    start = datetime.combine(date.fromisoformat(key), datetime.min.time(), tzinfo=UTC)
    try:
        exported_by = check_os_user(current_os_user())
    except ValueError as err:
        raise CliError(str(err)) from err
    home = environment.home().ensure()
    # A writer: the sample is recorded before the file exists, so an import can always find it.
    with open_store(home.duckdb_path) as con:
        population = week_population(con, start, end, domain)
        ids = stratified_sample(population, n, seed)
        if not ids:
            raise CliError(
                f"week {key} has no stored {domain} interactions (ended {start.date()} .. {end.date()} exclusive)"
            )
        records = load_records(con, ids)
        sample = record_sample(con, key, ids, exported_by)
    return DrawnSample(key, len(population), records, sample)


def export_review(
    week: str,
    out: str | os.PathLike,
    n: int = SampleSettings.n,
    seed: int = SampleSettings.seed,
    force: bool = False,
    domain: str = DEFAULT_DOMAIN,
) -> dict[str, Any]:
    """Write the review sample of the week holding `week` to `out`, recording it (its id on every
    line, in `review_samples`, exported by this OS account); returns a summary.

    Refuses to overwrite an existing file unless `force`: it may be one a reviewer is filling in.
    """
    target = Path(out)
    if target.exists() and not force:
        raise CliError(f"{target} exists (it may hold labels); pass --force to overwrite it")
    drawn = draw_review_sample(week, n, seed, domain)
    key, sample = drawn.week, drawn.sample
    lines = [review_line(record, key, None, sample.sample_id) for record in drawn.records]
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    partial.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines), encoding="utf-8")
    partial.replace(target)  # a reader never sees half a file
    return {
        "week": key,
        "domain": domain,
        "sample_id": sample.sample_id,
        "out": str(target),
        "population": drawn.population,
        "sampled": len(lines),
        "seed": seed,
        "replay_errors": sum(line["replay_error"] is not None for line in lines),
        "strata": drawn.strata(),
    }


def import_review(path: str | os.PathLike, rater: str) -> ImportSummary:
    """Store a filled review file's labels by `rater` (all or nothing), recorded with this process's
    OS account."""
    if not Path(path).is_file():
        raise CliError(f"{path}: no such file")
    home = environment.home().ensure()
    try:
        with open_store(home.duckdb_path) as con:
            return import_labels(con, path, rater)
    except StoreLockedError as err:
        raise CliError(str(err), code=1) from err


def _cmd_export(args: argparse.Namespace) -> int:
    if args.to == "mlflow":
        from orchestration.cli import review_mlflow  # it builds on this module

        return _week_errors(review_mlflow.cmd_export, args)
    if args.out is None:
        raise CliError("--out is required with --to file (the JSONL file to write)")
    try:
        summary = export_review(args.week, args.out, n=args.n, seed=args.seed, force=args.force, domain=args.domain)
    except WeekError as err:
        raise CliError(str(err)) from err
    except StoreLockedError as err:
        raise CliError(str(err), code=1) from err
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


def _week_errors(command: Any, args: argparse.Namespace) -> int:
    """`command(args)` with a bad week or a locked store said as a user error."""
    try:
        return command(args)
    except WeekError as err:
        raise CliError(str(err)) from err
    except StoreLockedError as err:
        raise CliError(str(err), code=1) from err


def _cmd_import(args: argparse.Namespace) -> int:
    if args.from_mlflow:
        from orchestration.cli import review_mlflow  # it builds on this module

        return _week_errors(review_mlflow.cmd_import, args)
    if args.file is None or args.by is None or args.week is not None:
        raise CliError("give FILE and --by (or --from-mlflow --week W to read the verdicts from MLflow)")
    try:
        summary = import_review(args.file, args.by)
    except LabelFileError as err:
        if args.json:
            problems = [{"line": p.line_no, "rule": p.rule, "detail": p.detail} for p in err.problems]
            print(json.dumps({"file": err.path, "refused": True, "stored": 0, "problems": problems}, indent=2))
        raise CliError(str(err)) from err
    except ValueError as err:  # a bad --by
        raise CliError(str(err)) from err
    counts = summary.to_dict()
    if args.json:
        print(json.dumps({**counts, "refused": False}, indent=2, sort_keys=True))
        return 0
    print(
        f"{counts['file']}: {counts['labels']} labels by {counts['rater']} (OS account {counts['os_user']}, "
        f"review sample {counts['sample_id']}): stored {counts['inserted']}, already stored {counts['unchanged']}; "
        f"raters disagree on {len(counts['disagreements'])}"
    )
    for item in counts["disagreements"]:
        verdicts = ", ".join(f"{rater}={value}" for rater, value in sorted(item["labels"].items()))
        print(f"  disagreement {item['interaction_id']}: {verdicts}")
    return 0


def add_review_parser(sub: Any) -> None:
    """Register `review export` and `review import` on the `retrain` subparsers."""
    review = sub.add_parser("review", help="the weekly human review queue: export a sample, import labels")
    commands = review.add_subparsers(dest="review_command", required=True)
    p = commands.add_parser(
        "export",
        help="write a review sample of a week's interactions, one JSON object a line",
        description=(
            "A seeded random sample of the interactions that ended in the week, stratified by outcome and "
            "intent (every (outcome, intent) pair is represented when --n allows, the rest in proportion). "
            "Each line holds a readable transcript, the outcome, the proxy reward and its terms, the failure "
            "mode, and task_success: null for the reviewer to fill (see docs/REVIEW.md). The sample is recorded "
            "in the store and its id written on every line: an import accepts only the sample's interactions."
        ),
    )
    p.add_argument("--week", required=True, help="any date in the week (YYYY-MM-DD); weeks start on Monday")
    settings_options(p, SampleSettings)
    p.add_argument("--out", help="the JSONL file to write (with --to file)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    p.add_argument("--domain", default=DEFAULT_DOMAIN, help=f"whose interactions to sample (default {DEFAULT_DOMAIN})")
    p.add_argument(
        "--to",
        choices=("file", "mlflow"),
        default="file",
        help="file: a JSONL file (--out); mlflow: one trace per interaction in the MLflow experiment "
        "'weekly-review', to label in the browser (docs/REVIEW.md)",
    )
    p.set_defaults(func=_cmd_export)
    p = commands.add_parser(
        "import",
        help="store a filled review file's labels in the labels table",
        description=(
            "All or nothing: a file with any bad line (bad JSON, task_success not true/false, an unknown "
            "interaction id, one the file's review sample did not draw, a changed label, ...) is refused whole, "
            "every bad line named by number, and nothing is stored. Importing the same file again changes "
            "nothing; a second rater's labels are kept beside the first and disagreements are reported. The "
            "OS account running the import is stored with --by: two names typed from one account are one rater."
        ),
    )
    p.add_argument("file", nargs="?", help="the filled JSONL file")
    p.add_argument(
        "--from-mlflow",
        action="store_true",
        help="read the task_success feedback reviewers gave the week's review traces in MLflow (the rater is "
        "each feedback's source id) instead of a file",
    )
    p.add_argument("--week", help="with --from-mlflow: any date in the week whose review traces to read")
    p.add_argument(
        "--by",
        help="the reviewer's name, stored as the rater (1-64 letters, digits, space, _.@+-; never a number the PII "
        "scrub masks); with --from-mlflow: the reviewer of the verdicts MLflow's trace view recorded as 'User'",
    )
    p.add_argument("--json", action="store_true", help="print a machine-readable summary")
    p.set_defaults(func=_cmd_import)
