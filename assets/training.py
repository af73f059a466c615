"""Training assets: the policy to start from, and its GRPO update run out of process."""

# No `from __future__ import annotations`: Dagster reads config and resource types from live annotations.
import math
import sys
from collections import Counter
from dataclasses import replace
from functools import partial
from pathlib import Path

import dagster as dg

from assets.configs import config_from_dataclass, dataclass_kwargs
from assets.handoffs import GRPOCandidate, PolicyBase, WindowSplits
from assets.partitions import weekly_partitions
from assets.pipes_reporter import SPEC as PIPES_REPORTER
from assets.resources import Curriculum, DuckDBStore, HomeResource, MLflowTracking
from assets.retries import TRAINING_RETRY
from assets.weekdata import at_level, train_records, week_dir
from dataplane.hashing import sha256_files
from dataplane.home import Home
from dataplane.incidents import list_incidents
from domains.registry import DEFAULT_DOMAIN, load_domain
from evaluation.week_failures import incident_intents, open_incidents, window_failures
from tracking.registry import canary_info, champion_info, local_champion
from tracking.run_log import log_training_inputs, metric_part, open_week_run
from training.curriculum import CurriculumError, WeekMix, is_training_task, persona_of, select_rows, week_mix
from training.episode_update import EpisodeUpdate, EpisodeUpdateSettings, episode_update, served_by
from training.grpo_config import ConfigError, GRPORunConfig, validate, write_records
from training.grpo_result import FINAL_EVENT, GRPOResult
from training.policies import HFPolicy
from training.policy_start import SCRATCH_BASE, PolicyStartSettings
from training.reporting import REPORTER_ENV
from training.sandbox.environment import tool_names
from training.sandbox.prompting import domain_of, initial_messages
from training.sft import SFTSettings
from training.sft_cache import cached_warm_start
from training.tiny.bootstrap import ensure_base_policy
from training.tiny.manifest import REBUILD_COMMAND, ManifestError, shipped_agent_path

# Declared once, on training.policy_start.PolicyStartSettings; the Dagster config is built from
# its fields, and the `sft_*` ones from training.sft.SFTSettings' (the curriculum level comes from
# the run's `curriculum` resource).
_PolicyKnobs = config_from_dataclass(PolicyStartSettings, "_PolicyKnobs", module=__name__)
PolicyConfig = config_from_dataclass(
    SFTSettings,
    "PolicyConfig",
    base=_PolicyKnobs,
    prefix="sft_",
    # tools: the curriculum's tool list, so SFT renders the one GRPO and evaluation offer;
    # weighted_phrases: a recipe's, for the phrase tokens it added (training.tiny.phrases).
    exclude=("tools", "weighted_phrases"),
    # SFT on relabelled copies (training.tiny.relabel: fresh identifiers in every example). An id that
    # differs in every copy can be predicted only by copying it from earlier in the conversation, so
    # the tiny model learns to copy ids instead of memorising the training customers'.
    defaults={"relabel": True},
    module=__name__,
    doc="Where the week's policy starts (training.policy_start.PolicyStartSettings), and the SFT warm "
    "start's settings (training.sft.SFTSettings, prefixed sft_).",
)

# What the asset itself supplies to a GRPO run; every other GRPORunConfig field is a Dagster setting.
SUPPLIED_BY_ASSET = (
    "model_path",
    "output_dir",
    "records_path",
    "records",
    "levels",  # the run's curriculum resource, weighted by the week's failures
    "tool_list",  # the run's curriculum resource
    "intent_weights",  # the week's failures too (training.curriculum.week_mix)
    "persona_weights",
    "failed_tasks",
    "failed_share",
    "domain",  # the run's domain tag
    "mlflow_tracking_uri",
    "mlflow_run_id",
)
_GRPOKnobs = config_from_dataclass(GRPORunConfig, "_GRPOKnobs", exclude=SUPPLIED_BY_ASSET, module=__name__)
GRPOTrainingConfig = config_from_dataclass(
    EpisodeUpdateSettings,
    "GRPOTrainingConfig",
    base=_GRPOKnobs,
    prefix="episodes_",
    module=__name__,
    doc="The week's update: the supervised step on the window's good episodes (training.episode_update."
    "EpisodeUpdateSettings, prefixed episodes_), then GRPO (training.grpo_config.GRPORunConfig's own "
    "fields); any other TRL GRPOConfig field goes in `grpo_overrides`.",
)


def _sft_records(train: list[dict], level: int) -> list[dict]:
    """Verified trajectories to imitate: expert level-1 conversations, or the recorded ones."""
    if level != 1:
        return train

    return [load_domain(domain_of(task)).level1_demonstration(task) for task in at_level(train, 1)]


def _no_agent(config: _PolicyKnobs, domain: str) -> bool:
    """No agent of this domain exists yet: no base model is configured and none is shipped for it."""
    return not config.base_model and domain != DEFAULT_DOMAIN


def _acts_check(rate: float, threshold: float, path: str, no_agent: bool) -> dg.AssetCheckResult:
    """Does the week's starting policy call tools? A configured, shipped or champion model that
    does not is broken (ERROR: the week stops before any compute). A domain with no agent yet is
    not broken, it is new: the tiny model built for it cannot act, and that is a WARN, so the
    week goes on and its gates record an honest reject instead of leaving the week undecided
    (the GRPO update finds no signal and the candidate equals its base)."""
    metadata = {"tool_call_rate": rate, "threshold": threshold, "model_path": path}
    if rate >= threshold or not no_agent:
        return dg.AssetCheckResult(check_name="policy_emits_tool_calls", passed=rate >= threshold, metadata=metadata)
    return dg.AssetCheckResult(
        check_name="policy_emits_tool_calls",
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description="no agent of this domain yet: the tiny model built here does not call tools, so the "
        "week will be rejected; set policy_base.base_model to an instruct model, or sft_warm_start to true",
        metadata=metadata,
    )


def _base_model_path(config: _PolicyKnobs, models: Path, train: list[dict], domain: str = DEFAULT_DOMAIN) -> Path:
    """The folder of the configured base model; the shipped agent only once it matches its manifest.

    The shipped agent serves the default domain; another domain with no base model configured
    starts from a tiny model built here on its own tools (there is no shipped agent of it)."""
    if config.base_model == SCRATCH_BASE or _no_agent(config, domain):
        return ensure_base_policy(models, train, copy_steps=config.copy_pretrain_steps)
    if not config.base_model:
        try:
            return shipped_agent_path()
        except ManifestError as err:
            raise dg.Failure(
                f"the shipped agent does not match its manifest ({err}); rebuild it with `{REBUILD_COMMAND}`, "
                f"or set policy_base.base_model to a model folder (or {SCRATCH_BASE!r} to build a tiny one here)"
            ) from err
    return Path(config.base_model)


def _probe_tool_calls(model_path: str, records: list[dict], n: int, tools: tuple[str, ...] | None) -> float:
    """Share of greedy first turns that parse as a call of one of the offered tools."""
    prompts = [initial_messages(r) for r in records[:n]]
    if not prompts:
        return 0.0
    domain = domain_of(records[0])
    offered = set(tools or tool_names(domain))
    replies = HFPolicy(model_path, max_new_tokens=96, tools=tools, domain=domain).act(prompts)
    good = sum(1 for m in replies if any(c["name"] in offered for c in m.get("tool_calls", [])))
    return good / len(prompts)


@dg.asset(
    group_name="training",
    kinds={"pytorch", "mlflow"},
    partitions_def=weekly_partitions,
    check_specs=[dg.AssetCheckSpec("policy_emits_tool_calls", asset="policy_base", blocking=True)],
)
def policy_base(
    context: dg.AssetExecutionContext,
    config: PolicyConfig,
    window_splits: WindowSplits,
    home: HomeResource,
    store: DuckDBStore,
    mlflow: MLflowTracking,
    curriculum: Curriculum,
):
    """The model this week starts from: the MLflow champion, else the (warm-started) base model."""
    h, domain = home.home, window_splits.domain
    level, tools, model = curriculum.level_for(domain), curriculum.tools_for(domain), mlflow.model_for(domain)
    train = train_records(h, store, window_splits)
    champion = champion_info(mlflow.uri(h), model) if config.use_champion else None
    if champion is not None:
        path = local_champion(mlflow.uri(h), h.models, champion, model)
        context.log.info(f"starting from champion v{champion.version} at {path}")
        source, sft = "champion", None
    else:
        path = _base_model_path(config, h.models, train, domain)
        source, sft = "base_model", None
        if config.sft_warm_start:
            settings = SFTSettings(tools=tools, **dataclass_kwargs(config, SFTSettings, prefix="sft_"))
            demos = partial(_sft_records, train, level)  # built only when the recipe is not cached yet
            path, sft = cached_warm_start(h.models, path, settings, level, demos, context.log.info)
    rate = _probe_tool_calls(str(path), at_level(train, level), config.probe_prompts, tools)
    acts = rate >= config.min_tool_call_rate
    yield _acts_check(
        rate, config.min_tool_call_rate, str(path), no_agent=champion is None and _no_agent(config, domain)
    )
    start, canary = _canary_start(
        config, mlflow.uri(h), h.models, model, champion, context.log.info, week=context.partition_key
    )
    value = PolicyBase(
        path=str(path),
        source=source,
        champion_version=champion.version if champion else None,
        acts=acts,
        start_path=start,
        canary_version=canary,
    )
    metadata = {"source": source, "model_path": dg.MetadataValue.path(str(path)), "tool_call_rate": rate}
    if champion is not None:
        metadata["champion_version"] = champion.version
    if canary is not None:
        metadata.update({"trains_from": f"canary v{canary}", "start_path": dg.MetadataValue.path(start)})
    if sft is not None:
        metadata.update({"sft_trajectories": sft["trajectories"], "sft_train_loss": sft["train_loss"]})
    yield dg.MaterializeResult(value=value, metadata=metadata)


def _canary_start(
    config, uri: str, models: Path, model: str, champion, log, week: str | None = None
) -> tuple[str | None, int | None]:
    """(folder, version) of the canary the week trains from, or (None, None): none serves, the
    run starts from the champion only (`start_from_canary` off), there is no champion, or the
    canary is `week`'s own candidate (a re-run of its week must not train on its own output)."""
    if champion is None or not config.start_from_canary:
        return None, None
    canary = canary_info(uri, model)
    if canary is None or (week is not None and canary.week == week):
        return None, None
    path = local_champion(uri, models, canary, model)
    log(f"training from canary v{canary.version} at {path}; judged against champion v{champion.version}")
    return str(path), canary.version


def weights_digest(model_dir: str) -> str:
    """sha256 over a model folder's safetensors files: equal digests mean identical weights."""
    files = sorted(Path(model_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors weights in {model_dir}")
    return sha256_files(files)


def weights_changed_check(
    changed: bool, zero_std_fraction: float | None, base: str, candidate: str
) -> dg.AssetCheckResult:
    """Did the update move the weights? Unchanged weights are a broken run (ERROR: the week stops),
    unless no generation group ever saw two different rewards: then every advantage was zero, GRPO
    had nothing to follow, and an unchanged candidate is the honest result. That is a WARN, and the
    week goes on to the gates, which judge a candidate equal to its base as not better."""
    no_signal = zero_std_fraction is not None and zero_std_fraction >= 1.0
    metadata = {"base": base, "candidate": candidate, "zero_std_fraction": zero_std_fraction}
    if changed or not no_signal:
        return dg.AssetCheckResult(check_name="weights_changed", passed=changed, metadata=metadata)
    return dg.AssetCheckResult(
        check_name="weights_changed",
        passed=False,
        severity=dg.AssetCheckSeverity.WARN,
        description="no learning signal: every group's rollouts scored alike, so the update moved no weight",
        metadata=metadata,
    )


_CANNOT_ACT = "not trained: the base policy does not call tools (policy_emits_tool_calls), so GRPO has no signal"


def _untrained(policy_base: PolicyBase, run_id: str, run_config: GRPORunConfig, why: str = _CANNOT_ACT):
    """The week's candidate when there is nothing to train on: its base cannot call a tool (a
    domain with no agent yet: every rollout would score alike), or no task of the week's levels can
    start (`_no_task_starts`). The update is skipped, not run for nothing (or into a crash). The
    candidate is the base, the checks warn and say why, and the gates judge it as not better: an
    honest reject."""
    metadata = {"skipped": why, "model_path": policy_base.path}
    for name in ("finite_loss", "weights_changed", "reward_curve_logged"):
        yield dg.AssetCheckResult(
            check_name=name, passed=False, severity=dg.AssetCheckSeverity.WARN, description=why, metadata=metadata
        )
    yield dg.MaterializeResult(
        value=GRPOCandidate(
            path=policy_base.path,
            mlflow_run_id=run_id,
            final_step=0,
            reward_weights=dict(run_config.reward_weights),
        ),
        metadata={**metadata, "final_step": 0, "mlflow_run_id": run_id},
    )


def pipes_grpo_result(invocation: dg.PipesClientCompletedInvocation) -> tuple[GRPOResult, dict]:
    """The training process's result, from the final event it sent through Pipes, and the
    materialization metadata it reported there (its scalars and last metrics), to keep on the asset."""
    finals = [m for m in invocation.get_custom_messages() if isinstance(m, dict) and m.get("kind") == FINAL_EVENT]
    if not finals:
        raise dg.Failure("the training process exited without reporting its result through Dagster Pipes")
    reported = {
        key: value
        for result in invocation.get_results()
        if isinstance(result, dg.MaterializeResult)
        for key, value in (result.metadata or {}).items()
    }
    return GRPOResult.from_dict(finals[-1]), reported


# The trainer runs offline, with tokenizers single-threaded beside TRL's own workers, and reports
# through Dagster Pipes.
TRAINER_ENV = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", REPORTER_ENV: PIPES_REPORTER}


def _run_folder(context: dg.AssetExecutionContext, week: Path) -> Path:
    """The run's folder under the week's. Checkpoints belong to one run: a retry of it (same root
    run) resumes them, while a new run of the same week trains afresh instead of resuming last
    time's finished model."""
    root_run = context.run.tags.get("dagster/root_run_id", context.run_id)
    out = week / f"run-{root_run[:8]}"
    out.mkdir(exist_ok=True)
    return out


def _week_mix(
    home: Home, week: str, train: list[dict], champion: str | None, curriculum: Curriculum, domain: str, model: str
):
    """The week's level and intent shares from the registered model's failures on the window's
    train split and the incidents open for the week (training.curriculum.week_mix).

    Failures are those of conversations a version of `model` served: another agent's mistakes (the
    scripted legacy agent's, which fill the first weeks' windows) say nothing of what the model
    fails, and drawing them as the week's failed tasks buried its own. In the demo's first retrain
    about 1,000 of the window's 1,100 failed train-split conversations were the legacy agent's.
    Only a window the model has not served yet is judged whole (what production failed is all
    there is to go on)."""
    served = [r for r in train if served_by(r, model)]
    failures = window_failures(served or train)
    incidents = incident_intents(open_incidents(list_incidents(home), week, champion), train)
    # The intents the week can draw: at level 1 alone only those level 1 can restate.
    seen = Counter(str(r.get("intent", "other")) for r in at_level(train, curriculum.level_for(domain)))
    mix = week_mix(
        curriculum.levels_for(domain),
        seen,
        failures.failed_by_intent,
        failures.failed_by_level,
        failures.judged,
        incidents,
        curriculum.mix_settings,
        personas_seen=Counter(persona_of(r) for r in train if is_training_task(r)),
        failed_by_persona=failures.failed_by_persona,
        faulted_failed=failures.faulted_failed,
        failed_tasks=failures.failed_ids,
    )
    judged = f"{model} (any version)" if served else "all traffic (the model has served none of this window)"
    evidence = {**mix.evidence, "failure_modes": failures.modes, "skipped": failures.skipped, "failures_of": judged}
    return replace(mix, evidence=evidence)


def _week_run_config(
    config: GRPOTrainingConfig,
    policy_base: PolicyBase,
    out: Path,
    train: list[dict],
    domain: str,
    mix: WeekMix,
    tool_list: str,
) -> GRPORunConfig:
    """The week's GRPO run: the run config's settings, on `train` (written beside the run) from
    `policy_base`, in the week's mix, checked before any compute: a bad setting fails the same way
    on every retry, so it fails the step at once, without retries and before any MLflow run."""
    run_config = GRPORunConfig(
        model_path=policy_base.start,
        output_dir=str(out / "grpo"),
        records_path=write_records(out / "train_records.jsonl", train),
        domain=domain,
        levels=mix.levels,
        tool_list=tool_list,
        intent_weights=mix.intents,
        persona_weights=mix.personas,
        failed_tasks=sorted(mix.failed_tasks) or None,
        failed_share=mix.failed_share,
        **dataclass_kwargs(config, GRPORunConfig),
    )
    try:
        validate(run_config, num_processes=1)  # the subprocess is one process (no accelerate launch)
    except ConfigError as err:
        raise dg.Failure(str(err), allow_retries=False) from err
    return run_config


def _no_task_starts(train: list[dict], run_config: GRPORunConfig) -> str | None:
    """Why the week's GRPO would have no task (a level with no record the sandbox can start: a
    window of producers' records none of which restates at level 1, say), or None. Checked before
    any compute with the draw GRPO itself makes (`training.curriculum.select_rows`), so such a
    week ends in a decision instead of a failed training process."""
    try:
        select_rows(train, run_config.levels, seed=run_config.seed, size=run_config.dataset_size)
    except CurriculumError as err:
        return f"not trained: {err}"
    return None


def _mix_metrics(mix: WeekMix) -> dict[str, float]:
    out = {f"mix/level/{level}": share for level, share in mix.levels.items()}
    out |= {f"mix/persona/{metric_part(persona)}": share for persona, share in (mix.personas or {}).items()}
    if mix.failed_share is not None:
        out["mix/failed_task_share"] = mix.failed_share
    return out | {f"mix/intent/{intent}": share for intent, share in (mix.intents or {}).items()}


def _supervised_step(
    config: GRPOTrainingConfig,
    run_config: GRPORunConfig,
    train: list[dict],
    splits: WindowSplits,
    out: Path,
    curriculum: Curriculum,
    log,
    model_name: str,
) -> EpisodeUpdate:
    """The week's supervised step on its good episodes (training.episode_update), before GRPO:
    conversations versions of `model_name` served, unless the run config says `episodes_source: any`."""
    return episode_update(
        run_config.model_path,
        train,
        out / "episodes",
        EpisodeUpdateSettings(**dataclass_kwargs(config, EpisodeUpdateSettings, prefix="episodes_")),
        curriculum.level_for(run_config.domain),
        curriculum.tools_for(run_config.domain),
        seed=run_config.seed,
        torch_threads=run_config.torch_threads,
        log=log,
        fractions=splits.fractions,
        model_name=model_name,
    )


def _log_inputs(uri: str, run_id: str, update: EpisodeUpdate, mix: WeekMix) -> dict:
    """Both into the week's MLflow run; the asset metadata showing them."""
    log_training_inputs(
        uri,
        run_id,
        update.metrics() | _mix_metrics(mix),
        {"episode_update.json": update.to_dict(), "curriculum_weights.json": mix.to_dict()},
    )
    rows = [f"| {name} | {share:.3f} |" for name, share in sorted(_mix_metrics(mix).items())]
    metadata = {f"sft_{k.split('/')[1]}": v for k, v in update.metrics().items()}
    return metadata | {
        "sft_skipped": update.skipped or "",
        "curriculum_weights": dg.MetadataValue.md("| mix | share |\n|---|---|\n" + "\n".join(rows)),
        "curriculum_evidence": dg.MetadataValue.json(mix.evidence),
    }


def _training_checks(result: GRPOResult, base_path: str):
    """The candidate's blocking checks: a finite loss, moved weights, a logged reward curve."""
    curve = result.reward_curve
    changed = weights_digest(result.model_path) != weights_digest(base_path)
    yield dg.AssetCheckResult(
        check_name="finite_loss", passed=math.isfinite(result.train_loss), metadata={"train_loss": result.train_loss}
    )
    yield weights_changed_check(changed, result.zero_std_fraction, base_path, result.model_path)
    yield dg.AssetCheckResult(
        check_name="reward_curve_logged",
        passed=len(curve) > 0 and all(map(math.isfinite, curve)),
        metadata={"points": len(curve)},
    )


def _candidate_metadata(result: GRPOResult) -> dict:
    curve = result.reward_curve
    return {
        "model_path": dg.MetadataValue.path(result.model_path),
        "final_step": result.final_step,
        "resumed_from_step": result.resumed_from_step,
        "train_loss": result.train_loss,
        "reward_first": curve[0] if curve else None,
        "reward_last": curve[-1] if curve else None,
        "seconds": result.seconds,
    }


@dg.asset(
    group_name="training",
    kinds={"pytorch", "mlflow"},
    partitions_def=weekly_partitions,
    pool="retrain",
    retry_policy=TRAINING_RETRY,
    check_specs=[
        dg.AssetCheckSpec(name, asset="grpo_candidate", blocking=True)
        for name in ("finite_loss", "weights_changed", "reward_curve_logged")
    ],
)
def grpo_candidate(
    context: dg.AssetExecutionContext,
    config: GRPOTrainingConfig,
    policy_base: PolicyBase,
    window_splits: WindowSplits,
    home: HomeResource,
    store: DuckDBStore,
    mlflow: MLflowTracking,
    curriculum: Curriculum,
    pipes_subprocess_client: dg.PipesSubprocessClient,
):
    """policy_base updated on the train split: a supervised step on the window's good episodes, then
    GRPO in the week's failure-weighted mix, trained by `python -m training.grpo` via Pipes."""
    h, domain, week = home.home, window_splits.domain, context.partition_key
    out = _run_folder(context, week_dir(h, week, domain))
    train = train_records(h, store, window_splits)
    champion = f"{mlflow.model_for(domain)}/{policy_base.champion_version}" if policy_base.champion_version else None
    mix = _week_mix(h, week, train, champion, curriculum, domain, mlflow.model_for(domain))
    run_config = _week_run_config(config, policy_base, out, train, domain, mix, curriculum.tool_list)
    run_id = open_week_run(
        mlflow.uri(h),
        context.partition_key,
        context.run_id,
        artifact_location=h.mlflow_artifacts.as_uri(),
        experiment_name=mlflow.experiment_for(domain),
    )
    if not policy_base.acts:
        yield from _untrained(policy_base, run_id, run_config)
        return
    empty = _no_task_starts(train, run_config)
    if empty is not None:
        context.log.warning(empty)
        yield from _untrained(policy_base, run_id, run_config, why=empty)
        return
    update = _supervised_step(
        config, run_config, train, window_splits, out, curriculum, context.log.info, mlflow.model_for(domain)
    )
    inputs = _log_inputs(mlflow.uri(h), run_id, update, mix)
    run_config = replace(
        run_config, model_path=update.model_path, mlflow_tracking_uri=mlflow.uri(h), mlflow_run_id=run_id
    )
    invocation = pipes_subprocess_client.run(
        command=[sys.executable, "-m", "training.grpo", "--config", str(run_config.to_file(out / "grpo_config.json"))],
        context=context,
        env=TRAINER_ENV,
    )
    result, reported = pipes_grpo_result(invocation)
    yield from _training_checks(result, run_config.model_path)  # GRPO's own start: the supervised step's model
    yield dg.MaterializeResult(
        value=GRPOCandidate.trained(result, run_id, run_config.reward_weights),
        metadata={**reported, **_candidate_metadata(result), **inputs, "mlflow_run_id": run_id},
    )
