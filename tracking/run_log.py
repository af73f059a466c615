"""The week's MLflow run: every number and artifact behind a promotion decision, kept even on reject.

Metric names are stable so weeks compare side by side in the MLflow UI:
`{eval_set}/{policy}/{metric}` (e.g. `calibration/candidate/success`, `shadow/champion/pass_hat_2`),
`failure_modes/{policy}/{mode}`, `tools/{policy}/{tool}`, `gate/{gate}/value`,
`gate/{gate}/passed` and each part of a gate's statistic as `gate/{gate}/{part}` (e.g.
`gate/calibration_improvement/ci_low`, `gate/errored_trials/errored_ValueError`), and
`train/reward` stepped over the training curve. Errored trials are also in each set's summary
(`calibration/candidate/errored_trials`, `calibration/candidate/errored_<Class>`). The baseline is always
called `champion` (the tag `baseline_kind` says when it was the base model). `WeekRun.weekly`
metrics (the week's reward alignment, `alignment/auc`, ...) are logged at step `week_step(week)`,
stamped with the week's end, so MLflow's charts over runs lay them out week by week.

Dataset inputs: the window, and every `WeekRun.datasets` entry (the week's calibration version),
each with its content hash as digest (MLflow keeps 32 characters; the full hash is in the source).

Artifacts: `gate_report.json`, `validation/results.json`, `samples/trajectories.json` (scrubbed
at any depth, and checked with `dataplane.scrub.find_pii`, as are params, tags and the validation
results: a leak raises instead of being logged) and four
plots under `plots/`. Plots use matplotlib's object API (`Figure`), so no pyplot global state and
no display backend is touched. mlflow is imported inside the functions that log, as in
`tracking.registry` (it takes about a second to import).
"""

from __future__ import annotations

import hashlib
import json
import re
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
from matplotlib.figure import Figure

from dataplane.pii_records import suspect_texts
from dataplane.scrub import find_pii, scrub_text
from evaluation.decision import PromotionDecision, WeekEvidence
from evaluation.gates import GateReport
from evaluation.reports import CalibrationReport
from evaluation.week_alignment import alignment_series
from tracking.registry import DEFAULT_EXPERIMENT, ensure_experiment, find_or_create_run, mlflow_client, mlflow_step

if TYPE_CHECKING:
    from mlflow.entities import DatasetInput

_KEY_PART = re.compile(r"[A-Za-z0-9_.-]+")
MAX_METRIC_KEY = 250  # MLflow refuses a longer metric name, and with it the whole batch it came in
# A part made from free text (a producer's persona) longer than this is cut, and a digest of the
# whole text keeps two long texts that share a beginning apart.
_MAX_TEXT_PART, _DIGEST_CHARS = 64, 8
WEEK_TAG, ROLE_TAG, DAGSTER_RUN_TAG = "retrain_week", "retrain_role", "dagster_run_id"


class PIILeakError(ValueError):
    """Something to be logged still holds PII after scrubbing; `.row` and `.column` locate it.

    `.row` is None for an artifact other than the samples table (`.column` then names it)."""

    def __init__(self, row: int | None, column: str, kinds: list[str]):
        where = f"sample row {row}, column {column!r}" if row is not None else repr(column)
        super().__init__(f"{where} contains PII of kinds {kinds}; not logged")
        self.row, self.column, self.kinds = row, column, kinds


@dataclass(frozen=True)
class DatasetRef:
    """A dataset the week's run read, logged as an MLflow dataset input: `digest` is its content
    hash, `source` where it lives, `frame` what MLflow profiles (its rows), `context` its role."""

    name: str
    digest: str
    source: Mapping[str, Any]
    frame: pd.DataFrame
    context: str


@dataclass
class WeekRun:
    """What one weekly run logs. Nested mappings are `{set: {policy: {metric: value}}}` for
    `metrics` and `{policy: {name: share}}` for failure modes and tool distributions."""

    week: str
    window_hash: str
    window_frame: pd.DataFrame
    gate_report: GateReport
    params: Mapping[str, Any] = field(default_factory=dict)
    metrics: Mapping[str, Mapping[str, Mapping[str, float]]] = field(default_factory=dict)
    failure_modes: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    tool_distribution: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    reward_curve: Sequence[float] = ()
    samples: Sequence[Mapping[str, Any]] = ()
    validation: Mapping[str, Any] | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    datasets: Sequence[DatasetRef] = ()
    weekly: Mapping[str, float] = field(default_factory=dict)


# Weeks are numbered from the Monday 1970-01-05, so a week's step is the same in every run and store.
_FIRST_MONDAY = date(1970, 1, 5)


def week_monday(week: str) -> date:
    """The Monday of `week`, given as a partition key (YYYY-MM-DD, any day of it) or ISO (YYYY-Www)."""
    if "-W" in week:
        year, number = week.split("-W")
        return date.fromisocalendar(int(year), int(number), 1)
    day = date.fromisoformat(week)
    return day - timedelta(days=day.weekday())


def week_step(week: str) -> int:
    """The MLflow step of `week`: consecutive weeks are consecutive steps."""
    return (week_monday(week) - _FIRST_MONDAY).days // 7


def metric_part(text: str) -> str:
    """`text` as one metric name part: each run of characters `metric_key` refuses becomes `_`
    ("polite forthcoming" -> "polite_forthcoming"); "" becomes "unnamed". Over `_MAX_TEXT_PART`
    characters, its beginning and a digest of the whole text, so the part stays short and two
    texts never share it."""
    part = "_".join(_KEY_PART.findall(text)) or "unnamed"
    if len(part) <= _MAX_TEXT_PART:
        return part
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_DIGEST_CHARS]
    return f"{part[: _MAX_TEXT_PART - _DIGEST_CHARS - 1]}-{digest}"


def metric_key(*parts: str) -> str:
    """`a/b/c` from name parts, refusing characters that would make names unstable across stores
    and names longer than MLflow keeps (`MAX_METRIC_KEY`)."""
    for part in parts:
        if not _KEY_PART.fullmatch(part):
            raise ValueError(f"metric name part {part!r} must be [A-Za-z0-9_.-]+")
    key = "/".join(parts)
    if len(key) > MAX_METRIC_KEY:
        raise ValueError(f"metric name {key[:60]!r}... has {len(key)} characters, over MLflow's {MAX_METRIC_KEY}")
    return key


def flatten_metrics(run: WeekRun) -> dict[str, float]:
    """Every scalar metric of the run under its stable name."""
    out: dict[str, float] = {}
    for eval_set, policies in run.metrics.items():
        for policy, values in policies.items():
            for name, value in values.items():
                out[metric_key(eval_set, policy, name)] = float(value)
    for prefix, table in (("failure_modes", run.failure_modes), ("tools", run.tool_distribution)):
        for policy, shares in table.items():
            for name, share in shares.items():
                out[metric_key(prefix, policy, name)] = float(share)
    for gate in run.gate_report.gates:
        if gate.value is not None:
            out[metric_key("gate", gate.name, "value")] = gate.value
        out[metric_key("gate", gate.name, "passed")] = 1.0 if gate.verdict == "pass" else 0.0
        # The statistic's parts: the clustered CI's bounds, won/lost customers, errored trials by class.
        for name, value in gate.extra.items():
            out[metric_key("gate", gate.name, name)] = float(value)
    return out


def _flat_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flat_params(value, f"{name}."))
        else:
            out[name] = json.dumps(value) if isinstance(value, (list, tuple)) else str(value)
    return out


def scrubbed_samples(samples: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Samples as a table with all their text scrubbed; raises PIILeakError if any PII survives.

    A cell may be nested (a trajectory's messages with tool-call arguments and tool results, a
    scenario with its known_info): every string and key in it, at any depth, is scrubbed, and
    integers that read as a card number become the masked text.
    """
    rows = []
    for i, sample in enumerate(samples):
        row = {}
        for column, value in sample.items():
            clean = _scrub_cell(value)
            _refuse_pii(clean, i, column)
            row[column] = clean
        rows.append(row)
    return pd.DataFrame(rows)


def _scrub_cell(value: Any) -> Any:
    if isinstance(value, str):
        return scrub_text(value)
    if isinstance(value, Mapping):
        return {_scrub_cell(k): _scrub_cell(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scrub_cell(v) for v in value]
    if type(value) is int:
        text = str(value)
        clean = scrub_text(text)
        return value if clean == text else clean
    return value


def _refuse_pii(value: Any, row: int | None, column: str) -> None:
    """PIILeakError if any string, key or integer in `value`, at any depth, still reads as PII."""
    kinds = [kind for _path, text in suspect_texts([value]) for kind in find_pii(text)]
    if kinds:
        raise PIILeakError(row, column, kinds)


def masked(value: Any, where: str) -> Any:
    """`value` scrubbed at any depth as the run's samples are; PIILeakError naming `where` if any PII
    survives. Whatever else goes to MLflow (the conversations' traces, `tracking.traces`) passes here."""
    clean = _scrub_cell(value)
    _refuse_pii(clean, None, where)
    return clean


def bar_figure(title: str, table: Mapping[str, Mapping[str, float]], ylabel: str) -> Figure:
    fig = Figure(figsize=(9, 4.5), layout="constrained")
    ax = fig.subplots()
    names = sorted({n for shares in table.values() for n in shares})
    width = 0.8 / max(1, len(table))
    for j, (policy, shares) in enumerate(sorted(table.items())):
        ax.bar([i + j * width for i in range(len(names))], [shares.get(n, 0.0) for n in names], width, label=policy)
    ax.set_xticks([i + width * (len(table) - 1) / 2 for i in range(len(names))], names, rotation=45, ha="right")
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.legend()
    return fig


def _pass_hat_k_figure(metrics: Mapping[str, Mapping[str, Mapping[str, float]]]) -> Figure | None:
    lines = {}
    for eval_set, policies in metrics.items():
        for policy, values in policies.items():
            ks = sorted((int(k.removeprefix("pass_hat_")), v) for k, v in values.items() if k.startswith("pass_hat_"))
            if ks:
                lines[f"{eval_set}/{policy}"] = ks
    if not lines:
        return None
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    for label, points in sorted(lines.items()):
        ax.plot([k for k, _ in points], [v for _, v in points], marker="o", label=label)
    ax.set_xlabel("k")
    ax.set_ylabel("pass^k")
    ax.set_ylim(0, 1)
    ax.set_title("pass^k: all k trials succeed")
    ax.legend()
    return fig


def _reward_figure(curve: Sequence[float]) -> Figure:
    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    ax.plot(range(len(curve)), list(curve))
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward")
    ax.set_title("GRPO training reward")
    return fig


def figures(run: WeekRun) -> dict[str, Figure]:
    """The plots this run can draw from what it was given, by artifact path."""
    out: dict[str, Figure] = {}
    if run.failure_modes:
        out["plots/failure_modes.png"] = bar_figure("Failure modes: candidate vs champion", run.failure_modes, "share")
    pass_k = _pass_hat_k_figure(run.metrics)
    if pass_k is not None:
        out["plots/pass_hat_k.png"] = pass_k
    if run.tool_distribution:
        out["plots/tool_distribution.png"] = bar_figure(
            "Tool-call distribution", run.tool_distribution, "share of calls"
        )
    if run.reward_curve:
        out["plots/training_reward.png"] = _reward_figure(run.reward_curve)
    return out


def _window_ref(run: WeekRun) -> DatasetRef:
    source = {"store": "interactions.duckdb", "table": "windows", "week": run.week, "window_hash": run.window_hash}
    return DatasetRef(f"window-{run.week}", run.window_hash, source, run.window_frame, "window")


def _dataset_input(ref: DatasetRef) -> DatasetInput:
    # mlflow is heavy (~1 s to import): imported here, not by every module that imports this one.
    import mlflow.data
    from mlflow.data.code_dataset_source import CodeDatasetSource
    from mlflow.entities import DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    # The registry's dataset digest column holds 36 characters; the full hash is in the source.
    with warnings.catch_warnings():
        # Schema inference hints about integer columns concern model signatures, not a dataset.
        warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer", category=UserWarning)
        dataset = mlflow.data.from_pandas(
            ref.frame, source=CodeDatasetSource(dict(ref.source)), name=ref.name, digest=ref.digest[:32]
        )._to_mlflow_entity()
    return DatasetInput(dataset, tags=[InputTag(MLFLOW_DATASET_CONTEXT, ref.context)])


def open_week_run(
    tracking_uri: str,
    week: str,
    dagster_run_id: str,
    *,
    experiment_name: str = DEFAULT_EXPERIMENT,
    artifact_location: str | None = None,
    tags: Mapping[str, str] | None = None,
) -> str:
    """The MLflow run of one Dagster run of `week`: found by its tags, else created (RUNNING).

    Training logs its curve into it and the evaluation assets finish it with `log_week_run`, so a
    week's training and evaluation numbers sit in one run; a retry of the same Dagster run finds
    the same MLflow run instead of starting another.
    """
    metric_key(week)
    metric_key(dagster_run_id)
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "open week run"):
        exp = ensure_experiment(client, experiment_name, artifact_location)
        return find_or_create_run(
            client,
            exp,
            {WEEK_TAG: week, DAGSTER_RUN_TAG: dagster_run_id},
            f"week-{week}",
            extra_tags={ROLE_TAG: "evaluation", **(tags or {})},
        )


def _weekly_metrics(run: WeekRun) -> list:
    """`run.weekly` at the week's step, stamped with the week's end (MLflow's time axis then reads
    as the weeks too)."""
    from mlflow.entities import Metric  # heavy (~1 s): see `_dataset_input`

    if not run.weekly:
        return []
    step = week_step(run.week)
    end = datetime.combine(week_monday(run.week) + timedelta(days=7), datetime.min.time(), tzinfo=UTC)
    stamp = int(end.timestamp() * 1000)
    return [Metric(metric_key(*name.split("/")), float(v), stamp, step) for name, v in sorted(run.weekly.items())]


def log_week_run(
    tracking_uri: str,
    run: WeekRun,
    *,
    experiment_name: str = DEFAULT_EXPERIMENT,
    artifact_location: str | None = None,
    run_id: str | None = None,
) -> str:
    """Log the week's run and return its id. The run ends FAILED (and the error propagates) if
    anything cannot be logged, so a half-logged run is never mistaken for a complete one.

    With `run_id` (from `open_week_run`) the numbers go into that run; otherwise a new one."""
    from mlflow.entities import Metric, Param, RunStatus  # heavy (~1 s): see `_dataset_input`

    samples = scrubbed_samples(run.samples)  # before anything is written
    # Params and validation results carry settings, numbers and ids, but any text in them is
    # checked all the same (tags are hashes and run ids, where a digit run is no card).
    for name, artifact in (("params", run.params), ("validation/results.json", run.validation)):
        _refuse_pii(artifact, None, name)
    client = mlflow_client(tracking_uri)
    tags = {
        WEEK_TAG: run.week,
        ROLE_TAG: "evaluation",
        "window_hash": run.window_hash,
        "gate_decision": run.gate_report.decision,
        "baseline_kind": run.gate_report.baseline_kind,
        "gate_report_digest": run.gate_report.digest(),
        **run.tags,
    }
    with mlflow_step(tracking_uri, "create run"):
        if run_id is None:
            exp = ensure_experiment(client, experiment_name, artifact_location)
            run_id = client.create_run(exp, tags=tags, run_name=f"week-{run.week}").info.run_id
        else:
            for key, value in tags.items():
                client.set_tag(run_id, key, value)
    try:
        with mlflow_step(tracking_uri, "log run"):
            params = [Param(k, v[:6000]) for k, v in sorted(_flat_params(run.params).items())]
            now = int(time.time() * 1000)
            metrics = [Metric(k, v, now, 0) for k, v in sorted(flatten_metrics(run).items())]
            metrics += [Metric("train/reward", float(r), now, i) for i, r in enumerate(run.reward_curve)]
            metrics += _weekly_metrics(run)
            for start in range(0, max(len(params), len(metrics)), 100):
                client.log_batch(run_id, metrics=metrics[start : start + 100], params=params[start : start + 100])
            client.log_inputs(run_id, datasets=[_dataset_input(ref) for ref in (_window_ref(run), *run.datasets)])
            client.log_dict(run_id, run.gate_report.to_dict(), "gate_report.json")
            if run.validation is not None:
                client.log_dict(run_id, dict(run.validation), "validation/results.json")
            if len(samples):
                client.log_table(run_id, samples, "samples/trajectories.json")
            for path, fig in figures(run).items():
                client.log_figure(run_id, fig, path)
    except BaseException:
        client.set_terminated(run_id, RunStatus.to_string(RunStatus.FAILED))
        raise
    client.set_terminated(run_id)
    return run_id


def log_training_inputs(
    tracking_uri: str, run_id: str, metrics: Mapping[str, float], documents: Mapping[str, Mapping[str, Any]]
) -> None:
    """What the week's update trained on, into the week's run before training starts: `metrics`
    (`a/b` names, e.g. `sft/episodes`, `mix/intent/cancel_order`) at step 0 and `documents` as JSON
    artifacts by file name. Logged from the asset, so a skipped step is on record too."""
    from mlflow.entities import Metric  # heavy (~1 s): see `_dataset_input`

    now = int(time.time() * 1000)
    entries = [Metric(metric_key(*name.split("/")), float(v), now, 0) for name, v in sorted(metrics.items())]
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "log training inputs"):
        if entries:
            client.log_batch(run_id, metrics=entries)
        for name, document in documents.items():
            client.log_dict(run_id, dict(document), name)


def record_approval(tracking_uri: str, run_id: str, held: GateReport, approved: GateReport) -> None:
    """Put a person's approval on the week's run: `gate_report.json` becomes the approved report (the
    verdicts the registered version was promoted on, with who approved), the report as the gates
    wrote it is kept beside it as `gate_report_held.json`, and the run's decision tags follow."""
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "record approval"):
        client.log_dict(run_id, held.to_dict(), "gate_report_held.json")
        client.log_dict(run_id, approved.to_dict(), "gate_report.json")
        client.set_tag(run_id, "gate_decision", approved.decision)
        client.set_tag(run_id, "gate_report_digest", approved.digest())
        client.set_tag(run_id, "approved_by", approved.approved_by or "")


def find_week_runs(tracking_uri: str, week: str, experiment_name: str = DEFAULT_EXPERIMENT) -> list[str]:
    """Finished evaluation run ids of `week`, newest first (e.g. for `retrain approve`)."""
    metric_key(week)  # the week is quoted into a filter string
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "search runs"):
        exp = client.get_experiment_by_name(experiment_name)
        if exp is None:
            return []
        runs = client.search_runs(
            [exp.experiment_id],
            f"tags.{WEEK_TAG} = '{week}' and tags.{ROLE_TAG} = 'evaluation' and attributes.status = 'FINISHED'",
            order_by=["attributes.start_time DESC"],
        )
    return [r.info.run_id for r in runs]


def load_gate_report(tracking_uri: str, run_id: str) -> GateReport:
    """The gate report a week run logged."""
    client = mlflow_client(tracking_uri)
    with tempfile.TemporaryDirectory() as tmp, mlflow_step(tracking_uri, "load gate report"):
        path = client.download_artifacts(run_id, "gate_report.json", tmp)
        data = json.loads(Path(path).read_text())
    return GateReport.from_dict(data)


def _tool_shares(calibration: CalibrationReport) -> dict:
    tools = {}
    for policy, side in (("candidate", calibration.pair.candidate), ("champion", calibration.pair.baseline)):
        tools[policy] = {t: n / max(1, sum(side.tool_counts.values())) for t, n in side.tool_counts.items()}
    return tools


def _calibration_input(calibration: CalibrationReport) -> DatasetRef:
    """The week's calibration version as an MLflow dataset input, its set hash as the digest."""
    source = {
        "store": "interactions.duckdb",
        "table": "calibration_sets",
        "version": calibration.version,
        "set_hash": calibration.set_hash,
    }
    frame = pd.DataFrame({"interaction_id": list(calibration.interaction_ids)}, dtype="string")
    return DatasetRef(f"calibration-{calibration.version}", calibration.set_hash, source, frame, "calibration")


def decision_week_run(
    decision: PromotionDecision, evidence: WeekEvidence, *, dagster_run_id: str, dagster_run_url: str
) -> WeekRun:
    """What the week's MLflow run records of its decision (`log_week_run` writes it into
    `decision.mlflow_run_id`, the run training opened for the week)."""
    calibration, report, rises = evidence.calibration, decision.report, decision.failure_mode_rises
    samples = [
        {"policy": policy, **s}
        for policy, side in (("candidate", calibration.pair.candidate), ("baseline", calibration.pair.baseline))
        for s in side.samples
    ]
    return WeekRun(
        week=evidence.week,
        window_hash=evidence.window.content_hash,
        window_frame=pd.DataFrame({"rows": [evidence.window.rows]}),
        gate_report=report,
        params={
            "candidate_path": evidence.candidate_path,
            "baseline_path": evidence.base_model,
            "baseline_source": evidence.baseline_kind,
            "window_rows": evidence.window.rows,
        },
        # The baseline is logged as `champion` (this module's naming); rises as their own metrics.
        metrics={
            **{s: {"candidate": v["candidate"], "champion": v["baseline"]} for s, v in decision.metrics.items()},
            "failure_mode_rise": {"candidate": {j.mode: j.jump for j in rises}},
        },
        tool_distribution=_tool_shares(calibration),
        failure_modes={"candidate": decision.failure_modes, "champion": calibration.pair.baseline.failure_modes},
        reward_curve=list(evidence.reward_curve),
        samples=samples,
        validation={"success": evidence.validation_success},
        datasets=[_calibration_input(calibration)],
        # The week's reward alignment as a time series: one step per week across the weekly runs.
        weekly={f"alignment/{k}": v for k, v in alignment_series(calibration.alignment).items()},
        tags={
            "calibration_version": calibration.version,
            "alignment_labels_week": str(calibration.alignment.get("labels_week", "")),
            "dagster_run_id": dagster_run_id,
            "dagster_run_url": dagster_run_url,
            "gate_reason": report.reason[:4000],
            "failure_mode_rises": ", ".join(j.mode for j in rises) or "none",
        },
    )
