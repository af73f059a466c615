"""`retrain`: the command-line door to the pipeline.

Each subcommand is a thin call into a plain function; errors print one clear line on stderr and
exit non-zero (2 for bad input such as a missing path or a malformed week, 1 for a failed run).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence

from assets.decisions import DecisionRecordError
from assets.partitions import WeekError
from dataplane.domain_rules import DEFAULT_DOMAIN, domain_listing
from dataplane.ingest import InputPathError, ingest_paths
from dataplane.ingest_settings import IngestSettings
from dataplane.readers import FORMATS
from dataplane.record_schema import record_schema_text
from domains.registry import DomainNotFoundError, load_domain
from evaluation.gate_floors import GateFloorsFileError, LoosenedGateError
from evaluation.gates import ApprovalError
from monitoring.pause import PauseStateError, ResumeError
from orchestration import environment
from orchestration.cli.calibration import add_calibration_parser
from orchestration.cli.demo import DemoSettings, run_demo, serving_policy
from orchestration.cli.errors import CliError
from orchestration.cli.options import domain_option, settings_options, settings_values
from orchestration.cli.review import add_review_parser
from orchestration.config_show import add_config_parser
from orchestration.run_config import RunConfigFileError
from orchestration.runner import (
    NoDecisionError,
    RetrainBusyError,
    approve_week,
    canary_state,
    contain_champion,
    resume_watch,
    rollback_champion,
    run_week,
)
from tracking.containment import ContainmentRecordError
from tracking.registry import ModelDirError, RegistryError
from training.curriculum import DEFAULT_TOOL_LIST, TOOL_LISTS
from training.sandbox.containment import CONTAINMENT_MODES, ContainmentError
from training.traffic.simulate import simulate
from training.traffic.tasks_import import import_tasks


def _cmd_ingest(args: argparse.Namespace) -> int:
    home = environment.home().ensure()
    try:
        settings = IngestSettings(**settings_values(args, IngestSettings))
    except ValueError as err:  # the settings' own check: a bad option value
        raise CliError(str(err)) from err
    try:
        summary = ingest_paths(str(home.duckdb_path), args.paths, fmt=args.format, settings=settings)
    except InputPathError as err:
        raise CliError(str(err)) from err
    counts = summary.to_dict()
    if args.json:
        print(json.dumps(counts, indent=2, sort_keys=True, default=str))
    else:
        print(
            f"files {counts['files']}  read {counts['read']}  accepted {counts['accepted']}  "
            f"duplicates {counts['duplicates']}  quarantined {counts['quarantined']}"
        )
        for rule, n in sorted(counts.get("quarantined_by_rule", {}).items()):
            print(f"  quarantined {rule}: {n}")
        for item in summary.per_file:
            if item.status == "quarantined":  # a whole file, or a path refused unread: name it
                print(f"  file {item.path}: {', '.join(sorted(item.quarantined_by_rule))}")
        if summary.superseded:
            print(f"  superseded {summary.superseded} quarantine row(s) of earlier reads of files still being written")
    return 0


def _cmd_schema(args: argparse.Namespace) -> int:
    try:
        print(record_schema_text(args.domain), end="")
    except DomainNotFoundError as err:
        raise CliError(str(err)) from err
    return 0


def _cmd_domains(args: argparse.Namespace) -> int:
    listing = domain_listing()
    if args.json:
        print(json.dumps(listing, indent=2, sort_keys=True))
    for row in [] if args.json else listing:
        if "error" in row:
            print(f"{row['name']}: does not load: {row['error']}")
        else:
            print(f"{row['name']}: {row['tools']} tools, {row['intents']} intents, tables {', '.join(row['tables'])}")
    return 1 if any("error" in row for row in listing) else 0


def _cmd_simulate(args: argparse.Namespace) -> int:
    drift = {}
    if args.drift_day is not None:
        drift["action_drift_day"] = args.drift_day
    if args.intent_shift_day is not None:
        drift["intent_mix_from_day"] = args.intent_shift_day
    if args.degrade_day is not None:
        drift["degraded_agent_from_day"] = args.degrade_day
    # Options only some domains' traffic knows are passed only when used, so a domain whose
    # traffic has no such option refuses them by name instead of ignoring them.
    extra = {"drift": drift} if drift else {}
    if args.policy_version:
        extra["policy_version"] = args.policy_version
    if args.seed is not None:
        extra["seed"] = args.seed
    try:
        if args.served_by:
            served = serving_policy(args.served_by, args.domain, args.level, args.tool_list or DEFAULT_TOOL_LIST)
            extra["policy"] = served
            if args.level is not None:
                if load_domain(args.domain).level1 is None:
                    raise CliError(f"domain {args.domain!r} has no level 1 to serve")
                extra["level"] = args.level
            if args.tool_fault_rate is not None:
                extra["tool_fault_rate"] = args.tool_fault_rate
        elif args.level is not None or args.tool_fault_rate is not None or args.tool_list is not None:
            raise CliError(
                "--level, --tool-list and --tool-fault-rate apply to traffic a model serves: pass --served-by"
            )
        summary = simulate(
            domain=args.domain,
            days=args.days,
            per_day=args.per_day,
            out_dir=args.out,
            start=args.start,
            world=args.world,
            **extra,
        )
    except (ValueError, FileNotFoundError) as err:  # ModelLoadError is a ValueError
        raise CliError(str(err)) from err
    print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    return 0


def _cmd_import_tasks(args: argparse.Namespace) -> int:
    try:
        summary = import_tasks(args.file, args.world, args.out, domain=args.domain)
    except (ValueError, FileNotFoundError) as err:
        raise CliError(str(err)) from err
    print(json.dumps(summary, indent=2, sort_keys=True, default=str))
    return 0


def _cmd_run(args: argparse.Namespace) -> int:
    try:
        result = run_week(args.week, config_file=args.config, domain=args.domain)
    except (
        WeekError,
        FileNotFoundError,
        json.JSONDecodeError,
        RunConfigFileError,
        LoosenedGateError,
        GateFloorsFileError,
    ) as err:
        raise CliError(str(err)) from err
    except RetrainBusyError as err:
        raise CliError(str(err), code=1) from err
    print(
        f"week {result.week} ({args.domain}): {'succeeded' if result.success else 'did not complete'} "
        f"(dagster run {result.run_id}); materialized: {', '.join(result.materialized) or 'nothing'}"
    )
    if result.decision is not None:
        print(f"decision: {result.decision.decision} ({result.decision.reason})")
    return 0 if result.success else 1


def _cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(fresh=args.fresh, **settings_values(args, DemoSettings))


def _cmd_approve(args: argparse.Namespace) -> int:
    try:
        print(json.dumps(approve_week(args.week, approver=args.by, domain=args.domain), indent=2, default=str))
    except (WeekError, NoDecisionError, ApprovalError, DecisionRecordError, PauseStateError) as err:
        raise CliError(str(err)) from err
    except (RegistryError, ModelDirError) as err:  # a changed model folder too: nothing registered
        raise CliError(str(err), code=1) from err
    return 0


def _cmd_resume(args: argparse.Namespace) -> int:
    try:
        print(json.dumps(resume_watch(args.by, args.reason), indent=2, default=str))
    except (ResumeError, PauseStateError) as err:
        raise CliError(str(err)) from err
    return 0


def _cmd_contain(args: argparse.Namespace) -> int:
    try:
        print(json.dumps(contain_champion(args.mode, args.by, args.reason, domain=args.domain), indent=2))
    except (ContainmentError, ContainmentRecordError) as err:
        raise CliError(str(err)) from err
    return 0


def _cmd_canary(args: argparse.Namespace) -> int:
    print(json.dumps(canary_state(domain=args.domain), indent=2, default=str))
    return 0


def _cmd_rollback(args: argparse.Namespace) -> int:
    try:
        print(json.dumps(rollback_champion(domain=args.domain), indent=2, default=str))
    except RegistryError as err:  # includes "no previous_champion to roll back to"
        raise CliError(str(err), code=1) from err
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="retrain", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="simulate traffic and run the weekly retrain end to end")
    settings_options(p, DemoSettings)
    p.add_argument("--fresh", action="store_true", help="start from an empty home folder (make demo does)")
    p.set_defaults(func=_cmd_demo)

    p = sub.add_parser("run", help="run the weekly retrain for one week through Dagster")
    p.add_argument("--week", required=True, help="any date in the week (YYYY-MM-DD)")
    p.add_argument("--config", help="YAML or JSON run config (Dagster run_config ops section)")
    domain_option(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("ingest", help="ingest interaction files into DuckDB")
    p.add_argument("paths", nargs="+", help="JSONL / JSONL.gz / Parquet files or folders")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="auto",
        help="native interaction records, or conversations in the OpenAI chat shape (one a line); "
        "auto (default): *.openai.jsonl[.gz] files are OpenAI, the rest native",
    )
    settings_options(p, IngestSettings)
    p.set_defaults(func=_cmd_ingest)

    p = sub.add_parser(
        "schema",
        help="print the interaction record contract as JSON Schema",
        description="Print the interaction record contract (schema_version 1) as JSON Schema, generated "
        "from the pydantic model ingestion validates with and the domain's intents and initial_state model; "
        "docs/record.schema.json holds the retail domain's text.",
    )
    p.add_argument("--domain", default=DEFAULT_DOMAIN, help=f"the domain whose records (default {DEFAULT_DOMAIN})")
    p.set_defaults(func=_cmd_schema)

    p = sub.add_parser("domains", help="list the installed domains: tools, intents, tables")
    p.add_argument("--json", action="store_true", help="print the list as JSON")
    p.set_defaults(func=_cmd_domains)

    p = sub.add_parser("simulate", help="write simulated production traffic, one folder a day")
    p.add_argument("--days", type=int, required=True)
    p.add_argument("--per-day", type=int, required=True)
    p.add_argument("--seed", type=int, help="seeds the traffic (default: the domain's traffic simulator's)")
    p.add_argument("--out", required=True, help="output folder (e.g. $RETRAIN_HOME/landing)")
    p.add_argument("--start", help="first day, YYYY-MM-DD (default: DAYS days before today)")
    p.add_argument(
        "--world", help="a world folder (one <table>.json per table of the domain); default: the generated world"
    )
    p.add_argument(
        "--policy-version",
        help="policy_version to record (default: <domain>-rules/1 for the scripted agent, <domain>-agent/1 with "
        "--served-by)",
    )
    domain_option(p)
    p.add_argument("--drift-day", type=int, help="day index on which (only) the agent over-escalates: action drift")
    p.add_argument("--intent-shift-day", type=int, help="day index from which the intent mix shifts")
    p.add_argument("--degrade-day", type=int, help="day index from which the agent degrades")
    p.add_argument(
        "--served-by",
        metavar="MODEL_DIR",
        help="a model folder (e.g. models/retail-agent-tiny) that serves the traffic, greedy, instead of the "
        "scripted agent: the whole shop (every intent and persona, back-end faults, a simulated person finishing "
        "what the model hands over) unless --level 1",
    )
    p.add_argument(
        "--level",
        type=int,
        choices=[1],
        help="with --served-by: serve the level-1 shop only (order status and cancellations, customers who state "
        "their request, no faults)",
    )
    p.add_argument(
        "--tool-list",
        choices=TOOL_LISTS,
        help="with --served-by: the tools the model is offered, as a curriculum at the served level offers them "
        f"(default {DEFAULT_TOOL_LIST!r}: level 1's list at level 1, every tool on the whole shop; 'level1': "
        "level 1's list on the whole shop too, for an agent built on it)",
    )
    p.add_argument(
        "--tool-fault-rate",
        type=float,
        help="with --served-by: share of back-end calls that fail with a retryable error (default: the served "
        "traffic setting, 0.08; 0 at level 1)",
    )
    p.set_defaults(func=_cmd_simulate)

    p = sub.add_parser("import-tasks", help="turn tau-bench-style tasks into interaction records of a domain")
    p.add_argument("file", help="tasks JSONL in the tau-bench format (task_id, user_id, instruction, actions, outputs)")
    p.add_argument("--world", required=True, help="the world folder the tasks refer to")
    p.add_argument("--out", required=True, help="output folder")
    domain_option(p)
    p.set_defaults(func=_cmd_import_tasks)

    p = sub.add_parser(
        "approve",
        help="after a person reviewed it: register a week's candidate held for tool-call drift",
        description="Register that week's candidate if it was held only for tool-call drift (and, once a person "
        "resumed promotions with `retrain resume`, the live watch's pause), after checking the model folder "
        "still has the digest the decision recorded. Approval never lifts the live watch's pause.",
    )
    p.add_argument("--week", required=True, help="the week whose held candidate to register (any date in it)")
    p.add_argument("--by", default="cli", help="who approves (recorded on the version and the week's run)")
    domain_option(p)
    p.set_defaults(func=_cmd_approve)

    p = sub.add_parser(
        "resume",
        help="after a person read the served traffic: lift the live watch's promotion pause",
        description="Lift the live watch's promotion pause, recording who resumed promotions and why in "
        "the Dagster instance (a promotion_pause event) beside the pause.",
    )
    p.add_argument("--by", required=True, help="who resumes promotions")
    p.add_argument("--reason", required=True, help="why: what the person read and concluded")
    p.set_defaults(func=_cmd_resume)

    p = sub.add_parser(
        "contain",
        help="stop the served agent doing harm while people look: hand every conversation over, or refuse writes",
        description="Set the containment mode of the registered model, recorded in MLflow with who and why: "
        "handoff (every conversation goes to a person), read-only (write tools are refused with a clear "
        "message), off (serve as usual). Every server of the champion obeys it from its next conversation.",
    )
    p.add_argument("--mode", required=True, choices=CONTAINMENT_MODES)
    p.add_argument("--by", required=True, help="who sets the mode")
    p.add_argument("--reason", required=True, help="why: what was seen")
    domain_option(p)
    p.set_defaults(func=_cmd_contain)

    p = sub.add_parser("canary", help="show the champion, the canary serving beside it, and the latest canary decision")
    domain_option(p)
    p.set_defaults(func=_cmd_canary)

    p = sub.add_parser("rollback", help="make previous_champion the champion again")
    domain_option(p)
    p.set_defaults(func=_cmd_rollback)

    add_review_parser(sub)
    add_calibration_parser(sub)
    add_config_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.func
    try:
        return handler(args)
    except CliError as err:
        print(f"retrain {args.command}: error: {err}", file=sys.stderr)
        return err.code
