"""GRPO update of the policy in the retail environment: `python -m training.grpo --config FILE`.

The same entry point runs as a plain subprocess (Dagster Pipes locally) and under `accelerate
launch` (one process per device). A retry resumes from the last complete checkpoint in the output
folder by itself, so a killed run loses at most `save_steps` steps. At the end the main process
saves the model (safetensors + tokenizer + generation config) under `<output_dir>/final`, reports
the run's `GRPOResult` as the reporter's final event (Dagster reads it from Pipes) and writes it to
`<output_dir>/result.json` for whoever ran it by hand.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

from domains.registry import DEFAULT_DOMAIN
from training.checkpoints import last_checkpoint, load_policy, save_final_model
from training.curriculum import TaskWeights, build_dataset, tools_for_levels
from training.grpo_config import ConfigError, GRPORunConfig, to_grpo_config, validate
from training.grpo_result import GRPOResult
from training.reporting import Reporter, make_reporter
from training.rewards import trl_reward_functions
from training.rewards.tally import RewardTally
from training.sandbox.environment import environment_class

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def load_records(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Interaction records from a JSON Lines file (one object a line)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ConfigError("bad_records_file", "records_path", f"{path} line {number}: {err}") from err
    return records


def training_environment_class(tools: tuple[str, ...] | None = None, domain: str = DEFAULT_DOMAIN):
    """The domain's sandbox (offering `tools`, None: all) with its `get_reward` hidden from TRL.

    TRL adds an environment's `get_reward` as one more reward function of weight 1; our reward
    terms already come, weighted and logged one by one, through `trl_reward_functions`, so the
    environment's own total would count them twice.
    """

    base = environment_class(domain, tools)

    class TrainingEnvironment(base):  # type: ignore[misc,valid-type]
        get_reward = None  # not a function: TRL neither calls it nor exposes it as a tool

    TrainingEnvironment.__name__ = base.__name__
    return TrainingEnvironment


def _finite_metrics(logs: dict[str, Any]) -> dict[str, float]:
    return {
        k: float(v)
        for k, v in logs.items()
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(float(v))
    }


def make_callback(reporter: Reporter, config: GRPORunConfig):
    """A TrainerCallback that forwards every TRL log to the reporter and to the MLflow run."""
    from transformers import TrainerCallback

    class ReportingCallback(TrainerCallback):
        def __init__(self) -> None:
            self.client = None
            if config.mlflow_tracking_uri and config.mlflow_run_id:
                from mlflow.tracking import MlflowClient

                self.client = MlflowClient(tracking_uri=config.mlflow_tracking_uri)
            self.last_logs: dict[str, float] = {}
            self.step_started = time.monotonic()

        def on_step_begin(self, args, state, control, **kwargs):
            self.step_started = time.monotonic()

        def on_step_end(self, args, state, control, **kwargs):
            if state.is_world_process_zero:
                reporter.progress(
                    state.global_step, state.max_steps, step_seconds=round(time.monotonic() - self.step_started, 3)
                )

        def on_log(self, args, state, control, logs=None, **kwargs):
            if not state.is_world_process_zero or not logs:
                return
            values = _finite_metrics(logs)
            self.last_logs.update(values)
            reporter.metrics(state.global_step, values)
            if self.client is not None and values:
                from mlflow.entities import Metric

                now = int(time.time() * 1000)
                self.client.log_batch(
                    config.mlflow_run_id,
                    metrics=[
                        Metric(key=k.replace("@", "_at_"), value=v, timestamp=now, step=state.global_step)
                        for k, v in values.items()
                    ],
                )

    return ReportingCallback()


def build_trainer(config: GRPORunConfig, reporter: Reporter):
    """`(trainer, curriculum_report)` for a validated config."""
    import torch
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOTrainer

    records = config.records if config.records is not None else load_records(config.records_path)
    weights = TaskWeights(
        config.intent_weights, config.persona_weights, frozenset(config.failed_tasks or ()), config.failed_share
    )
    dataset, mix = build_dataset(records, config.levels, seed=config.seed, size=config.dataset_size, weights=weights)
    dtype = torch.bfloat16 if config.profile == "gpu" else torch.float32
    model, tokenizer = load_policy(config.model_path, dtype=dtype)
    args = to_grpo_config(config)
    callback = make_callback(reporter, config)
    rewards = trl_reward_functions(config.reward_names, config.reward_weights)
    trainer = GRPOTrainer(
        model=model,
        # The tally scores nothing (None, which TRL leaves out of the sum): it logs the trained
        # reward per intent and persona beside TRL's means.
        reward_funcs=[*rewards, RewardTally(rewards)],
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,  # explicit: never let TRL load a stock tokenizer in place of ours
        environment_factory=training_environment_class(
            tools_for_levels(config.levels, config.domain, config.tool_list), config.domain
        ),
        callbacks=[callback],
    )
    # The stock printer writes Python dicts to stdout, which would break the JSON-lines stream.
    trainer.remove_callback(PrinterCallback)
    trainer.reporting_callback = callback
    return trainer, mix


def run(config: GRPORunConfig, reporter: Reporter | None = None) -> GRPOResult | None:
    """Validate, train (resuming when a checkpoint exists), save, report the result; the result on
    the main process, None on the others (under `accelerate launch` only the main one reports)."""
    reporter = reporter or make_reporter()
    validate(config)
    if config.torch_threads:
        import torch

        torch.set_num_threads(config.torch_threads)
    started = time.monotonic()
    resume = last_checkpoint(config.output_dir)
    trainer, mix = build_trainer(config, reporter)
    main = trainer.accelerator.is_main_process
    if main:
        reporter.log(
            "grpo starting",
            resumed_from=str(resume.path) if resume else None,
            level_mix=mix.to_dict(),
            config=config.to_dict(),
        )
        client = trainer.reporting_callback.client
        if client is not None:
            client.log_dict(config.mlflow_run_id, mix.to_dict(), "curriculum_mix.json")
            # The step's data count, beside the supervised step's `sft/episodes`.
            client.log_metric(config.mlflow_run_id, "grpo/tasks", float(sum(mix.rows_per_level.values())), step=0)
            # Records the sandbox could not start, left out of the draw (`curriculum.startable`).
            client.log_metric(
                config.mlflow_run_id, "grpo/unstartable", float(sum(mix.unstartable_per_level.values())), step=0
            )
    output = trainer.train(resume_from_checkpoint=str(resume.path) if resume else None)
    final_dir = Path(config.output_dir) / "final"
    trainer.save_model(str(final_dir))  # every process must call it (it gathers sharded weights)
    if trainer.accelerator.is_main_process:
        # save_model also pickles TrainingArguments; the model folder that is logged and registered
        # must hold nothing that unpickles (the registry refuses it).
        (final_dir / "training_args.bin").unlink(missing_ok=True)
    result = None
    if main:
        save_final_model(trainer.model, trainer.processing_class, final_dir)
        result = GRPOResult(
            final_step=trainer.state.global_step,
            model_path=str(final_dir),
            train_loss=float(output.training_loss),
            world_size=trainer.accelerator.num_processes,
            resumed_from=str(resume.path) if resume else None,
            resumed_from_step=resume.global_step if resume else 0,
            seconds=round(time.monotonic() - started, 1),
            # The whole curve, resumed steps included (the trainer state carries the log history).
            reward_curve=tuple(float(e["reward"]) for e in trainer.state.log_history if "reward" in e),
            zero_std_fraction=_mean_logged(trainer.state.log_history, "frac_reward_zero_std"),
            metrics=dict(trainer.reporting_callback.last_logs),
            level_mix=mix.to_dict(),
        )
        client = trainer.reporting_callback.client
        if client is not None:
            client.log_artifacts(config.mlflow_run_id, str(final_dir), "model")
        # Not read back by any launcher (Dagster takes the result from the final event). It is for
        # a run launched by hand, often under `accelerate launch`: there every process's library
        # output interleaves on the terminal, and this file is the run's record that stays beside
        # its checkpoints and model.
        (Path(config.output_dir) / "result.json").write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True))
        reporter.final(result.to_dict())
    trainer.accelerator.wait_for_everyone()
    return result


def _mean_logged(log_history: list[dict[str, Any]], key: str) -> float | None:
    """The mean of a metric over the logged steps, or None when the trainer never logged it."""
    values = [float(entry[key]) for entry in log_history if key in entry]
    return sum(values) / len(values) if values else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.grpo", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="JSON or YAML run config (GRPORunConfig fields)")
    args = parser.parse_args(argv)
    reporter = make_reporter()
    try:
        config = GRPORunConfig.from_file(args.config)
        run(config, reporter)
    except (ConfigError, FileNotFoundError, json.JSONDecodeError) as err:
        print(f"error: {err}", file=sys.stderr)
        reporter.log("grpo failed", error=str(err))
        return 2
    finally:
        reporter.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
