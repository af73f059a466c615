"""MLflow model registry: register a promoted candidate once per week, move `champion`, roll back.

Progressive delivery. A promoted candidate registered with `serve_as=CANARY` (the registration
asset and `retrain approve` do) gets the `canary` alias, not `champion`: it serves a share of the
traffic beside the champion until `monitoring.canary` either promotes it (`promote_canary`, the
same moves as a direct promotion) or drops it (`drop_canary`). With no champion at all there is
nothing to compare a canary with, so the candidate becomes champion at once.

Models are logged as plain artifact folders (safetensors weights + tokenizer files) under the
week's run at `model/`, and a model version is created from that run's artifact source: nothing is
pickled, and any MLflow store (sqlite file, tracking server on Postgres) holds the same thing.

Idempotency. The model version is created with its `week` tag in the same call (the store inserts
version and tags in one transaction), so a week's version is always findable by that tag:
re-running the week finds it instead of creating a second one. A crash between "version created"
and "alias moved" leaves a version without the `promoted` tag; the next call finishes the moves.

Alias order. `previous_champion` is set to the old champion first, then `champion` to the new
version, then the version is tagged `promoted=true`. A crash after the first step leaves champion
untouched (serving is unaffected, and previous == champion is harmless); the retry repeats both
steps. The other order would be unsafe: with champion moved first, a crash before previous is set
would lose the old champion's number, and a retry (seeing champion already at the new version)
could never recover it, so `rollback` would restore the wrong model.

mlflow is imported inside the functions that call it: it takes about a second to import, and the
CLI and every Dagster code-location load import this module for its names and errors only.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests
import sqlalchemy.exc

from dataplane.hashing import MODEL_DIGEST_KEY, model_digest
from dataplane.scrub import scrub_text
from domains.registry import DEFAULT_DOMAIN, agent_name
from evaluation.decision import ChampionLineage
from evaluation.gates import GateReport

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.exceptions import MlflowException

DEFAULT_MODEL_NAME = agent_name(DEFAULT_DOMAIN)
DEFAULT_EXPERIMENT = f"{DEFAULT_MODEL_NAME}-weekly"
# Who or what moved each alias (record_alias_move): a JSON list on the registered model, oldest
# dropped first to stay under MLflow's 5,000-character tag value.
ALIAS_MOVES_TAG = "alias_moves"
ALIAS_MOVES_MAX_CHARS = 4500
MAX_MOVED_BY_CHARS = 200
CHAMPION, PREVIOUS, CANARY = "champion", "previous_champion", "canary"
# On a version whose canary was dropped (the reason): re-running its week never makes it canary again.
CANARY_DROPPED_TAG = "canary_dropped"
MODEL_ARTIFACT_PATH = "model"
WEEK_TAG, PROMOTED_TAG, REPLACED_TAG = "week", "promoted", "replaced_version"
# The first champion, when no candidate has been promoted yet, is the base model itself: it has a
# `base_of_week` tag instead of `week`, so it never counts as a week's promoted candidate.
ROLE_TAG, BASE_ROLE, BASE_WEEK_TAG, BASE_ARTIFACT_PATH = "role", "base", "base_of_week", "base_model"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
_WEEK_RE = re.compile(r"[A-Za-z0-9_.:-]{1,64}")  # also keeps the registry filter string safe
# Besides MlflowException (added where mlflow is imported): the transports and stores under it.
_TRANSPORT_ERRORS = (requests.RequestException, sqlalchemy.exc.SQLAlchemyError, OSError)


class RegistryError(RuntimeError):
    """An MLflow call failed during a named step; champion is unchanged unless the step says so.

    Retrying the same call is safe: registration is idempotent per week.
    """

    def __init__(self, step: str, uri: str, cause: BaseException | str):
        super().__init__(self._message(step, uri, cause))
        self.step, self.uri, self.cause = step, uri, cause

    @staticmethod
    def _message(step: str, uri: str, cause: BaseException | str) -> str:
        return (
            f"MLflow registry at {uri} failed during '{step}': {cause}. "
            "Re-run to retry: registration is idempotent per week."
        )


class _Refusal(RegistryError):
    """A rule said no (nothing failed); the message is the rule, not a retry hint."""

    @staticmethod
    def _message(step: str, uri: str, cause: BaseException | str) -> str:
        return f"{step} ({uri}): {cause}"


class NotPromotableError(_Refusal):
    """The gate report does not say 'promote'."""


class ModelDigestError(_Refusal):
    """The model folder is not the one the decision evaluated (its digest differs, or none was recorded)."""


class StaleCandidateError(_Refusal):
    """The champion already comes from a later week; an older week must not replace it."""


class NoPreviousChampionError(_Refusal):
    """Rollback requested but no `previous_champion` alias exists."""


class NoCanaryError(_Refusal):
    """A canary promotion or drop requested but no `canary` alias exists."""


class ModelDirError(ValueError):
    """The model folder is not a plain safetensors + tokenizer folder; `.rule` names the problem."""

    def __init__(self, path: Path, rule: str, detail: str):
        super().__init__(f"{rule}: {path}: {detail}")
        self.path, self.rule, self.detail = path, rule, detail


@dataclass(frozen=True)
class ChampionInfo:
    name: str
    version: int
    week: str | None
    source: str
    run_id: str | None
    tags: dict[str, str]
    previous_version: int | None
    alias: str = CHAMPION  # the alias this version was read under (`canary_info` reads CANARY)

    @property
    def model_uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"

    @property
    def lineage(self) -> ChampionLineage:
        """What the version was registered with (LineageTagError for a tag that does not parse)."""
        return ChampionLineage.from_tags(self.tags)


@dataclass(frozen=True)
class RollbackResult:
    name: str
    from_version: int
    to_version: int
    previous_version: int | None  # what `previous_champion` points at afterwards


@contextmanager
def mlflow_step(uri: str, step: str) -> Iterator[None]:
    """Run MLflow calls of one named step; store failures become RegistryError naming it."""
    from mlflow.exceptions import MlflowException  # heavy (~1 s): see the module docstring

    try:
        yield
    except (MlflowException, *_TRANSPORT_ERRORS) as err:
        raise RegistryError(step, uri, err) from err


def has_code(err: MlflowException, name: str) -> bool:
    """Whether `err` carries MLflow error code `name` (e.g. "RESOURCE_ALREADY_EXISTS")."""
    from mlflow.protos.databricks_pb2 import ErrorCode  # heavy (~1 s): see the module docstring

    code = err.error_code
    return (code if isinstance(code, str) else ErrorCode.Name(code)) == name


def mlflow_client(tracking_uri: str) -> MlflowClient:
    """A client whose registry is the tracking store (sqlite file or server), no global state."""
    from mlflow import MlflowClient  # heavy (~1 s): see the module docstring

    with mlflow_step(tracking_uri, "connect"):
        return MlflowClient(tracking_uri=tracking_uri, registry_uri=tracking_uri)


def ensure_experiment(client: MlflowClient, name: str, artifact_location: str | None = None) -> str:
    """The id of experiment `name`, created with `artifact_location` if missing.

    Pass an artifact location for a sqlite store (else MLflow writes `./mlruns` in the current
    directory); leave it None against a server with `--artifacts-destination`.
    """
    from mlflow.exceptions import MlflowException  # heavy (~1 s): see the module docstring

    existing = client.get_experiment_by_name(name)
    if existing is not None:
        return existing.experiment_id
    try:
        return client.create_experiment(name, artifact_location=artifact_location)
    except MlflowException as err:
        if not has_code(err, "RESOURCE_ALREADY_EXISTS"):  # a concurrent creator won the race
            raise
        return client.get_experiment_by_name(name).experiment_id


def find_or_create_run(
    client: MlflowClient,
    experiment_id: str,
    key_tags: Mapping[str, str],
    run_name: str,
    *,
    newest: bool = True,
    extra_tags: Mapping[str, str] | None = None,
) -> str:
    """The run of `experiment_id` carrying every tag of `key_tags` (the newest, or with
    `newest=False` the oldest, should there be several), else a new one tagged with `key_tags` and
    `extra_tags`. Tag values go into a filter string: callers pass plain characters only."""
    found = client.search_runs(
        [experiment_id],
        " and ".join(f"tags.{key} = '{value}'" for key, value in key_tags.items()),
        order_by=[f"attributes.start_time {'DESC' if newest else 'ASC'}"],
        max_results=1,
    )
    if found:
        return found[0].info.run_id
    return client.create_run(experiment_id, tags={**key_tags, **(extra_tags or {})}, run_name=run_name).info.run_id


def check_model_dir(model_dir: str | Path) -> Path:
    """Refuse anything but a folder of safetensors weights plus tokenizer files (no pickles)."""
    path = Path(model_dir)
    if not path.is_dir():
        raise ModelDirError(path, "not_a_directory", "the model must be a folder")
    files = [p for p in path.rglob("*") if p.is_file()]
    pickled = [p.name for p in files if p.suffix in PICKLE_SUFFIXES]
    if pickled:
        raise ModelDirError(path, "pickled_weights", f"pickle-based files are not registered: {pickled}")
    if not any(p.suffix == ".safetensors" for p in files):
        raise ModelDirError(path, "no_safetensors", "no *.safetensors weights")
    if not any(p.name in TOKENIZER_FILES for p in files):
        raise ModelDirError(path, "no_tokenizer", f"none of {TOKENIZER_FILES}")
    return path


@contextmanager
def staged_model(path: Path, expected: str | None, uri: str) -> Iterator[tuple[Path, str]]:
    """A copy of the model folder and its digest, for upload: the bytes digested are the bytes uploaded,
    whatever happens to `path` meanwhile. With `expected`, a copy of another digest is a
    ModelDigestError and nothing is uploaded. The copy sits beside the folder where that is
    writable (same volume, so a multi-gigabyte model does not fill a small /tmp; a read-only
    checkpoint mount gets the system's temporary folder) and is removed afterwards."""
    beside = path.parent if os.access(path.parent, os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix=f".{path.name}-staged-", dir=beside) as tmp:
        copy = Path(tmp) / path.name
        shutil.copytree(path, copy)
        actual = model_digest(copy)
        if expected is not None and actual != expected:
            raise _changed(uri, path, actual, expected)
        yield copy, actual


def _changed(uri: str, model_dir: str | Path, actual: str, expected: str) -> ModelDigestError:
    return ModelDigestError(
        "model folder changed since the decision",
        uri,
        f"{model_dir} has {MODEL_DIGEST_KEY} {actual}, the decision evaluated {expected}; nothing registered "
        "(re-run the week to evaluate the folder as it is now)",
    )


def _recorded_digest(uri: str, model_dir: str | Path, week: str, lineage: ChampionLineage) -> str:
    expected = lineage.model_digest
    if not expected:
        raise ModelDigestError(
            "no model digest",
            uri,
            f"week {week}'s decision records no {MODEL_DIGEST_KEY}, so nothing ties {model_dir} to the weights "
            "that were evaluated; re-run the week",
        )
    return str(expected)


def check_decision_digest(tracking_uri: str, model_dir: str | Path, week: str, lineage: ChampionLineage) -> None:
    """Refuse (ModelDigestError) a model folder whose digest is not the one the week's decision
    recorded, before anything is written (an approval checks this before recording itself;
    registration checks it again on the copy it uploads)."""
    expected = _recorded_digest(tracking_uri, model_dir, week, lineage)
    actual = model_digest(check_model_dir(model_dir))
    if actual != expected:
        raise _changed(tracking_uri, model_dir, actual, expected)


def _check_names(week: str, name: str) -> None:
    """Both end up quoted inside MLflow filter strings, so only plain characters are accepted."""
    for label, value in (("week", week), ("model name", name)):
        if not _WEEK_RE.fullmatch(value):
            raise ValueError(f"{label} {value!r} must be 1-64 of [A-Za-z0-9_.:-]")


def _version_tags(week: str, lineage: ChampionLineage, report: GateReport) -> dict[str, str]:
    tags = lineage.to_tags()
    tags.update(
        {
            WEEK_TAG: week,
            "gate_decision": report.decision,
            "gate_report_digest": report.digest(),
            "baseline_kind": report.baseline_kind,
        }
    )
    if report.approved_by:
        tags["approved_by"] = report.approved_by
    return tags


def _description(week: str, lineage: ChampionLineage, report: GateReport) -> str:
    gates = "; ".join(f"{g.name}={'n/a' if g.value is None else f'{g.value:.4g}'} ({g.verdict})" for g in report.gates)
    approval = f" Approved by {report.approved_by}." if report.approved_by else ""
    return (
        f"GRPO candidate of week {week}, promoted over the {report.baseline_kind}. "
        f"Window {lineage.window_hash or 'unknown'}.{approval} Gates: {gates}."
    )


def _ensure_registered_model(client: MlflowClient, name: str) -> None:
    from mlflow.exceptions import MlflowException  # heavy (~1 s): see the module docstring

    try:
        client.get_registered_model(name)
    except MlflowException as err:
        if not has_code(err, "RESOURCE_DOES_NOT_EXIST"):
            raise
        try:
            client.create_registered_model(name, description="Retail customer-service agent (GRPO, weekly).")
        except MlflowException as race:
            if not has_code(race, "RESOURCE_ALREADY_EXISTS"):
                raise


def _week_versions(client: MlflowClient, name: str, week: str) -> list[int]:
    found = client.search_model_versions(f"name = '{name}' and tags.{WEEK_TAG} = '{week}'")
    return sorted(int(mv.version) for mv in found)


def _registration_run(client: MlflowClient, week: str, artifact_location: str | None) -> str:
    """The run that holds the week's model artifacts when the caller gave none (found by tag)."""
    exp = ensure_experiment(client, DEFAULT_EXPERIMENT, artifact_location)
    runs = client.search_runs([exp], f"tags.retrain_week = '{week}' and tags.retrain_role = 'model'", max_results=1)
    if runs:
        return runs[0].info.run_id
    run = client.create_run(exp, tags={"retrain_week": week, "retrain_role": "model"}, run_name=f"model-{week}")
    client.set_terminated(run.info.run_id)
    return run.info.run_id


def _week_order(a: str, b: str) -> int | None:
    """-1/0/1 comparing two week ids of the same format (ISO week or date), else None."""
    for pattern in (r"\d{4}-W\d{2}", r"\d{4}-\d{2}-\d{2}"):
        if re.fullmatch(pattern, a) and re.fullmatch(pattern, b):
            return (a > b) - (a < b)
    return None


def record_alias_move(
    client: MlflowClient, name: str, alias: str, version: int | None, moved_by: str, uri: str
) -> None:
    """Record that `moved_by` (a person, a command, a sensor) pointed `alias` at `version` (None:
    removed): appended to the registered model's `ALIAS_MOVES_TAG`, a JSON list kept under MLflow's
    tag size by dropping the oldest moves, and, for a version, its `<alias>_set_by` tag. MLflow keeps
    no history of aliases, so without this a rollback or a promotion could not be traced to whoever
    made it."""
    by = _mover(moved_by, uri)
    with mlflow_step(uri, f"record {alias} move"):
        moves = json.loads(client.get_registered_model(name).tags.get(ALIAS_MOVES_TAG) or "[]")
        moves.append(
            {"alias": alias, "version": version, "by": by, "at": datetime.now(UTC).isoformat(timespec="seconds")}
        )
        while len(json.dumps(moves)) > ALIAS_MOVES_MAX_CHARS:
            moves.pop(0)
        client.set_registered_model_tag(name, ALIAS_MOVES_TAG, json.dumps(moves))
        if version is not None:
            client.set_model_version_tag(name, str(version), f"{alias}_set_by", by)


def _mover(moved_by: Any, uri: str) -> str:
    """`moved_by` as recorded (scrubbed, capped); RegistryError when it says nothing, checked before
    any alias moves so that no move goes unrecorded."""
    if not isinstance(moved_by, str) or not moved_by.strip():
        raise RegistryError("set alias", uri, "an alias move needs who or what moved it (moved_by)")
    return scrub_text(moved_by.strip())[:MAX_MOVED_BY_CHARS]


def alias_moves(tracking_uri: str, name: str = DEFAULT_MODEL_NAME) -> list[dict[str, Any]]:
    """The recorded alias moves of `name`, oldest first ([] for a model never moved or not registered)."""
    client = mlflow_client(tracking_uri)
    from mlflow.exceptions import MlflowException  # heavy (~1 s): see the module docstring

    with mlflow_step(tracking_uri, "read alias moves"):
        try:
            return json.loads(client.get_registered_model(name).tags.get(ALIAS_MOVES_TAG) or "[]")
        except MlflowException as err:
            if has_code(err, "RESOURCE_DOES_NOT_EXIST"):
                return []
            raise


def _refuse_stale(client: MlflowClient, name: str, alias: str, holder: int, week: str, uri: str) -> None:
    """StaleCandidateError when `alias` is held by version `holder` of a later week than `week`."""
    with mlflow_step(uri, f"read {alias}"):
        holder_week = client.get_model_version(name, str(holder)).tags.get(WEEK_TAG)
    if holder_week and _week_order(holder_week, week) == 1:
        raise StaleCandidateError(
            "stale candidate", uri, f"{alias} v{holder} is from week {holder_week}, later than {week}"
        )


def _promote(client: MlflowClient, name: str, version: int, week: str, uri: str, moved_by: str) -> None:
    with mlflow_step(uri, "read aliases"):
        mv = client.get_model_version(name, str(version))
        if mv.tags.get(PROMOTED_TAG) == "true":
            return  # done before; never re-point champion at a week that was superseded or rolled back
        current = client.get_registered_model(name).aliases.get(CHAMPION)
    if current is not None and int(current) != version:
        _refuse_stale(client, name, CHAMPION, int(current), week, uri)
        with mlflow_step(uri, f"set alias {PREVIOUS}"):
            client.set_registered_model_alias(name, PREVIOUS, str(current))
            client.set_model_version_tag(name, str(version), REPLACED_TAG, str(current))
        record_alias_move(client, name, PREVIOUS, int(current), moved_by, uri)
        with mlflow_step(uri, f"set alias {CHAMPION}"):
            client.set_registered_model_alias(name, CHAMPION, str(version))
        record_alias_move(client, name, CHAMPION, version, moved_by, uri)
    elif current is None:
        with mlflow_step(uri, f"set alias {CHAMPION}"):
            client.set_registered_model_alias(name, CHAMPION, str(version))
        record_alias_move(client, name, CHAMPION, version, moved_by, uri)
    with mlflow_step(uri, "tag promoted"):
        client.set_model_version_tag(name, str(version), PROMOTED_TAG, "true")


def _set_canary(client: MlflowClient, name: str, version: int, week: str, uri: str, moved_by: str) -> bool:
    """Point `canary` at `version` beside the champion; False (nothing moved) when there is no
    champion to serve beside. A version promoted or dropped before is left as it is, so re-running
    its week changes nothing; a canary already serving is replaced (and marked dropped) by a later
    week's, never by an earlier one's."""
    with mlflow_step(uri, "read aliases"):
        tags = client.get_model_version(name, str(version)).tags
        aliases = {alias: int(v) for alias, v in client.get_registered_model(name).aliases.items()}
    if CHAMPION not in aliases:
        return False
    if (
        tags.get(PROMOTED_TAG) == "true"
        or CANARY_DROPPED_TAG in tags
        or version in (aliases[CHAMPION], aliases.get(CANARY))
    ):
        return True
    _refuse_stale(client, name, CHAMPION, aliases[CHAMPION], week, uri)
    replaced = aliases.get(CANARY)
    if replaced is not None:
        _refuse_stale(client, name, CANARY, replaced, week, uri)
        with mlflow_step(uri, "mark replaced canary"):
            client.set_model_version_tag(
                name, str(replaced), CANARY_DROPPED_TAG, f"replaced by v{version} (week {week})"
            )
    with mlflow_step(uri, f"set alias {CANARY}"):
        client.set_registered_model_alias(name, CANARY, str(version))
    record_alias_move(client, name, CANARY, version, moved_by, uri)
    return True


def _upload(
    client: MlflowClient,
    path: Path,
    expected: str | None,
    run: str | None,
    week: str,
    artifact_location: str | None,
    artifact_path: str,
    uri: str,
) -> tuple[str, str, str]:
    """Log a staged copy of the model folder (`staged_model`: its digest checked against `expected`
    when given) into `run`, else the week's registration run: (run id, artifact source, digest)."""
    with staged_model(path, expected, uri) as (staged, digest), mlflow_step(uri, "log model artifacts"):
        run = run or _registration_run(client, week, artifact_location)
        client.log_artifacts(run, str(staged), artifact_path)
        return run, f"{client.get_run(run).info.artifact_uri.rstrip('/')}/{artifact_path}", digest


def register_candidate(
    tracking_uri: str,
    model_dir: str | Path,
    week: str,
    lineage: ChampionLineage,
    gate_report: GateReport | Mapping[str, Any],
    *,
    moved_by: str,
    name: str = DEFAULT_MODEL_NAME,
    run_id: str | None = None,
    artifact_location: str | None = None,
    serve_as: str = CHAMPION,
) -> int:
    """Register the week's promoted candidate and make it `champion`, or with `serve_as=CANARY` the
    `canary` beside the champion (`champion` still, when there is none); returns the version
    number. `moved_by` says who or what moved the aliases (`record_alias_move`).

    Idempotent per week: a second call returns the same version (finishing alias moves a crash
    interrupted). `run_id` (else `lineage.run_id`) is the run the model folder is logged into;
    without either, a per-week model run is found or created in `retail-agent-weekly`.
    `lineage.model_digest` is the digest of the folder the gates evaluated (the decision
    records it): only a copy of the folder with that digest is uploaded.
    Raises NotPromotableError unless the report's decision is 'promote', ModelDigestError when the
    lineage records no digest or the folder's differs, ModelDirError for a folder that is not
    safetensors + tokenizer, RegistryError (with the step) when MLflow fails.
    """
    report = gate_report if isinstance(gate_report, GateReport) else GateReport.from_dict(gate_report)
    if report.decision != "promote":
        raise NotPromotableError("not promotable", tracking_uri, f"gate decision is {report.decision!r}, not 'promote'")
    if serve_as not in (CHAMPION, CANARY):
        raise ValueError(f"serve_as={serve_as!r}: a candidate serves as {CHAMPION!r} or {CANARY!r}")
    _mover(moved_by, tracking_uri)
    expected = _recorded_digest(tracking_uri, model_dir, week, lineage)
    _check_names(week, name)
    path = check_model_dir(model_dir)
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "find week version"):
        _ensure_registered_model(client, name)
        versions = _week_versions(client, name, week)
    if len(versions) > 1:
        raise RegistryError("find week version", tracking_uri, f"week {week} has several versions {versions}")
    if versions:
        version = versions[0]
    else:
        run, source, _ = _upload(
            client, path, expected, run_id or lineage.run_id, week, artifact_location, MODEL_ARTIFACT_PATH, tracking_uri
        )
        with mlflow_step(tracking_uri, "create model version"):
            mv = client.create_model_version(
                name,
                source,
                run_id=run,
                tags=_version_tags(week, lineage, report),
                description=_description(week, lineage, report),
            )
        version = int(mv.version)
    if serve_as == CHAMPION or not _set_canary(client, name, version, week, tracking_uri, moved_by):
        _promote(client, name, version, week, tracking_uri, moved_by)
    return version


def _base_versions(client: MlflowClient, name: str) -> list:
    return client.search_model_versions(f"name = '{name}' and tags.{ROLE_TAG} = '{BASE_ROLE}'")


def register_base_champion(
    tracking_uri: str,
    model_dir: str | Path,
    week: str,
    lineage: ChampionLineage,
    *,
    moved_by: str,
    name: str = DEFAULT_MODEL_NAME,
    run_id: str | None = None,
    artifact_location: str | None = None,
) -> int | None:
    """Make the base model the first `champion` when the registry has none; its version, else None.
    `moved_by` says who or what moved the alias (`record_alias_move`).

    Week one has no champion to gate against, so the candidate is gated against the base model
    it was trained from. Whatever that decides, the base model is what serves
    until a candidate beats it, so it is registered as the first champion: next week's candidate
    then has a champion to beat, the health sensor a shadow estimate to hold it to (`lineage`
    should carry `shadow_success` and `violation_rate`), and a promoted candidate a
    `previous_champion` to roll back to. It never replaces a champion. Idempotent: a base version
    registered before (say, by a run that crashed before the alias moved) is reused.
    """
    _mover(moved_by, tracking_uri)
    _check_names(week, name)
    path = check_model_dir(model_dir)
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "find base version"):
        _ensure_registered_model(client, name)
        if CHAMPION in (_aliases(client, name, tracking_uri) or {}):
            return None
        found = _base_versions(client, name)
    if found:
        version = min(int(mv.version) for mv in found)
    else:
        tags = lineage.to_tags()
        tags.update({ROLE_TAG: BASE_ROLE, BASE_WEEK_TAG: week})
        # No decision evaluated the base as a candidate: its digest is taken here, on the bytes uploaded.
        run, source, tags[MODEL_DIGEST_KEY] = _upload(
            client, path, None, run_id or lineage.run_id, week, artifact_location, BASE_ARTIFACT_PATH, tracking_uri
        )
        with mlflow_step(tracking_uri, "create model version"):
            mv = client.create_model_version(
                name,
                source,
                run_id=run,
                tags=tags,
                description=f"Base model, first champion (no candidate promoted yet; registered in week {week}).",
            )
        version = int(mv.version)
    _promote(client, name, version, week, tracking_uri, moved_by)
    return version


def find_base_version(tracking_uri: str, name: str = DEFAULT_MODEL_NAME) -> tuple[int, str | None] | None:
    """(version, week it was registered in) of the base model registered as first champion, or None."""
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "find base version"):
        if _aliases(client, name, tracking_uri) is None:
            return None
        found = _base_versions(client, name)
    first = min(found, key=lambda mv: int(mv.version), default=None)
    return None if first is None else (int(first.version), first.tags.get(BASE_WEEK_TAG))


def find_week_version(tracking_uri: str, week: str, name: str = DEFAULT_MODEL_NAME) -> int | None:
    """The version registered for `week`, or None."""
    _check_names(week, name)
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "find week version"):
        versions = _week_versions(client, name, week)
    return versions[0] if versions else None


def _aliases(client: MlflowClient, name: str, uri: str) -> dict[str, str] | None:
    from mlflow.exceptions import MlflowException  # heavy (~1 s): see the module docstring

    with mlflow_step(uri, "read aliases"):
        try:
            return dict(client.get_registered_model(name).aliases)
        except MlflowException as err:
            if has_code(err, "RESOURCE_DOES_NOT_EXIST"):
                return None
            raise


def champion_info(tracking_uri: str, name: str = DEFAULT_MODEL_NAME) -> ChampionInfo | None:
    """The current champion, or None when the model or the alias does not exist yet."""
    return _alias_info(tracking_uri, name, CHAMPION)


def canary_info(tracking_uri: str, name: str = DEFAULT_MODEL_NAME) -> ChampionInfo | None:
    """The version serving as `canary` beside the champion, or None when there is none."""
    return _alias_info(tracking_uri, name, CANARY)


def _alias_info(tracking_uri: str, name: str, alias: str) -> ChampionInfo | None:
    client = mlflow_client(tracking_uri)
    aliases = _aliases(client, name, tracking_uri)
    if not aliases or alias not in aliases:
        return None
    with mlflow_step(tracking_uri, f"read {alias}"):
        mv = client.get_model_version(name, str(aliases[alias]))
    previous = aliases.get(PREVIOUS)
    return ChampionInfo(
        name,
        int(mv.version),
        mv.tags.get(WEEK_TAG),
        mv.source,
        mv.run_id,
        dict(mv.tags),
        None if previous is None else int(previous),
        alias,
    )


def local_champion(
    tracking_uri: str, models_dir: str | Path, champion: ChampionInfo, name: str = DEFAULT_MODEL_NAME
) -> Path:
    """The model folder of `champion` (or of the canary `canary_info` read: any version info)
    under `<models_dir>/<alias>-v<version>`, downloaded once.

    The artifact lands in a subfolder of that folder (its logged name), so the model is the folder
    that holds `config.json`, wherever below it is.
    """
    target = Path(models_dir) / f"{champion.alias}-v{champion.version}"
    if not any(target.rglob("config.json")):
        _download(tracking_uri, champion, target)
    return next(p.parent for p in target.rglob("config.json"))


def download_champion(tracking_uri: str, dst_dir: str | Path, name: str = DEFAULT_MODEL_NAME) -> Path | None:
    """Download the champion's model folder under `dst_dir`; None when there is no champion."""
    info = champion_info(tracking_uri, name)
    return None if info is None else _download(tracking_uri, info, dst_dir)


def _download(tracking_uri: str, info: ChampionInfo, dst_dir: str | Path) -> Path:
    import mlflow.artifacts  # heavy (~1 s): see the module docstring

    with mlflow_step(tracking_uri, f"download {info.alias}"):
        return Path(
            mlflow.artifacts.download_artifacts(
                artifact_uri=info.source, dst_path=str(dst_dir), tracking_uri=tracking_uri
            )
        )


def rollback(tracking_uri: str, name: str = DEFAULT_MODEL_NAME, *, moved_by: str) -> RollbackResult:
    """Make `previous_champion` the champion again; `moved_by` says who or what rolled back.

    Champion moves first (the point of the command), then `previous_champion` moves one step
    further back (to the version the restored one replaced) or is removed, so a second rollback
    goes further back instead of re-promoting the bad version. A crash in between leaves
    champion == previous; re-running finishes the job.
    """
    _mover(moved_by, tracking_uri)
    client = mlflow_client(tracking_uri)
    aliases = _aliases(client, name, tracking_uri) or {}
    if PREVIOUS not in aliases:
        raise NoPreviousChampionError(
            "nothing to roll back to", tracking_uri, f"model {name!r} has no {PREVIOUS} alias"
        )
    target, current = int(aliases[PREVIOUS]), aliases.get(CHAMPION)
    with mlflow_step(tracking_uri, f"set alias {CHAMPION}"):
        moved = current is None or int(current) != target
        if moved:
            client.set_registered_model_alias(name, CHAMPION, str(target))
            if current is not None:
                client.set_model_version_tag(name, str(current), "rolled_back", "true")
    if moved:
        record_alias_move(client, name, CHAMPION, target, moved_by, tracking_uri)
    with mlflow_step(tracking_uri, f"move alias {PREVIOUS}"):
        older = client.get_model_version(name, str(target)).tags.get(REPLACED_TAG)
        if older is not None:
            client.set_registered_model_alias(name, PREVIOUS, older)
        else:
            client.delete_registered_model_alias(name, PREVIOUS)
    record_alias_move(client, name, PREVIOUS, None if older is None else int(older), moved_by, tracking_uri)
    return RollbackResult(
        name, target if current is None else int(current), target, None if older is None else int(older)
    )


def _canary(client: MlflowClient, name: str, uri: str) -> int:
    aliases = _aliases(client, name, uri) or {}
    if CANARY not in aliases:
        raise NoCanaryError("no canary", uri, f"model {name!r} has no {CANARY} alias")
    return int(aliases[CANARY])


def promote_canary(tracking_uri: str, name: str = DEFAULT_MODEL_NAME, *, moved_by: str) -> int:
    """Make the canary the champion (the old champion becomes `previous_champion`) and remove the
    `canary` alias; the version promoted. `moved_by` says who or what decided (`record_alias_move`).

    The moves are `_promote`'s, in its crash-safe order; the canary alias goes last, so a crash
    before leaves champion == canary and re-running finishes (the version is tagged promoted, so
    the champion is not moved twice). Raises NoCanaryError when there is no canary.
    """
    _mover(moved_by, tracking_uri)
    client = mlflow_client(tracking_uri)
    version = _canary(client, name, tracking_uri)
    with mlflow_step(tracking_uri, f"read {CANARY}"):
        week = client.get_model_version(name, str(version)).tags.get(WEEK_TAG) or ""
    _promote(client, name, version, week, tracking_uri, moved_by)
    with mlflow_step(tracking_uri, f"remove alias {CANARY}"):
        client.delete_registered_model_alias(name, CANARY)
    record_alias_move(client, name, CANARY, None, moved_by, tracking_uri)
    return version


def drop_canary(tracking_uri: str, name: str = DEFAULT_MODEL_NAME, *, moved_by: str, reason: str) -> int:
    """Stop serving the canary: tag its version `canary_dropped` with `reason` (so re-running its
    week never makes it canary again), then remove the alias; the version dropped. The champion
    is untouched. Raises NoCanaryError when there is no canary."""
    _mover(moved_by, tracking_uri)
    client = mlflow_client(tracking_uri)
    version = _canary(client, name, tracking_uri)
    with mlflow_step(tracking_uri, f"remove alias {CANARY}"):
        client.set_model_version_tag(name, str(version), CANARY_DROPPED_TAG, scrub_text(reason)[:MAX_MOVED_BY_CHARS])
        client.delete_registered_model_alias(name, CANARY)
    record_alias_move(client, name, CANARY, None, moved_by, tracking_uri)
    return version
