"""Import tasks in the tau-bench format as interaction records (`retrain import-tasks --domain D`).

An outside task set (the tau-bench retail or airline tasks, or any file in that format) becomes contract
records, so it can serve as a calibration or shadow set next to production traffic: the initial
state is the subset of the world the task touches, the gold is the task's actions and outputs
as given (even where a gold call errs in the reference: such a call changes nothing, and the
verifiable core replays it the same way), and the customer's scenario is read from the
instruction (by the domain's `known_info`). The recorded conversation is only its opening: the
customer's first message. The domain decides the intent (from the gold calls), the subset of the
world a task touches, and how its world folder is read.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from domains.api import Domain
from domains.registry import DEFAULT_DOMAIN, load_domain
from training.customers import make_simulator

DEFAULT_RECORDED_AT = datetime(2026, 1, 5, tzinfo=UTC)
DEFAULT_POLICY_VERSION = "reference-tasks"
# Instruction adjectives -> simulator persona; the first adjective that maps decides.
PERSONA_OF_ADJECTIVE = {
    "impatient": "angry",
    "rigid": "angry",
    "pessimistic": "angry",
    "angry": "angry",
    "messy": "confused",
    "insecure": "confused",
    "dependent": "confused",
    "confused": "confused",
    "busy": "terse",
    "direct": "terse",
    "shy": "terse",
    "terse": "terse",
    "cautious": "plays_dumb",
}
DEFAULT_PERSONA = "polite"
_ID_SAFE = re.compile(r"[^A-Za-z0-9_.:-]")


class TaskImportError(ValueError):
    """A tasks file or a task line that cannot be imported (names the file, line and rule)."""


def persona_of(instruction: str) -> str:
    """The persona named by the instruction's adjectives ("You are busy, direct."), default polite.

    >>> persona_of("Your name is A B. You are patient, rigid, sad. Cancel ...")
    'angry'
    """
    match = re.search(r"\bYou are ([a-z ,_-]+)\.", instruction)
    words = [w.strip() for w in match.group(1).split(",")] if match else []
    return next((PERSONA_OF_ADJECTIVE[w] for w in words if w in PERSONA_OF_ADJECTIVE), DEFAULT_PERSONA)


def _task(line: str, path: Path, number: int) -> dict[str, Any]:
    try:
        task = json.loads(line)
    except json.JSONDecodeError as err:
        raise TaskImportError(f"{path}:{number}: invalid JSON ({err})") from err
    if not isinstance(task, dict):
        raise TaskImportError(f"{path}:{number}: a task must be a JSON object")
    for key, kind in (("task_id", str), ("user_id", str), ("instruction", str), ("actions", list)):
        if not isinstance(task.get(key), kind):
            raise TaskImportError(f"{path}:{number}: field {key!r} missing or not {kind.__name__}")
    for action in task["actions"]:
        if (
            not isinstance(action, dict)
            or not isinstance(action.get("name"), str)
            or not isinstance(action.get("arguments", {}), dict)
        ):
            raise TaskImportError(f"{path}:{number}: malformed action {action!r:.200}")
    return task


def task_record(
    task: dict[str, Any],
    world: dict[str, Any],
    recorded_at: datetime,
    policy_version: str = DEFAULT_POLICY_VERSION,
    domain: Domain | None = None,
) -> dict[str, Any]:
    """One contract record for one task (see the module docstring)."""
    domain = domain or load_domain(DEFAULT_DOMAIN)
    actions = [{"name": a["name"], "arguments": a.get("arguments", {})} for a in task["actions"]]
    outputs = [str(o) for o in task.get("outputs") or []]
    scenario = {
        "instruction": task["instruction"],
        "known_info": domain.known_info(task["instruction"]),
        "persona": persona_of(task["instruction"]),
    }
    opening = make_simulator(scenario, seed=0, domain=domain.name).opening_message()
    stamp = recorded_at.strftime("%Y-%m-%dT%H:%M:%S+00:00")
    return {
        "interaction_id": _ID_SAFE.sub("_", f"task-{task['task_id']}")[:128],
        "started_at": stamp,
        "ended_at": stamp,
        "policy_version": policy_version,
        "customer_id": task["user_id"],
        "domain": domain.name,
        "intent": domain.classify_intent([{"role": "assistant", "tool_calls": actions}]),
        "initial_state": domain.touched_subset(world, task["user_id"], actions),
        "user_scenario": scenario,
        "messages": [{"role": "user", "content": opening}],
        "outcome": "completed",
        "escalation_was_necessary": None,
        "actions_taken": len(actions),
        "customer_sentiment_delta": 0.0,
        "gold": {"actions": actions, "outputs": outputs},
        "human_label": None,
        "schema_version": 1,
    }


def import_tasks(
    tasks_file: str | Path,
    world_dir: str | Path,
    out_dir: str | Path,
    recorded_at: datetime = DEFAULT_RECORDED_AT,
    policy_version: str = DEFAULT_POLICY_VERSION,
    domain: str = DEFAULT_DOMAIN,
) -> dict[str, Any]:
    """Write one record per task to `out_dir/<tasks file stem>.jsonl`; return a JSON-serialisable summary.

    Records are stamped `recorded_at` plus one second per task (so file order is time order).
    Raises TaskImportError for a missing or malformed tasks file, an unknown user, or a missing
    world folder.
    """
    path, folder = Path(tasks_file), Path(world_dir)
    if not path.is_file():
        raise TaskImportError(f"tasks file {str(path)!r} does not exist")
    if not folder.is_dir():
        raise TaskImportError(f"world folder {str(folder)!r} does not exist")
    if recorded_at.tzinfo is None:
        raise TaskImportError(f"recorded_at={recorded_at.isoformat()} must carry a time zone")
    loaded = load_domain(domain)
    try:
        world = loaded.load_world(folder)
    except (OSError, ValueError) as err:  # a missing file, or the domain's check of the world
        raise TaskImportError(f"world folder {str(folder)!r}: {err}") from err
    if world is None:
        raise TaskImportError(f"domain {domain!r} cannot read a world folder")
    start = recorded_at.astimezone(UTC)
    lines, intents, ids, customers = [], Counter(), set(), set()
    with_errors = 0
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        task = _task(line, path, number)
        if task["user_id"] not in world[loaded.customer_table]:
            raise TaskImportError(f"{path}:{number}: user {task['user_id']!r} is not in the world")
        record = task_record(task, world, start + timedelta(seconds=len(lines)), policy_version, loaded)
        if record["interaction_id"] in ids:
            raise TaskImportError(f"{path}:{number}: duplicate task_id {task['task_id']!r}")
        ids.add(record["interaction_id"])
        intents[record["intent"]] += 1
        customers.add(record["customer_id"])
        with_errors += bool(task.get("gold_action_errors"))
        lines.append(json.dumps(record, ensure_ascii=False, separators=(",", ":")))
    if not lines:
        raise TaskImportError(f"tasks file {str(path)!r} holds no tasks")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"{path.stem}.jsonl"
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return {
        "tasks_file": str(path),
        "world_dir": str(folder),
        "out_file": str(target),
        "records": len(lines),
        "intents": dict(intents),
        "tasks_with_gold_action_errors": with_errors,
        "customers": len(customers),
    }
