"""The GRPO run configuration: what an operator sets, checked before any compute, mapped onto TRL.

Only the knobs this project decides are named here; any other TRL `GRPOConfig` field goes in
`grpo_overrides` and is passed straight through, so TRL's fields are never restated.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from training.curriculum import CurriculumError, parse_mix
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

    model_path: str
    output_dir: str
    records_path: str | None = None
    records: list[dict[str, Any]] | None = None
    levels: dict[str, float] = field(default_factory=lambda: {"1": 1.0})
    dataset_size: int | None = None
    reward_names: list[str] | None = None  # None: every term in REWARD_TERMS
    reward_weights: dict[str, float] = field(default_factory=dict)  # overrides of RewardWeights
    max_steps: int = 20
    num_generations: int = 4
    per_device_train_batch_size: int = 4
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 256
    learning_rate: float = 1e-4
    beta: float = 0.0
    loss_type: str = "dapo"
    max_tool_calling_iterations: int = 4
    temperature: float = 1.0
    save_steps: int = 10
    save_total_limit: int = 2
    logging_steps: int = 1
    seed: int = 0
    mlflow_tracking_uri: str | None = None
    mlflow_run_id: str | None = None
    profile: str = "cpu"
    use_vllm: bool = False
    use_liger: bool = False
    # CPU threads for torch; 1 is far faster when other processes share the cores (OpenMP spin-waits).
    torch_threads: int | None = None
    grpo_overrides: dict[str, Any] = field(default_factory=dict)

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

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if self.records is not None:
            out["records"] = f"<{len(self.records)} records>"
        return out


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


def to_grpo_config(config: GRPORunConfig):
    """TRL `GRPOConfig`: profile defaults, then this run's knobs, then `grpo_overrides` (wins)."""
    from trl import GRPOConfig

    kwargs: dict[str, Any] = profile_kwargs(config.profile, config.use_vllm, config.use_liger)
    kwargs.update(
        output_dir=config.output_dir,
        max_steps=config.max_steps,
        num_generations=config.num_generations,
        per_device_train_batch_size=config.per_device_train_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        max_completion_length=config.max_completion_length,
        learning_rate=config.learning_rate,
        beta=config.beta,
        loss_type=config.loss_type,
        max_tool_calling_iterations=config.max_tool_calling_iterations,
        temperature=config.temperature,
        save_strategy="steps",
        save_steps=config.save_steps,
        save_total_limit=config.save_total_limit,
        save_only_model=False,  # optimizer + RNG state too, so a resume continues the same run
        logging_steps=config.logging_steps,
        seed=config.seed,
        data_seed=config.seed,
        report_to="none",  # metrics go through our callback (MLflow run id + Pipes reporter)
        log_completions=False,
        remove_unused_columns=False,
        disable_tqdm=True,
    )
    kwargs.update(config.grpo_overrides)
    return GRPOConfig(**kwargs)
