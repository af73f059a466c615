"""The GRPO run's typed result: its JSON round trip, and `grpo_candidate`'s reading of it from a
real Dagster Pipes session (the training process's PipesReporter), not from a file."""

# No `from __future__ import annotations`: Dagster reads the context and resource types from live annotations.
import math
import sys
from pathlib import Path

import dagster as dg
import pytest

from assets.training import pipes_grpo_result
from training.grpo_result import GRPOResult

RESULT = GRPOResult(
    final_step=10,
    model_path="/runs/w/grpo/final",
    train_loss=float("nan"),  # a broken run's loss must arrive as NaN, so the finite_loss check fails
    world_size=2,
    resumed_from="/runs/w/grpo/checkpoint-4",
    resumed_from_step=4,
    seconds=12.5,
    reward_curve=(0.25, 0.5, 1.0),
    zero_std_fraction=0.125,
    metrics={"reward": 1.0, "loss": 0.01},
    level_mix={"requested": {"1": 1.0}, "counts": {"1": 32}},
)


def _same(a: GRPOResult, b: GRPOResult) -> bool:
    """Equal, NaN loss included (NaN != NaN)."""
    return (
        math.isnan(a.train_loss)
        and math.isnan(b.train_loss)
        and a == GRPOResult(**{**vars(b), "train_loss": a.train_loss})
    )


def test_the_result_round_trips_through_its_json_safe_dict():
    sent = RESULT.to_dict()
    assert sent["train_loss"] == "nan" and sent["reward_curve"] == [0.25, 0.5, 1.0]
    # The reporter's own keys (the event name, its time) ride along and are ignored.
    assert _same(GRPOResult.from_dict({**sent, "event": "final", "time": 1.0}), RESULT)
    with pytest.raises(KeyError, match="model_path"):
        GRPOResult.from_dict({"final_step": 1, "train_loss": 0.0})


# The training process's side: what training.grpo.run does at its end, through the Pipes reporter.
_TRAINER = f"""
from assets.pipes_reporter import PipesReporter
from training.grpo_result import GRPOResult
reporter = PipesReporter()
reporter.progress(10, 10, step_seconds=0.5)
reporter.final(GRPOResult.from_dict({RESULT.to_dict()!r}).to_dict())
reporter.close()
"""


@dg.asset
def reads_the_result(context: dg.AssetExecutionContext, pipes_subprocess_client: dg.PipesSubprocessClient):
    invocation = pipes_subprocess_client.run(command=[sys.executable, "-c", _TRAINER], context=context)
    result, reported = pipes_grpo_result(invocation)
    return dg.MaterializeResult(value=result, metadata=reported)


@dg.asset
def reports_nothing(context: dg.AssetExecutionContext, pipes_subprocess_client: dg.PipesSubprocessClient):
    code = "from assets.pipes_reporter import PipesReporter; PipesReporter().close()"
    pipes_grpo_result(pipes_subprocess_client.run(command=[sys.executable, "-c", code], context=context))


def test_the_asset_reads_the_result_the_training_process_reported_through_pipes(tmp_path):
    resources = {"pipes_subprocess_client": dg.PipesSubprocessClient()}
    with dg.DagsterInstance.ephemeral() as instance:
        out = dg.materialize([reads_the_result], resources=resources, instance=instance)
        assert _same(out.output_for_node("reads_the_result"), RESULT)
        # What Pipes reported as the materialization's metadata is kept, not dropped.
        metadata = out.get_asset_materialization_events()[0].materialization.metadata
        assert metadata["final_step"].value == 10 and metadata["metric/reward"].value == 1.0

        missing = dg.materialize([reports_nothing], resources=resources, instance=instance, raise_on_error=False)
        assert not missing.success
        failure = next(e for e in missing.all_events if e.is_step_failure)
        assert "without reporting its result" in str(failure.step_failure_data.error)


def test_the_training_assets_read_no_result_file():
    import assets.training

    assert "result.json" not in Path(assets.training.__file__).read_text()


def test_the_reported_result_becomes_the_candidate_and_its_checks(tmp_path):
    """What grpo_candidate does with the result the training process reported: its checks read the
    loss, the weights and the reward curve, and the candidate carries the run's curve and weights."""
    from dataclasses import replace

    from assets.handoffs import GRPOCandidate
    from assets.training import _candidate_metadata, _training_checks

    base, final = tmp_path / "base", tmp_path / "final"
    for folder, weights in ((base, b"before"), (final, b"after")):
        folder.mkdir()
        (folder / "model.safetensors").write_bytes(weights)
    result = replace(RESULT, model_path=str(final))
    checks = {c.check_name: c for c in _training_checks(result, str(base))}
    assert {name: c.passed for name, c in checks.items()} == {
        "finite_loss": False,  # RESULT's loss is NaN
        "weights_changed": True,
        "reward_curve_logged": True,
    }
    candidate = GRPOCandidate.trained(result, "run-1", {"completed": 5.0})
    assert (candidate.path, candidate.mlflow_run_id, candidate.final_step) == (str(final), "run-1", 10)
    assert (candidate.reward_curve, candidate.reward_weights) == ([0.25, 0.5, 1.0], {"completed": 5.0})
    metadata = _candidate_metadata(result)
    assert (metadata["reward_first"], metadata["reward_last"], metadata["resumed_from_step"]) == (0.25, 1.0, 4)
