"""Training tasks from verified interactions, in levels a tiny policy can climb.

Level 1: one intent, few gold actions, an opening message that already states every identifier
the gold actions need (order id, email, reason), compact tool results. This is the level the demo
model must learn. Level 2: the other verified tasks with more steps. Level 3: adversarial personas
and injected tool errors, so recovery is rewarded (when no recorded customer was adversarial, the
short tasks replayed with an adversarial persona, or every verified task when none is short).
Level 4: the raw window records as recorded.

The week's shares of the levels and of the intents follow the production agent's failures in the
window (`week_mix`): more of what it fails, a floor for what it already does. Personas and tool
faults come with the level (level 3's rows carry both), so they follow the same mix.

Arrow cannot hold the heterogeneous world dicts, so `initial_state`, `user_scenario` and `gold`
travel as JSON strings; the environment's `reset` accepts either form.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dataplane.settings import setting
from domains.registry import DEFAULT_DOMAIN, load_domain
from training.customers.base import PERSONAS
from training.fields import as_dict
from training.sandbox.environment import environment_class
from training.sandbox.prompting import domain_of, initial_messages
from training.sandbox.rollout import trial_seed

LEVELS = (1, 2, 3, 4)
COOPERATIVE_PERSONA = "polite"
# Every simulated persona but the cooperative one is adversarial (the list is the simulator's, so a
# new persona cannot be missed), plus "adversarial" for logs that label such customers generically.
ADVERSARIAL_PERSONAS = frozenset(PERSONAS) - {COOPERATIVE_PERSONA} | {"adversarial"}


class CurriculumError(ValueError):
    """A level mix or record set that cannot make a dataset; `.rule` names what was broken."""

    def __init__(self, rule: str, detail: str) -> None:
        super().__init__(f"{rule}: {detail}")
        self.rule = rule
        self.detail = detail


@dataclass(frozen=True)
class LevelRules:
    """What makes a record level 1 (configurable: a bigger model can start higher). None takes
    the domain's own level 1 (`Domain.level1`); a domain without one has no level-1 tasks."""

    level1_intents: tuple[str, ...] | None = None
    level1_max_actions: int | None = None
    level2_max_actions: int = 8


@dataclass
class CurriculumReport:
    """What a dataset was made of: logged with the run."""

    requested: dict[int, float]
    rows_per_level: dict[int, int]
    eligible_per_level: dict[int, int]
    intents: dict[str, int] = field(default_factory=dict)
    # Levels whose pool was generated rather than recorded (level 3 with no adversarial record).
    generated_per_level: dict[int, int] = field(default_factory=dict)
    personas: dict[str, int] = field(default_factory=dict)
    failed_task_rows: int = 0  # rows drawn from tasks the champion failed in the window
    # Records left out of a level because the sandbox could not start them (`startable`).
    unstartable_per_level: dict[int, int] = field(default_factory=dict)
    first_unstartable: str = ""  # the first such record and why, for the run's log

    def to_dict(self) -> dict[str, Any]:
        return {
            "requested": {str(k): v for k, v in self.requested.items()},
            "rows_per_level": {str(k): v for k, v in self.rows_per_level.items()},
            "eligible_per_level": {str(k): v for k, v in self.eligible_per_level.items()},
            "intents": dict(self.intents),
            "generated_per_level": {str(k): v for k, v in self.generated_per_level.items()},
            "personas": dict(self.personas),
            "failed_task_rows": self.failed_task_rows,
            "unstartable_per_level": {str(k): v for k, v in self.unstartable_per_level.items()},
            "first_unstartable": self.first_unstartable,
        }


def opening_text(record: Mapping[str, Any]) -> str:
    for message in record.get("messages") or ():
        if message.get("role") == "user" and message.get("content"):
            return message["content"]
    return ""


def is_self_contained(record: Mapping[str, Any]) -> bool:
    """Whether the opening message states every gold argument the domain's level 1 needs stated
    (in retail: order id, email, name, zip and reason)."""
    level1 = load_domain(domain_of(dict(record))).level1
    gold = as_dict(record.get("gold")) or {}
    text = opening_text(record).lower()
    if not text or level1 is None:
        return False
    for action in gold.get("actions") or ():
        for key in level1.stated_arguments:
            value = (action.get("arguments") or {}).get(key)
            if isinstance(value, str) and value.lower() not in text:
                return False
    return True


def level_of(record: Mapping[str, Any], rules: LevelRules = LevelRules()) -> int:
    """The lowest level a verified record belongs to (4 when it fits no easier level)."""
    gold = as_dict(record.get("gold")) or {}
    n_actions = len(gold.get("actions") or ())
    scenario = as_dict(record.get("user_scenario")) or {}
    if str(scenario.get("persona", "")).lower() in ADVERSARIAL_PERSONAS:
        return 3
    level1 = load_domain(domain_of(dict(record))).level1
    if (
        level1 is not None
        and record.get("intent") in (rules.level1_intents or level1.intents)
        and 0 < n_actions <= (rules.level1_max_actions or level1.max_actions)
        and is_self_contained(record)
    ):
        return 1
    if n_actions <= rules.level2_max_actions:
        return 2
    return 4


# The personas a generated adversarial task draws from: the simulator's own, so every one is a
# customer the simulator can play (the generic "adversarial" label has no behaviour of its own).
_GENERATED_PERSONAS = tuple(sorted(frozenset(PERSONAS) - {COOPERATIVE_PERSONA}))


def adversarial_variant(record: Mapping[str, Any]) -> dict[str, Any]:
    """A verified task replayed with a hostile customer: the same world, gold and request, told by
    an adversarial persona picked by a stable hash of the interaction id (the same every week).
    Level 3 draws from these when no recorded customer was adversarial, so a curriculum that asks
    for recovery training never finds the level empty just because this week's customers were kind."""
    scenario = dict(as_dict(record.get("user_scenario")) or {})
    digest = hashlib.sha256(str(record.get("interaction_id", "")).encode()).digest()
    scenario["persona"] = _GENERATED_PERSONAS[digest[0] % len(_GENERATED_PERSONAS)]
    return {**record, "user_scenario": scenario}


def is_training_task(record: Mapping[str, Any]) -> bool:
    """Only interactions whose outcome was verified (they carry gold) become tasks."""
    gold = as_dict(record.get("gold"))
    return isinstance(gold, dict) and bool(gold.get("actions") or gold.get("outputs"))


def parse_mix(mix: Mapping[Any, float] | Iterable[int]) -> dict[int, float]:
    """`{level: fraction}` normalised to sum 1; a list of levels means equal shares."""
    if not isinstance(mix, Mapping):
        levels = list(mix)
        if not levels:
            raise CurriculumError("empty_level_mix", "no level requested")
        mix = {level: 1.0 for level in levels}
    parsed: dict[int, float] = {}
    for key, share in mix.items():
        try:
            level = int(key)
        except (TypeError, ValueError) as err:
            raise CurriculumError("unknown_level", f"level {key!r} is not one of {LEVELS}") from err
        if level not in LEVELS:
            raise CurriculumError("unknown_level", f"level {key!r} is not one of {LEVELS}")
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not share >= 0:
            raise CurriculumError("bad_level_share", f"level {level} share {share!r} must be a number >= 0")
        parsed[level] = float(share)
    total = sum(parsed.values())
    if total <= 0:
        raise CurriculumError("empty_level_mix", f"shares {dict(mix)} sum to zero")
    return {level: share / total for level, share in sorted(parsed.items()) if share > 0}


def levels_for_domain(mix: Mapping[Any, float] | Iterable[int], domain: str = DEFAULT_DOMAIN) -> dict[str, float]:
    """`mix` as `domain` can follow it: a domain without a level-1 form (`Domain.level1` None)
    gives level 1's share to level 2, its short tasks as recorded, instead of an empty level."""
    shares = parse_mix(mix)
    if load_domain(domain).level1 is None and 1 in shares:
        shares[2] = shares.get(2, 0.0) + shares.pop(1)
    return {str(level): share for level, share in sorted(shares.items())}


# Which tools a policy is offered (`tools_for_levels`): "by_level" is level 1's short list when the
# mix is level 1 alone, else every tool; "level1" is level 1's list at every level (an agent built on
# it, served on the whole shop, keeps the list it knows and hands the rest over); "all" every tool.
TOOL_LISTS = ("by_level", "level1", "all")
DEFAULT_TOOL_LIST = "by_level"


def check_tool_list(tool_list: str) -> str:
    """`tool_list` when it is one of TOOL_LISTS; CurriculumError (rule `unknown_tool_list`) otherwise."""
    if tool_list not in TOOL_LISTS:
        raise CurriculumError("unknown_tool_list", f"tool_list {tool_list!r} is not one of {list(TOOL_LISTS)}")
    return tool_list


def tools_for_levels(
    mix: Mapping[Any, float] | Iterable[int], domain: str = DEFAULT_DOMAIN, tool_list: str = DEFAULT_TOOL_LIST
) -> tuple[str, ...] | None:
    """The tools offered to a policy trained, evaluated or served on `mix` under `tool_list`
    (TOOL_LISTS), None meaning every tool. One answer for SFT, GRPO, evaluation and serving, so a
    policy is always judged and served with the tool list it was trained with. A domain without a
    level 1 offers every tool."""
    check_tool_list(tool_list)
    level1 = load_domain(domain).level1
    if level1 is None or tool_list == "all":
        return None
    return level1.tools if tool_list == "level1" or set(parse_mix(mix)) == {1} else None


def compact_at(level: int) -> bool:
    """Whether tool results are shown in the environment's short form at curriculum `level`: below
    level 4; level 4 is the conversations as recorded, as served traffic shows them in full."""
    return level < 4


@dataclass(frozen=True)
class MixSettings:
    """How the week's GRPO mix follows the champion's failures in the window (the `curriculum`
    resource's knobs besides `levels`)."""

    by_failures: bool = setting(
        True, "weight the week's intents and levels by the champion's failure shares in the window"
    )
    # 0.1 keeps what the champion does well in about one task in ten per intent or level: enough
    # to notice forgetting it, little enough that the failures get most of the steps.
    floor: float = setting(0.1, "smallest share an intent or level of the mix keeps, however well the champion does it")
    incident_boost: float = setting(0.1, "failure share an open incident adds to each intent it points at")


def failure_weighted(
    prior: Mapping[str, float], failures: Mapping[str, float], floor: float = MixSettings.floor
) -> dict[str, float]:
    """Shares over `prior`'s keys that give more to what fails and keep a floor for the rest:
    `floor + (1 - n * floor) * failures[k] / sum(failures)` over the n keys (the floor capped at
    1/n, so the shares still sum to 1); `prior` normalised when nothing failed. Failures on a key
    outside `prior` count for nothing: the mix never adds an intent or level it was not given."""
    keys = sorted(k for k, share in prior.items() if share > 0)
    if not keys:
        raise CurriculumError("empty_mix", f"no positive share in {dict(prior)}")
    failed = {k: max(float(failures.get(k, 0.0)), 0.0) for k in keys}
    total = sum(failed.values())
    if total <= 0:
        weight = sum(prior[k] for k in keys)
        return {k: prior[k] / weight for k in keys}
    low = min(max(floor, 0.0), 1.0 / len(keys))
    return {k: low + (1.0 - len(keys) * low) * failed[k] / total for k in keys}


@dataclass(frozen=True)
class WeekMix:
    """The week's GRPO mix: level, intent and persona shares, the tasks the champion failed and the
    share of draws they get, and the evidence they were set from."""

    levels: dict[str, float]
    intents: dict[str, float] | None
    evidence: dict[str, Any] = field(default_factory=dict)
    personas: dict[str, float] | None = None
    failed_tasks: frozenset[str] = frozenset()
    failed_share: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "levels": dict(self.levels),
            "intents": self.intents,
            "personas": self.personas,
            "failed_tasks": len(self.failed_tasks),
            "failed_share": self.failed_share,
            "evidence": dict(self.evidence),
        }

    def task_weights(self) -> TaskWeights:
        return TaskWeights(self.intents, self.personas, self.failed_tasks, self.failed_share)


def week_mix(
    levels: Mapping[str, float],
    intents_seen: Mapping[str, int],
    failed_by_intent: Mapping[str, int],
    failed_by_level: Mapping[str, int],
    judged: int,
    incident_intents: Mapping[str, int] | None = None,
    settings: MixSettings = MixSettings(),
    *,
    personas_seen: Mapping[str, int] | None = None,
    failed_by_persona: Mapping[str, int] | None = None,
    faulted_failed: int = 0,
    failed_tasks: Iterable[str] = (),
) -> WeekMix:
    """The mix of a week whose window showed `intents_seen` (tasks per intent) and `personas_seen`
    (tasks per customer persona) and, of `judged` judged conversations, the failures per intent,
    level and persona; each open incident pointing at an intent adds `incident_boost` to its
    failure share.

    - Levels, intents and personas each get `failure_weighted` shares: more of what fails, the
      floor for the rest. Only the configured levels and the intents and personas seen are
      weighted, so the week never trains on a level or intent it has no tasks of, and the tool
      list (`tools_for_levels`) stays the configured mix's.
    - Faults: a failed conversation that met a back-end fault also counts as a failure of level 3,
      the level whose tasks inject one, when level 3 is configured.
    - Failure modes pick tasks: within each intent and persona, the tasks the champion failed
      (`failed_tasks`, whatever their mode) get `1 - floor` of the draws and the rest the floor."""
    incidents = dict(incident_intents or {})
    failed_tasks = frozenset(failed_tasks)
    evidence = {
        "judged": judged,
        "failed_by_intent": dict(failed_by_intent),
        "failed_by_level": dict(failed_by_level),
        "failed_by_persona": dict(failed_by_persona or {}),
        "faulted_failed": faulted_failed,
        "failed_tasks": len(failed_tasks),
        "incident_intents": incidents,
        "by_failures": settings.by_failures,
        "floor": settings.floor,
    }
    if not settings.by_failures:
        return WeekMix(dict(levels), None, evidence)
    share = lambda n: n / judged if judged else 0.0  # noqa: E731
    intent_failures = {
        k: share(failed_by_intent.get(k, 0)) + settings.incident_boost * incidents.get(k, 0) for k in intents_seen
    }
    level_failures = {k: share(failed_by_level.get(k, 0)) for k in levels}
    if "3" in level_failures:
        level_failures["3"] += share(faulted_failed)
    intents = failure_weighted(dict(intents_seen), intent_failures, settings.floor) if intents_seen else None
    seen = {k: n for k, n in (personas_seen or {}).items() if n > 0}
    persona_failures = {k: share((failed_by_persona or {}).get(k, 0)) for k in seen}
    personas = failure_weighted(seen, persona_failures, settings.floor) if seen else None
    failed_share = failure_weighted({"failed": 1, "passed": 1}, {"failed": 1.0}, settings.floor)["failed"]
    return WeekMix(
        failure_weighted(levels, level_failures, settings.floor),
        intents,
        evidence,
        personas,
        failed_tasks,
        failed_share if failed_tasks else None,
    )


def _allotted(weights: Mapping[str, float], total: int) -> dict[str, int]:
    """`total` split by `weights` in whole numbers (largest remainders first, ties by key)."""
    weight = sum(weights.values())
    exact = {k: total * w / weight for k, w in weights.items()}
    counts = {k: int(v) for k, v in exact.items()}
    order = sorted(exact, key=lambda k: (-(exact[k] - counts[k]), k))
    for k in order[: total - sum(counts.values())]:
        counts[k] += 1
    return counts


@dataclass(frozen=True)
class TaskWeights:
    """How a level's draws are shared out below the level (all from `week_mix`; None: as the
    records come): per intent, then per customer persona within an intent, then between the tasks
    the champion failed in the window (`failed_tasks`, by interaction id) and the rest."""

    intents: Mapping[str, float] | None = None
    personas: Mapping[str, float] | None = None
    failed_tasks: frozenset[str] = frozenset()
    failed_share: float | None = None

    def __post_init__(self) -> None:
        if self.failed_share is not None and not 0.0 <= self.failed_share <= 1.0:
            raise CurriculumError("bad_failed_share", f"failed_share={self.failed_share!r} must be in [0, 1]")

    def splits(self) -> list[tuple[Any, Mapping[str, float] | None, float]]:
        """(key of a record, weights over its values, weight of a value the weights do not name) for
        each split, outermost first. An intent not weighted gets nothing (the week does not train
        it); a persona not weighted (a generated level-3 customer, level 1's cooperative one) gets
        the smallest persona weight, the floor."""
        status = None
        if self.failed_share is not None and self.failed_tasks:
            status = {"failed": self.failed_share, "passed": 1.0 - self.failed_share}
        failed = self.failed_tasks
        least_persona = min(self.personas.values()) if self.personas else 0.0
        return [
            (lambda r: str(r.get("intent", "other")), self.intents, 0.0),
            (persona_of, self.personas, least_persona),
            (lambda r: "failed" if str(r.get("interaction_id", "")) in failed else "passed", status, 0.0),
        ]


def persona_of(record: Mapping[str, Any]) -> str:
    """The customer persona a task is told by ("" when its scenario names none)."""
    return str((as_dict(record.get("user_scenario")) or {}).get("persona") or "")


def _drawn(
    pool: list[Mapping[str, Any]], wanted: int, weights: TaskWeights | None, rng: random.Random
) -> list[tuple[Mapping[str, Any], int]]:
    """(record, repeat) pairs: `wanted` draws from the shuffled `pool`, cycled; with `weights`, the
    draws are split by each of its splits in turn (intent, persona, failed or not), each group of
    records getting its weight's share (renormalised over the groups the pool holds; a split whose
    weights give none of them anything is skipped), cycling through each final group's records."""
    out, split = _split_draws(pool, wanted, weights.splits() if weights else [])
    if split:  # unsplit draws keep the pool's order, as without weights
        rng.shuffle(out)
    return out


def _split_draws(
    pool: list[Mapping[str, Any]], wanted: int, splits: list[tuple[Any, Mapping[str, float] | None, float]]
) -> tuple[list[tuple[Mapping[str, Any], int]], bool]:
    """(the draws, whether any split applied)."""
    for depth, (key, shares, unnamed) in enumerate(splits):
        if not shares:
            continue
        groups: dict[str, list[Mapping[str, Any]]] = {}
        for record in pool:
            groups.setdefault(key(record), []).append(record)
        present = {k: max(float(shares.get(k, unnamed)), 0.0) for k in groups}
        if sum(present.values()) <= 0:
            continue
        out: list[tuple[Mapping[str, Any], int]] = []
        for group, count in sorted(_allotted(present, wanted).items()):
            out += _split_draws(groups[group], count, splits[depth + 1 :])[0]
        return out, True
    return [(pool[i % len(pool)], i // len(pool)) for i in range(wanted)], False


def task_row(record: Mapping[str, Any], level: int, seed: int, repeat: int = 0) -> dict[str, Any]:
    """One dataset row: the prompt plus everything the sandbox's `reset` needs."""
    # One seed function for training rows and evaluation trials: (seed, record, repeat) only.
    row_seed = trial_seed(seed, str(record.get("interaction_id", "")), repeat)
    # Sorted keys, the store's layout (`dataplane.rowtext.stored_form`): a full tool result shows a
    # record's keys in the state's order, and served traffic and evaluation read stored states.
    dump = lambda value: value if isinstance(value, str) else json.dumps(value, sort_keys=True)  # noqa: E731
    return {
        "prompt": initial_messages(dict(record), seed=row_seed),
        "initial_state": dump(record["initial_state"]),
        "user_scenario": dump(record.get("user_scenario") or {}),
        "gold": dump(record.get("gold")),
        "seed": row_seed,
        "compact": compact_at(level),
        "inject_tool_errors": level == 3,
        "escalation_was_necessary": record.get("escalation_was_necessary"),
        "level": level,
        "interaction_id": str(record.get("interaction_id", "")),
        "intent": str(record.get("intent", "other")),
        "persona": persona_of(record),
    }


def select_rows(
    records: Iterable[Mapping[str, Any]],
    mix: Mapping[Any, float] | Iterable[int] = (1,),
    seed: int = 0,
    size: int | None = None,
    rules: LevelRules = LevelRules(),
    weights: TaskWeights | None = None,
) -> tuple[list[dict[str, Any]], CurriculumReport]:
    """Rows drawn per level share (seeded; a level is cycled when it has fewer records than asked);
    within a level, per `weights` when given (`week_mix`: intent, persona, failed or not), else as
    the records come."""
    shares = parse_mix(mix)
    by_level: dict[int, list[Mapping[str, Any]]] = {level: [] for level in LEVELS}
    short: list[Mapping[str, Any]] = []  # recorded level-1 and level-2 tasks: what level 3 can harden
    for record in records:
        if not is_training_task(record):
            continue
        level = level_of(record, rules)
        by_level[level].append(record)
        if level in (1, 2):
            short.append(record)
        if level < 4:
            by_level[4].append(record)  # the raw window holds every verified record
        if level != 1:
            # A short single-intent task recorded with a reticent customer still makes a level-1
            # task: the same world and gold, told up front by a cooperative customer.
            domain = load_domain(domain_of(dict(record)))
            simplified = domain.as_level1(record, rules.level1_intents, rules.level1_max_actions)
            if simplified is not None:
                by_level[1].append(simplified)
    generated: dict[int, int] = {}
    if 3 in shares and not by_level[3]:
        # The short tasks first, the ones a policy can recover in; a window of long tasks only
        # hardens those rather than leaving the level empty.
        by_level[3] = [adversarial_variant(r) for r in short or by_level[4]]
        generated[3] = len(by_level[3])
    unstartable: dict[int, int] = {}
    first_unstartable = ""
    for level in shares:
        kept = []
        for record in by_level[level]:
            why = startable(record, level, seed)
            if why is None:
                kept.append(record)
                continue
            unstartable[level] = unstartable.get(level, 0) + 1
            first_unstartable = first_unstartable or f"{record.get('interaction_id', '?')}: {why}"
        by_level[level] = kept
    missing = [level for level in shares if not by_level[level]]
    if missing:
        counts = {level: len(by_level[level]) for level in LEVELS}
        raise CurriculumError("empty_level", f"levels {missing} have no eligible records (eligible: {counts})")
    requested_levels = [level for level in shares]
    total = size if size is not None else sum(len(by_level[level]) for level in requested_levels)
    if total <= 0:
        raise CurriculumError("empty_dataset", f"size {size!r} gives no rows")
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    counts: dict[int, int] = {}
    for index, level in enumerate(requested_levels):
        wanted = round(shares[level] * total) if index < len(requested_levels) - 1 else total - len(rows)
        pool = sorted(by_level[level], key=lambda r: str(r.get("interaction_id", "")))
        rng.shuffle(pool)
        for record, repeat in _drawn(pool, max(wanted, 0), weights, rng):
            rows.append(task_row(record, level, seed, repeat=repeat))
        counts[level] = max(wanted, 0)
    rng.shuffle(rows)
    report = CurriculumReport(
        shares,
        counts,
        {level: len(by_level[level]) for level in LEVELS},
        dict(Counter(row["intent"] for row in rows)),
        generated,
        dict(Counter(row["persona"] for row in rows)),
        sum(row["interaction_id"] in weights.failed_tasks for row in rows) if weights else 0,
        unstartable,
        first_unstartable,
    )
    return rows, report


def startable(record: Mapping[str, Any], level: int, seed: int = 0) -> str | None:
    """None when the sandbox starts `record` as a task of `level`, else why it cannot.

    TRL resets an environment with the task's row for every rollout of it, and an exception there
    stops the whole update; a stored record's world and scenario are whatever its producer logged
    (a customer record without its name, known facts of the wrong type). So each record a level
    may draw is started once here, as TRL would start it: its row built (`task_row`) and a fresh
    sandbox reset with it. The errors caught are those of checking untrusted data (a domain's world
    refuses a state with ValueError or TypeError; a fact missing or of the wrong type is a
    LookupError or TypeError); about a millisecond a record."""
    try:
        row = task_row(record, level, seed)
        environment_class(domain_of(dict(record)))().reset(**row)
    except (ValueError, TypeError, LookupError) as err:
        return f"{type(err).__name__}: {str(err)[:200]}"
    return None


def build_dataset(
    records: Iterable[Mapping[str, Any]],
    mix: Mapping[Any, float] | Iterable[int] = (1,),
    seed: int = 0,
    size: int | None = None,
    rules: LevelRules = LevelRules(),
    weights: TaskWeights | None = None,
):
    """`(datasets.Dataset, CurriculumReport)`: columns prompt, initial_state, user_scenario, gold,
    seed, compact, inject_tool_errors, escalation_was_necessary, level, interaction_id, intent,
    persona."""
    from datasets import Dataset

    rows, report = select_rows(records, mix, seed, size, rules, weights)
    return Dataset.from_list(rows), report
