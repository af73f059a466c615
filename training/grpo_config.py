"""The GRPO run configuration: what an operator sets, checked before any compute, mapped onto TRL.

Only the knobs this project decides are named here; any other TRL `GRPOConfig` field goes in
`grpo_overrides` and is passed straight through, so TRL's fields are never restated.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from dataplane.settings import setting
from domains.registry import DEFAULT_DOMAIN
from training.curriculum import DEFAULT_TOOL_LIST, CurriculumError, check_tool_list, parse_mix
from training.profiles import PROFILES, profile_kwargs
from training.rewards import REWARD_TERMS, RewardConfigError, RewardWeights


class ConfigError(ValueError):
    """An invalid run configuration; `.rule` names the broken rule, `.field` the setting."""

    def __init__(self, rule: str, field_name: str, detail: str) -> None:
        super().__init__(f"invalid GRPO config ({rule}) in {field_name!r}: {detail}")
        self.rule = rule
        self.field = field_name
        self.detail = detail


@dataclass
class GRPORunConfig:
    """One GRPO run. `records_path` is a JSON Lines file of interaction records (train split)."""

    model_path: str = setting(help="the policy to update: a local model folder (or a hub id, with network)")
    output_dir: str = setting(help="checkpoints, the final model and result.json", trl=True)
    domain: str = setting(DEFAULT_DOMAIN, "the domain whose sandbox the rollouts run in (an installed domain's name)")
    records_path: str | None = setting(None, "JSON Lines file of interaction records (the train split)")
    records: list[dict[str, Any]] | None = setting(None, "the records themselves, instead of records_path")
    levels: dict[str, float] = setting(
        help="curriculum level mix {level: share}; 1 alone offers level 1's short tool list",
        factory=lambda: {"1": 1.0},
    )
    tool_list: str = setting(
        DEFAULT_TOOL_LIST,
        "the tools offered (training.curriculum.TOOL_LISTS): 'by_level' (level 1's list when the mix is "
        "level 1 alone, else all), 'level1' (level 1's list at every level) or 'all'",
    )
    intent_weights: dict[str, float] | None = setting(
        None, "share of each intent among a level's drawn prompts (None: as the records come)"
    )
    persona_weights: dict[str, float] | None = setting(
        None, "share of each customer persona among an intent's drawn prompts (None: as the records come)"
    )
    failed_tasks: list[str] | None = setting(
        None, "interaction ids of the window's tasks the champion failed (drawn at failed_share of a persona's prompts)"
    )
    failed_share: float | None = setting(None, "share of prompts drawn from failed_tasks where both kinds exist")
    dataset_size: int | None = setting(None, "prompts drawn from the mix (None: every eligible record once)")
    reward_names: list[str] | None = setting(None, "reward terms to train on (None: every term in REWARD_TERMS)")
    reward_weights: dict[str, float] = setting(help="overrides of RewardWeights, by term", factory=dict)
    max_steps: int = setting(20, "optimizer steps", trl=True)
    num_generations: int = setting(4, "completions per prompt (the GRPO group)", trl=True)
    per_device_train_batch_size: int = setting(4, "completions per device per step", trl=True)
    gradient_accumulation_steps: int = setting(1, "micro-batches per optimizer step", trl=True)
    max_completion_length: int = setting(256, "tokens per completion, tool turns included", trl=True)
    learning_rate: float = setting(1e-4, "peak learning rate (1e-6 for a real model)", trl=True)
    beta: float = setting(0.0, "KL coefficient; 0 keeps no reference model in memory", trl=True)
    loss_type: str = setting("dapo", "TRL loss normalisation", trl=True)
    max_tool_calling_iterations: int = setting(4, "tool calls per episode before TRL stops it", trl=True)
    temperature: float = setting(1.0, "sampling temperature of the rollouts", trl=True)
    save_steps: int = setting(10, "steps between checkpoints: what a retry resumes from", trl=True)
    save_total_limit: int = setting(2, "checkpoints kept", trl=True)
    logging_steps: int = setting(1, "steps between logged metrics (the reward curve's resolution)", trl=True)
    seed: int = setting(0, "seeds the dataset draw, the customers and TRL", trl=True)
    mlflow_tracking_uri: str | None = setting(None, "MLflow store the run logs to (with mlflow_run_id)")
    mlflow_run_id: str | None = setting(None, "MLflow run the metrics and model go to")
    profile: str = setting("cpu", f"hardware profile of TRL defaults, one of {PROFILES}")
    use_vllm: bool = setting(False, "gpu profile: generate with vLLM colocated on the training GPU")
    use_liger: bool = setting(False, "gpu profile: Liger kernels")
    # OpenMP threads spin-wait, so when other processes share the cores one thread is far faster.
    torch_threads: int | None = setting(None, "CPU threads for torch (None: torch's default)")
    grpo_overrides: dict[str, Any] = setting(
        help="any other TRL GRPOConfig field, passed straight through (wins over everything above)", factory=dict
    )

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> GRPORunConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ConfigError(
                "unknown_field",
                ",".join(unknown),
                f"not a run setting (TRL fields go under 'grpo_overrides'); known: {sorted(known)}",
            )
        missing = [name for name in ("model_path", "output_dir") if not raw.get(name)]
        if missing:
            raise ConfigError("missing_field", ",".join(missing), "required")
        return cls(**raw)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> GRPORunConfig:
        """Read a JSON or YAML (by suffix) config file."""
        text = Path(path).read_text(encoding="utf-8")
        if Path(path).suffix in (".yaml", ".yml"):
            import yaml

            raw = yaml.safe_load(text)
        else:
            raw = json.loads(text)
        if not isinstance(raw, dict):
            raise ConfigError("not_a_mapping", str(path), "the config file must hold one object")
        return cls.from_dict(raw)

    def to_file(self, path: str | os.PathLike) -> Path:
        """Write the config as JSON at `path`, for `python -m training.grpo --config` (`from_file`)."""
        Path(path).write_text(json.dumps(asdict(self), indent=2, sort_keys=True))
        return Path(path)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.records is not None:
            out["records"] = f"<{len(self.records)} records>"
        return out


def write_records(path: str | os.PathLike, records: Iterable[Mapping[str, Any]]) -> str:
    """`records` as a JSON Lines file at `path` (a run's `records_path`, which the trainer reads); its path."""
    with open(path, "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")
    return str(path)


def _world_size() -> int:
    return int(os.environ.get("WORLD_SIZE", "1"))


def model_context_length(model_path: str) -> int | None:
    """`max_position_embeddings` from a local model's config.json (None for a hub id)."""
    config_file = Path(model_path) / "config.json"
    if not config_file.exists():
        return None
    config = json.loads(config_file.read_text())
    config = config.get("text_config", config)
    return config.get("max_position_embeddings")


def validate(config: GRPORunConfig, num_processes: int | None = None) -> None:
    """Raise `ConfigError` for anything that would fail after compute has started."""
    processes = num_processes or _world_size()
    positive = (
        "max_steps",
        "num_generations",
        "per_device_train_batch_size",
        "max_completion_length",
        "save_steps",
        "max_tool_calling_iterations",
        "gradient_accumulation_steps",
    )
    for name in positive:
        value = getattr(config, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigError("not_positive", name, f"{value!r} must be an integer >= 1")
    if config.num_generations < 2:
        raise ConfigError(
            "too_few_generations",
            "num_generations",
            f"{config.num_generations}: GRPO compares at least 2 completions per prompt",
        )
    batch = config.per_device_train_batch_size * processes * config.gradient_accumulation_steps
    if batch % config.num_generations:
        raise ConfigError(
            "generations_do_not_divide_batch",
            "num_generations",
            f"{config.num_generations} does not divide the effective batch {batch} "
            f"(= per_device_train_batch_size {config.per_device_train_batch_size} x "
            f"{processes} processes x gradient_accumulation_steps "
            f"{config.gradient_accumulation_steps})",
        )
    if not (config.learning_rate > 0 and config.temperature > 0 and config.beta >= 0):
        raise ConfigError(
            "bad_number",
            "learning_rate/temperature/beta",
            f"{config.learning_rate}/{config.temperature}/{config.beta} must be > 0, > 0, >= 0",
        )
    names = config.reward_names if config.reward_names is not None else list(REWARD_TERMS)
    unknown = [name for name in names if name not in REWARD_TERMS]
    if unknown or not names:
        raise ConfigError("unknown_reward_name", "reward_names", f"{unknown or names} not among {sorted(REWARD_TERMS)}")
    try:
        RewardWeights.from_dict(config.reward_weights)
    except RewardConfigError as err:
        raise ConfigError(err.rule, "reward_weights", err.detail) from err
    try:
        parse_mix(config.levels)
    except CurriculumError as err:
        raise ConfigError("bad_level_mix", "levels", str(err)) from err
    try:
        check_tool_list(config.tool_list)
    except CurriculumError as err:
        raise ConfigError(err.rule, "tool_list", err.detail) from err
    for name in ("intent_weights", "persona_weights"):
        weights = getattr(config, name) or {}
        if any(isinstance(w, bool) or not isinstance(w, (int, float)) or not w >= 0 for w in weights.values()):
            raise ConfigError(f"bad_{name[:-1]}", name, f"{weights} must all be numbers >= 0")
    share = config.failed_share
    if share is not None and (isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1):
        raise ConfigError("bad_failed_share", "failed_share", f"{share!r} must be a number in [0, 1]")
    if config.profile not in PROFILES:
        raise ConfigError("unknown_profile", "profile", f"{config.profile!r} not in {PROFILES}")
    path = Path(config.model_path)
    looks_local = config.model_path.startswith((".", "/", "~")) or path.exists()
    if looks_local and not (path / "config.json").exists():
        raise ConfigError("missing_model", "model_path", f"no model (config.json) at {config.model_path}")
    context = model_context_length(config.model_path)
    if context is not None and config.max_completion_length >= context:
        raise ConfigError(
            "completion_beyond_context",
            "max_completion_length",
            f"{config.max_completion_length} >= the model's max_position_embeddings {context}",
        )
    if config.records is None and not config.records_path:
        raise ConfigError("missing_dataset", "records_path", "give records_path (JSON Lines) or records")
    if config.records_path and not Path(config.records_path).exists():
        raise ConfigError("missing_dataset", "records_path", f"no file at {config.records_path}")
    if (config.mlflow_run_id is None) != (config.mlflow_tracking_uri is None):
        raise ConfigError(
            "incomplete_mlflow", "mlflow_run_id", "set both mlflow_tracking_uri and mlflow_run_id, or neither"
        )


def trl_settings(config: GRPORunConfig) -> dict[str, Any]:
    """The settings that are TRL `GRPOConfig` fields of the same name, with this run's values."""
    return {f.name: getattr(config, f.name) for f in fields(config) if f.metadata.get("trl")}


def to_grpo_config(config: GRPORunConfig):
    """TRL `GRPOConfig`: profile defaults, then this run's knobs, then `grpo_overrides` (wins)."""
    from trl import GRPOConfig

    kwargs: dict[str, Any] = profile_kwargs(config.profile, config.use_vllm, config.use_liger)
    kwargs.update(trl_settings(config))
    kwargs.update(
        save_strategy="steps",
        save_only_model=False,  # optimizer + RNG state too, so a resume continues the same run
        data_seed=config.seed,
        report_to="none",  # metrics go through our callback (MLflow run id + Pipes reporter)
        log_completions=False,
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    kwargs.update(config.grpo_overrides)
    return GRPOConfig(**kwargs)
