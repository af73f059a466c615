"""`retrain demo`: the whole loop on embedded defaults, on a laptop-class CPU, like the calendar.

Four legacy weeks of the shop's rule-based agent land first. Then each of four weeks is served by
the model that is champion when it starts (the shipped agent, `models/retail-agent-tiny`, before
the first retrain): the first three are each followed by `weekly_retrain` through Dagster (the
first registers the shipped agent as version 1 and gates its GRPO candidate against it, the others
train on top of whatever is champion, or canary, and are gated against it), and the fourth is
judged by the champion-health check. A candidate that passes every gate becomes the `canary`: the weeks after
it are served by the champion and, for `CanarySettings.share` of the conversations, by the canary,
and after each such week the canary check (the health sensor's) promotes it, drops it or waits.
It prints a summary and the commands to open both UIs on that data. The run config below shrinks
every stage to demo size; the asset defaults are the production ones.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

from assets.partitions import week_key
from dataplane.home import PII_KEY_ENV, Home
from dataplane.ingest import ingest_paths
from dataplane.settings import setting
from domains.registry import DEFAULT_DOMAIN
from evaluation.gate_floors import INSTANCE_FLOORS_FILE, write_floors
from evaluation.gates import ApprovalError
from evaluation.reports import EvalSettings
from monitoring.canary import check_canary
from monitoring.health import check_champion
from orchestration import environment
from orchestration.cli.demo_review import DEMO_RATER, review_week
from orchestration.cli.demo_summary import climb_rows, served_rows
from orchestration.cli.errors import CliError
from orchestration.runner import WeekRun, approve_week, mlflow_target, run_week
from tracking.containment import containment_of
from tracking.registry import canary_info, champion_info, find_base_version, find_week_version, local_champion
from training.curriculum import DEFAULT_TOOL_LIST, LEVELS, tools_for_levels
from training.policies import HFPolicy
from training.sandbox.containment import contained
from training.sandbox.pii_gateway import PseudonymisedPolicy
from training.tiny.manifest import shipped_agent_path
from training.traffic.simulate import simulate

DEMO_SEED = 7
# The demo's calendar is fixed: the same weeks, customers and conversations on every run and every
# day, so its outcome is reproducible (greedy serving and evaluation, seeded training); `today`
# moves it.
DEMO_TODAY = date(2026, 12, 1)

# Stage sizes per scale: "demo" for `retrain demo` on a 2-core CPU, "ci" for the end-to-end test
# and the UI screenshots. Sizes only: every threshold (the tool-call probe, the gates) and the reward
# are the product's defaults, and the demo evaluates with the product's rollout settings (12 turns,
# 128 new tokens), the ones the shipped agent's manifest figures were measured with. Calibration:
# up to 120 tasks x 2 trials, one task a customer while the version has that many customers (the
# gate's interval resamples customers: at 60 customers a +0.05 difference, 4 won and 1 lost, kept a
# lower bound of -0.017); shadow: every shadow-split conversation with gold before the week's end.
_SIZES = {
    "demo": {
        "policy_base": {"probe_prompts": 8},
        # 10 steps of 4 customers x 8 rollouts at the product's learning rate. GRPO learns only from
        # a group of rollouts whose rewards differ; with 8 rollouts a customer fewer groups score
        # alike than with the default 4, so few of the 10 steps pass without a gradient, and the 320
        # rollouts in all keep training to about a minute on the demo's 2 CPU cores.
        "grpo_candidate": {
            "max_steps": 10,
            "save_steps": 5,
            "dataset_size": 40,
            "num_generations": 8,
            "per_device_train_batch_size": 32,
        },
        "calibration_report": {"trials": 2, "max_tasks": 120},
        "shadow_report": {},
    },
    "ci": {
        "policy_base": {"probe_prompts": 4},
        "grpo_candidate": {"max_steps": 2, "save_steps": 1, "dataset_size": 8, "max_completion_length": 96},
        "calibration_report": {"trials": 2, "max_tasks": 6, "max_turns": 4, "max_new_tokens": 32},
        "shadow_report": {"shadow_size": 8, "max_turns": 4, "max_new_tokens": 32},
    },
}

# Gate thresholds that let any candidate through, for runs that must show a registration (the UI
# screenshots); never the product's policy, never the demo's or the end-to-end test's. A run config
# cannot loosen a gate below the deployment's floors (evaluation.gate_floors), so such a deployment
# also writes them as its floors (`permissive_floors`).
# The margins sit below -1, the lowest a difference of two success rates can be: an interval's
# lower bound must be strictly above its margin, and a candidate that lost every paired trial has
# a bound of exactly -1.
PERMISSIVE_GATES = {
    "min_human_labels": 2,
    "calibration_min_margin": -2.0,
    "shadow_margin": -2.0,
    "max_tool_drift": 1.0,
    "min_reward_alignment": 0.0,
    "violation_tolerance": 1.0,
    "hacking_excess_max": 1.0e6,
    "max_errored_share": 1.0,
}


def permissive_floors(instance_dir: Path) -> Path:
    """Write PERMISSIVE_GATES as the floors of the Dagster instance in `instance_dir`; the file's path."""
    path = Path(instance_dir) / INSTANCE_FLOORS_FILE
    write_floors(path, PERMISSIVE_GATES)
    return path


def demo_run_config(scale: str = "demo", gates: dict | None = None) -> dict:
    """The Dagster run config of a demo-sized `weekly_retrain` on the tiny model at curriculum level 1.

    `scale` picks the stage sizes ("demo" or "ci"); `gates` overrides gate thresholds (none by
    default: the demo shows the product's decision). Training uses the product's settings and
    reward; where no rollout group sees two different rewards, the update moves nothing, the
    `weights_changed` check says so as a warning, and the gates judge the unchanged candidate.
    """
    if scale not in _SIZES:
        raise ValueError(f"unknown demo scale {scale!r}: expected one of {sorted(_SIZES)}")
    sizes = _SIZES[scale]
    ops = {
        "policy_base": sizes["policy_base"],
        "grpo_candidate": sizes["grpo_candidate"],
        "calibration_report": sizes["calibration_report"],
        "shadow_report": sizes["shadow_report"],
        "promotion_gate": dict(gates or {}),
    }
    return {
        "ops": {name: {"config": dict(config)} for name, config in ops.items()},
        "resources": {"curriculum": {"config": {"levels": {"1": 1.0}}}},
    }


def _summary_rows(result: WeekRun) -> list[str]:
    """The week as Dagster recorded it: the promotion decision of the run."""
    decision = result.decision
    if decision is None:
        return [f"  week {result.week}: no promotion decision (see the Dagster run for the failed step)"]
    report, lineage = decision.report, decision.lineage
    rows = [
        f"  week {result.week}: window {lineage.window_rows} rows, hash {(lineage.window_hash or '')[:12]}, "
        f"validation {lineage.validation}, baseline = {report.baseline_kind}",
        f"    {'metric':32s} {'candidate':>10s} {'baseline':>10s}",
    ]
    for label in ("calibration", "shadow"):
        summary = decision.metrics.get(label, {})
        for metric in ("success_rate", "pass_hat_2", "policy_violation_rate", "actions_per_task"):
            if metric in summary.get("candidate", {}):
                rows.append(
                    f"    {label + ' ' + metric:32s} {summary['candidate'][metric]:10.3f} "
                    f"{summary['baseline'][metric]:10.3f}"
                )
    rows.append(f"    {'gate':32s} {'value':>10s} {'verdict':>10s}")
    for gate in report.gates:
        value = "n/a" if gate.value is None else f"{gate.value:.3f}"
        rows.append(f"    {gate.name:32s} {value:>10s} {gate.verdict:>10s}")
    rows.append(f"    decision: {decision.decision} ({decision.reason})")
    if decision.failure_mode_rises:
        rises = ", ".join(f"{j.mode} +{j.jump:.2f}" for j in decision.failure_mode_rises)
        rows.append(f"    failure modes up more than 10 points since last week (investigate): {rises}")
    return rows


def _champion_line(champion, name: str) -> str:
    if champion is None:
        return "none yet"
    if champion.tags.get("role") == "base":
        return (
            f"{name} v{champion.version}, the base model (first champion, registered in week "
            f"{champion.tags.get('base_of_week')}; no candidate has beaten it yet)"
        )
    return f"{name} v{champion.version} (candidate of week {champion.week})"


@dataclass(frozen=True)
class DemoSettings:
    """The demo's traffic (`retrain demo`'s options are generated from these fields).

    The calendar: `weeks` of the shop's rule-based agent (scripted, LEGACY_VERSION), then
    `retrained_weeks` + 1 weeks each served by the model that is champion when it starts (before
    the first retrain, the shipped agent, which that week's `first_champion` registers as version
    1): all but the last are retrained, the last is judged by the champion-health check, as the
    sensor does in production. The calendar ends the week before `DEMO_TODAY`'s."""

    weeks: int = setting(4, "legacy weeks of the rule-based agent before the model-served ones")
    # Three: a climb needs two promotions in a row after v1, and a week to find each.
    retrained_weeks: int = setting(3, "model-served weeks retrained through Dagster before the judged one")
    legacy_per_day: int = setting(200, "legacy interactions a day")
    # The canary answers CanarySettings.share (10%) of them and is judged once it has answered
    # `min_conversations` (40) with gold over 7 days: at 70 a day one served week is enough (about
    # 49, of which about nine in ten carry gold), at 40 it took two, so a canary set by one retrain
    # was replaced by the next before it was ever judged.
    per_day: int = setting(70, "model-served interactions a day")
    # The calibration gate's interval resamples customers, so its power grows with the number of
    # customers in the calibration split (a tenth of the shop's): at 300 (the traffic generator's
    # default) a report of 60 tasks came from 23 customers, and a candidate that won 3 and lost
    # none of them could not show a lower bound above 0.
    customers: int = setting(1500, "customers in the demo shop's generated world")
    reviewer_error_rate: float = setting(
        0.1,
        "share of each served week's review sample the simulated reviewer labels against the verifier "
        "(a person's mistakes)",
    )


LEGACY_VERSION = "rules-agent/legacy"
# The demo's traffic is simulated, so its e-mail pseudonyms protect no one. A fresh home would make
# a random key (`Home.pii_key`), and with it other hex pseudonyms for the agent to copy in every
# replayed conversation: two runs measured the same champion on the same 201 shadow conversations
# at 0.468 and 0.418. With a fixed key every fresh demo stores, and so evaluates, the same records.
# A key the deployment sets (RETRAIN_PII_KEY) or a home's existing key file is left as it is.
DEMO_PII_KEY = "agent-retrain-demo-pseudonyms-not-a-secret"
# Who approves a week held only for a shift in how the agent works (`evaluation.gates.APPROVABLE_HOLDS`). In
# production a person reads the transcripts and runs `retrain approve`; the demo has no person, so
# it stands in for one through the same call, and says so.
DEMO_REVIEWER = f"{DEMO_RATER} (standing in for a person)"


def review_hold(result: WeekRun, home: Home) -> dict | None:
    """Approve a held week as its reviewer would after reading what moved; None (nothing done) for
    any other decision, or when approval refuses (a failed gate, a hold only evidence lifts: the
    rule is `evaluation.gates.approve`'s)."""
    decision = result.decision
    if decision is None or decision.decision != "hold":
        return None
    for gate in decision.report.gates:
        if gate.verdict == "hold":
            print(f"  held for review: {gate.name}: {gate.detail}", flush=True)
    try:
        done = approve_week(result.week, approver=DEMO_REVIEWER, home=home)
    except ApprovalError as refused:
        print(f"  not approved: {refused}", flush=True)
        return None
    print(f"  approved by {DEMO_REVIEWER}: registered as version {done['version']}", flush=True)
    return done


def _serving_model(home: Home, uri: str, name: str) -> tuple[str, str]:
    """(model folder, policy_version) of whatever serves the next week: the champion, else the
    shipped agent as the version the first retrain will register it as."""
    champion = champion_info(uri, name)
    if champion is None:
        if find_base_version(uri, name) is not None:
            raise RuntimeError(f"{name} has versions but no champion: run `retrain rollback` or start --fresh")
        return str(shipped_agent_path()), f"{name}/1"
    return str(local_champion(uri, home.models, champion, name)), f"{name}/{champion.version}"


def serving_policy(
    path: str, domain: str = DEFAULT_DOMAIN, level: int | None = 1, tool_list: str = DEFAULT_TOOL_LIST
) -> PseudonymisedPolicy:
    """A model folder as it serves traffic of `domain` at `level` (1: the level-1 shop; None: the
    whole shop, as recorded, i.e. curriculum level 4): greedy, with the tools a curriculum of that
    level offers under `tool_list` (`training.curriculum.tools_for_levels`, so a model serves with
    the list it was trained and judged with), the product's rollout length (the settings its
    calibration figures are measured with), behind the PII gateway, so it reads customers' data
    as it was trained and judged on it (`training.sandbox.pii_gateway`)."""
    model = HFPolicy(
        path,
        max_new_tokens=EvalSettings.max_new_tokens,
        tools=tools_for_levels([1 if level == 1 else max(LEVELS)], domain, tool_list),
        domain=domain,
    )
    return PseudonymisedPolicy(model, domain)


def _serve_week(
    home: Home, monday: date, per_day: int, uri: str, name: str, customers: int = DemoSettings.customers
) -> dict:
    """Serve a week with the champion and, when there is one, the canary beside it (the same
    containment holds for both: it is set on the registered model). What served, for the summary."""
    path, version = _serving_model(home, uri, name)
    canary = canary_info(uri, name)
    share = environment.canary_settings().share if canary is not None else 0.0
    beside = f" and canary {name}/{canary.version} on {share:.0%} of them" if canary is not None else ""
    print(f"serving week {monday} with {version} ({path}){beside}: {per_day} conversations a day ...", flush=True)
    started = time.monotonic()
    containment = containment_of(uri, name)
    if containment.mode != "off":
        print(f"  contained ({containment.mode}) by {containment.by}: {containment.reason}", flush=True)
    policy = contained(serving_policy(path), containment.mode)
    sim = simulate(
        days=7,
        per_day=per_day,
        seed=DEMO_SEED,
        out_dir=str(home.landing / "demo"),
        start=monday,
        policy=policy,
        level=1,
        policy_version=version,
        n_users=customers,
        **_canary_arm(home, uri, name, canary, share, containment.mode),
    )
    print(f"  served in {time.monotonic() - started:.0f} s: outcomes {sim['outcomes']}", flush=True)
    on_canary = sum(day.get("canary_interactions", 0) for day in sim["per_day_summary"])
    return {
        "week": monday,
        "champion": version,
        "canary": None if canary is None else f"{name}/{canary.version}",
        "on_canary": on_canary,
    }


def _canary_arm(home: Home, uri: str, name: str, canary, share: float, mode: str) -> dict:
    if canary is None:
        return {}
    path = str(local_champion(uri, home.models, canary, name))
    return {
        "canary": contained(serving_policy(path), mode),
        "canary_version": f"{name}/{canary.version}",
        "canary_share": share,
    }


def judge_canary(home: Home, uri: str, name: str, served: dict) -> dict | None:
    """After a week the canary served in: its traffic ingested (the landing sensor's job in
    production), then the health sensor's canary check; None when no canary served."""
    if not served["canary"]:
        return None
    ingest_paths(home.duckdb_path, [home.landing / "demo"])
    outcome = check_canary(
        home, str(home.duckdb_path), uri, name, environment.canary_settings(), home.mlflow_artifacts.as_uri()
    )
    print(f"  canary check after week {served['week']}: {outcome['action']} ({outcome['reason']})", flush=True)
    return {**outcome, "week": served["week"], "served": served}


def _review_week(home: Home, monday: date, error_rate: float) -> dict:
    """The served week's review: its conversations stored, then the product's review sample exported,
    labelled by the simulated reviewer and imported (`orchestration.cli.demo_review`)."""
    ingest_paths(home.duckdb_path, [home.landing / "demo"])  # the sample is drawn from the store
    done = review_week(monday.isoformat(), home.root / "reviews", error_rate)
    print(
        f"  reviewed: {done['labelled']} of {done['sampled']} sampled conversations labelled by {DEMO_RATER} "
        f"({done['mistakes']} against the verifier, {done['from_outcome']} judged by the logged outcome, "
        f"{done['unjudged']} left out), "
        f"sample {done['sample_id']}",
        flush=True,
    )
    return done


def run_demo(
    weeks: int = DemoSettings.weeks,
    retrained_weeks: int = DemoSettings.retrained_weeks,
    per_day: int = DemoSettings.per_day,
    fresh: bool = False,
    today: date | None = None,
    legacy_per_day: int = DemoSettings.legacy_per_day,
    reviewer_error_rate: float = DemoSettings.reviewer_error_rate,
    customers: int = DemoSettings.customers,
) -> int:
    if retrained_weeks < 1:
        raise CliError(f"--retrained-weeks {retrained_weeks}: the demo retrains at least one week")
    started = time.monotonic()
    # Library progress bars would drown the pipeline's own progress lines.
    for name in ("HF_DATASETS_DISABLE_PROGRESS_BARS", "HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
        os.environ.setdefault(name, "1")
    home = environment.home()
    if fresh and home.root.exists():
        print(f"agent-retrain demo: starting from an empty home (removed {home.root})")
        shutil.rmtree(home.root)
    home.ensure()
    fixed_key = environment.value(PII_KEY_ENV) is None and home.write_pii_key(DEMO_PII_KEY)
    uri, model_name = mlflow_target(home)
    this_monday = date.fromisoformat(week_key(today or DEMO_TODAY))
    retrained = [this_monday - timedelta(weeks=offset) for offset in range(retrained_weeks + 1, 1, -1)]
    judged = this_monday - timedelta(weeks=1)  # served by the champion after them, then judged
    first_day = retrained[0] - timedelta(weeks=weeks)
    print(f"agent-retrain demo: home {home.root}")
    if fixed_key:
        print(f"  e-mail pseudonyms under the demo's fixed, non-secret key ({home.pii_key_path})")
    print(
        f"simulating {weeks} legacy weeks x 7 days x {legacy_per_day} interactions of the rule-based agent "
        f"from {first_day} ...",
        flush=True,
    )
    sim = simulate(
        days=7 * weeks,
        per_day=legacy_per_day,
        seed=DEMO_SEED,
        out_dir=str(home.landing / "demo"),
        start=first_day,
        policy_version=LEGACY_VERSION,
        n_users=customers,
    )
    print(f"  {len(sim['files'])} day files, outcomes {sim['outcomes']}")
    results, approvals, served, canary_checks = [], {}, [], []
    for monday in retrained:
        served.append(_serve_week(home, monday, per_day, uri, model_name, customers))
        canary_checks.append(judge_canary(home, uri, model_name, served[-1]))
        _review_week(home, monday, reviewer_error_rate)
        print(f"\nweekly_retrain for week {monday} (through Dagster):", flush=True)
        result = run_week(monday.isoformat(), run_config=demo_run_config(), home=home)
        results.append(result)
        approval = review_hold(result, home)
        if approval is not None:
            approvals[result.week] = approval
    served.append(_serve_week(home, judged, per_day, uri, model_name, customers))
    ingest_paths(home.duckdb_path, [home.landing / "demo"])  # the retrains ingested the weeks before
    # The thresholds the `champion_health` sensor judges with (RETRAIN_HEALTH_*), as in production.
    health = check_champion(home, str(home.duckdb_path), uri, model_name, environment.health_settings())
    # The sensor judges the canary after the champion, and not on the tick that rolled it back.
    canary_checks.append(judge_canary(home, uri, model_name, served[-1]) if health["action"] != "rollback" else None)
    print("\n" + "=" * 78 + "\nsummary\n" + "=" * 78)
    base = find_base_version(uri, model_name)
    for result in results:
        print("\n".join(_summary_rows(result)))
        if base is not None and base[1] == result.week:
            print(f"    first champion: the base model, registered as version {base[0]} (no champion existed)")
        version = find_week_version(uri, result.week, model_name)
        if result.week in approvals:
            print(f"    approved by {approvals[result.week]['approved_by']} (the held gates above become pass)")
        why = f"decision {result.decision.decision}" if result.decision else "the run did not reach the gate"
        print(
            f"    registered: {'version ' + str(version) if version else 'no (' + why + ')'}"
            f"   dagster run {result.run_id}"
        )
    print("\n" + "\n".join(served_rows(home.duckdb_path)))
    print("\n" + "\n".join(climb_rows(home.duckdb_path, LEGACY_VERSION)))
    print("\n" + "\n".join(canary_rows(served, canary_checks)))
    print(f"\nchampion health on the week of {judged} (the champion_health sensor's check): {_health_line(health)}")
    champion, canary = champion_info(uri, model_name), canary_info(uri, model_name)
    print(f"\nchampion: {_champion_line(champion, model_name)}")
    print(
        f"canary: {'none' if canary is None else f'{model_name} v{canary.version} (candidate of week {canary.week})'}"
    )
    print(f"demo finished in {time.monotonic() - started:.0f} s\n")
    print("open the UIs on this data:")
    print(f"  DAGSTER_HOME={home.dagster_home} .venv/bin/dagster dev -w workspace.yaml   # http://127.0.0.1:3000")
    print(f"  .venv/bin/mlflow ui --backend-store-uri {uri}   # http://127.0.0.1:5000")
    return 0 if all(r.success for r in results) else 1


def canary_rows(served: list[dict], checks: list[dict | None]) -> list[str]:
    """Which aliases served each week, and what the canary check decided after it."""
    rows = ["who served each week (champion, and the canary beside it):"]
    for week, check in zip(served, checks):
        beside = f", canary {week['canary']} on {week['on_canary']} conversations" if week["canary"] else ", no canary"
        rows.append(f"  week {week['week']}: champion {week['champion']}{beside}")
        if check is not None:
            rows.append(f"    canary check: {_CANARY_ACTIONS[check['action']]} ({check['reason']})")
    return rows


_CANARY_ACTIONS = {
    "promote": "promoted to champion",
    "drop": "dropped, incident filed",
    "wait": "kept waiting",
    "none": "no canary",
}


def _health_line(outcome: dict) -> str:
    if outcome["action"] == "rollback":
        return f"rolled back v{outcome['from_version']} -> v{outcome['to_version']}: {outcome['reason']}"
    if outcome["action"] == "incident":
        return f"{outcome['champion']} kept, incident filed: {outcome['reason']}"
    return f"{outcome.get('champion', 'no champion')} kept: {outcome['reason']}"
