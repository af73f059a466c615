"""The promotion path in Dagster without models: the real promotion and registration assets fed by
stand-in upstream assets that hand over scripted evaluation reports.

The stand-ins carry the real asset keys, so `promotion_gate`, `first_champion`, `registered_model`
and its check run exactly as in `weekly_retrain`, on a real sqlite MLflow store and a real Dagster
instance; only the rollouts are replaced by the scripted policies of `tests.helpers_gates`.
"""

# No `from __future__ import annotations`: Dagster reads the stand-ins' context and resource types live.

from pathlib import Path

import dagster as dg
import numpy as np
from safetensors.numpy import save_file

from assets.handoffs import GRPOCandidate, PolicyBase, ValidatedWindow
from assets.partitions import weekly_partitions
from assets.promotion import promotion_gate
from assets.registration import first_champion, registered_model, serves_this_version
from assets.resources import HomeResource, MLflowTracking
from evaluation.gate_floors import FLOORS_ENV
from evaluation.reports import CalibrationReport, PairReport, PolicyReport, ShadowReport
from evaluation.stats import mcnemar_exact, paired_bootstrap_ci, roc_auc
from orchestration import environment
from tests.helpers_gates import POLICIES, human_labels, make_tasks
from tracking.run_log import open_week_run


def fake_model(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    save_file({"w": np.arange(4, dtype=np.float32)}, str(path / "model.safetensors"))
    (path / "tokenizer.json").write_text('{"version": "1.0"}')
    return path


def _policy_report(name: str, tasks) -> PolicyReport:
    done = [POLICIES[name](t) for t in tasks]
    counts: dict[str, int] = {}
    for o in done:
        for tool in o.tools:
            counts[tool] = counts.get(tool, 0) + 1
    success = [o.success for o in done]
    return PolicyReport(
        keys=[f"{t.task_id}#0" for t in tasks],
        success=success,
        rewards=[o.reward for o in done],
        violations=sum(o.violated for o in done),
        trials=len(done),
        tool_counts=counts,
        summary={"success_rate": sum(success) / len(success)},
        failure_modes={"gave_up": 1 - sum(success) / len(success)},
        samples=[],
    )


def pair_report(candidate: str, baseline: str, tasks) -> PairReport:
    cand, base = _policy_report(candidate, tasks), _policy_report(baseline, tasks)
    return PairReport(
        cand, base, mcnemar_exact(cand.success, base.success), paired_bootstrap_ci(cand.success, base.success), 0.0
    )


def stand_ins(candidate: str, model_dir: Path, base_dir: Path, reward_weights: dict | None = None) -> list:
    """Upstream assets under their real keys: a valid window, the base model as baseline, and
    `candidate` (a scripted policy) evaluated against the champion-like baseline."""
    calibration, shadow = make_tasks("cal", 200), make_tasks("shadow", 400)
    proxy, human = human_labels(calibration)
    part = {"partitions_def": weekly_partitions}

    @dg.asset(name="interaction_window", **part)
    def window(context: dg.AssetExecutionContext):
        return ValidatedWindow(
            week=context.partition_key,
            week_end=context.partition_key,
            rows=600,
            ended_at_min=None,
            ended_at_max=None,
            content_hash="ab" * 32,
            outcome_mix={},
            intent_mix={},
            validation_success=True,
            validation_path="",
        )

    @dg.asset(name="policy_base", **part)
    def base():
        return PolicyBase(str(base_dir), "base_model")

    @dg.asset(name="grpo_candidate", **part)
    def trained(context: dg.AssetExecutionContext, home: HomeResource, mlflow: MLflowTracking):
        h = home.home
        run = open_week_run(
            mlflow.uri(h), context.partition_key, context.run_id, artifact_location=h.mlflow_artifacts.as_uri()
        )
        return GRPOCandidate(
            str(model_dir),
            run,
            final_step=4,
            reward_curve=[1.0, 2.0, 3.0, 4.0],
            reward_weights=dict(reward_weights or {}),
        )

    @dg.asset(name="calibration_report", **part)
    def cal(context: dg.AssetExecutionContext):
        # The week's alignment summary as calibration_report hands it on: which week's labels, the score.
        alignment = {
            "labels_week": context.partition_key,
            "labels": len(human),
            "raters": 2,
            "disagreements": 0,
            "n": len(human),
            "positives": sum(human),
            "auc": roc_auc(proxy, human),
        }
        ids = tuple(t.task_id for t in calibration)
        return CalibrationReport(
            pair_report(candidate, "champion", calibration), "v1", "cd" * 32, 200, proxy, human, alignment, {}, ids
        )

    @dg.asset(name="shadow_report", **part)
    def sha(context: dg.AssetExecutionContext):
        return ShadowReport(pair_report(candidate, "champion", shadow), context.partition_key, "ef" * 32, 400)

    return [window, base, trained, cal, sha]


def run_promotion(
    home,
    instance,
    week: str,
    candidate: str,
    tmp_path: Path,
    gate_config: dict | None = None,
    base_dir: Path | None = None,
):
    """Materialize the promotion path for `week` with `candidate`'s scripted evaluation."""
    base = base_dir or fake_model(tmp_path / "base")
    assets = [
        *stand_ins(candidate, fake_model(tmp_path / f"cand-{week}"), base),
        promotion_gate,
        first_champion,
        registered_model,
        serves_this_version,
    ]
    config = {"ops": {"promotion_gate": {"config": gate_config}}} if gate_config else None
    return dg.materialize(
        assets,
        partition_key=week,
        instance=instance,
        run_config=config,
        # The deployment's floors file reaches the asset as production's resources carry it: read
        # from the environment by `orchestration.environment` (the tests set RETRAIN_GATE_FLOORS).
        resources={
            "home": HomeResource(root=str(home.root), gate_floors=environment.value(FLOORS_ENV)),
            "mlflow": MLflowTracking(),
        },
        raise_on_error=False,
    )
