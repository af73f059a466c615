"""Settings declared once: the launchpad's defaults are the data plane's own declarations."""

from __future__ import annotations

from assets.data import SplitConfig, WindowConfig
from dataplane import splits, window


def _default(config_class, field: str):
    return config_class.model_fields[field].default


def test_the_window_size_in_the_launchpad_is_the_data_planes():
    assert _default(WindowConfig, "size") == window.DEFAULT_SIZE == 10_000


def test_the_split_fractions_in_the_launchpad_are_the_data_planes():
    fractions = tuple(_default(SplitConfig, name) for name in ("train", "calibration", "shadow"))
    assert fractions == splits.DEFAULT_FRACTIONS


def test_served_conversations_get_the_turn_cap_they_are_evaluated_with():
    """Serving (the demo's traffic) and evaluation cut an unfinished conversation at the same turn."""
    import inspect

    from assets.evaluation import EvalConfig
    from domains.retail.traffic.serving import serve
    from evaluation.reports import evaluate_pair
    from training.sandbox.rollout import SERVING_MAX_TURNS

    assert _default(EvalConfig, "max_turns") == SERVING_MAX_TURNS
    for function in (serve, evaluate_pair):
        assert inspect.signature(function).parameters["max_turns"].default == SERVING_MAX_TURNS, function


def test_every_launchpad_setting_shows_its_help_text():
    """The weekly assets' Dagster configs are generated from settings dataclasses: every field has
    the dataclass's help text as its description."""
    from assets.evaluation import CalibrationConfig, EvalConfig
    from assets.promotion import GateSettings
    from assets.training import GRPOTrainingConfig, PolicyConfig
    from assets.watch import WatchConfig

    for config in (WindowConfig, SplitConfig, EvalConfig, CalibrationConfig, PolicyConfig, GRPOTrainingConfig):
        for name, spec in config.model_fields.items():
            assert (spec.description or "").strip(), f"{config.__name__}.{name} has no help text"
    for config in (GateSettings, WatchConfig):
        assert all((spec.description or "").strip() for spec in config.model_fields.values()), config.__name__


def test_the_generated_configs_keep_the_run_config_names_presets_and_tests_use():
    from assets.evaluation import CalibrationConfig, EvalConfig
    from assets.training import PolicyConfig

    rollout = {"trials", "max_tasks", "shadow_size", "seed", "max_turns", "compact", "max_new_tokens"}
    traces = {"log_traces", "trace_successes", "max_traces"}
    assert set(WindowConfig.model_fields) == {"size", "min_rows", "min_gold_share", "max_quarantine_rate"}
    assert set(SplitConfig.model_fields) == {"train", "calibration", "shadow"}
    assert set(EvalConfig.model_fields) == rollout | traces
    assert set(CalibrationConfig.model_fields) == rollout | traces | {"calibration_refresh_after"}
    knobs = {"base_model", "use_champion", "sft_warm_start", "copy_pretrain_steps", "probe_prompts"}
    assert knobs | {"min_tool_call_rate", "sft_relabel", "sft_steps"} <= set(PolicyConfig.model_fields)


# ---- one settings convention, one environment module ---------------------------------------

PRODUCT_ROOMS = ("orchestration", "assets", "dataplane", "training", "evaluation", "deploy")


def _product_sources():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    for room in PRODUCT_ROOMS:
        for path in sorted((root / room).rglob("*.py")):
            yield path.relative_to(root).with_suffix("").as_posix().replace("/", "."), path.read_text()


def _environment_reads(text: str) -> set[str]:
    """The RETRAIN_* names a module reads from os.environ: a name literal in a module that
    touches os.environ (or getenv)."""
    import re

    if not re.search(r"os\.environ|getenv\(", text):
        return set()
    return set(re.findall(r"""["'](RETRAIN_[A-Z_]+)["']""", text))


def test_retrain_variables_are_read_only_in_the_environment_module_or_where_the_table_says():
    from orchestration.environment import BY_NAME, HERE

    strays = {}
    for module, text in _product_sources():
        if module == HERE:
            continue
        for name in _environment_reads(text):
            variable = BY_NAME.get(name)
            if variable is None or module not in variable.read_in:
                strays.setdefault(module, set()).add(name)
    assert strays == {}, f"read outside orchestration.environment and not declared there: {strays}"


def test_every_variable_read_below_says_why():
    from orchestration.environment import HERE, VARIABLES

    for variable in VARIABLES:
        assert variable.help.strip(), variable.name
        for module in set(variable.read_in) - {HERE}:
            assert module in variable.help, f"{variable.name}: the help says why {module} reads it"


def test_an_undeclared_variable_cannot_be_read():
    import pytest

    from orchestration.environment import value

    with pytest.raises(KeyError, match="not declared"):
        value("RETRAIN_NOT_A_SETTING", {})


def test_every_settings_dataclass_field_has_a_help_text():
    import dataclasses

    from dataplane.ingest_settings import IngestSettings
    from dataplane.splits import SplitSettings
    from dataplane.window import WindowSettings
    from evaluation.calibration_versions import RefreshSettings
    from evaluation.gates import GateConfig
    from evaluation.reports import EvalSettings
    from monitoring.health import HealthSettings
    from monitoring.watch import WatchSettings
    from tracking.traces import TraceSettings
    from training.grpo_config import GRPORunConfig
    from training.policy_start import PolicyStartSettings
    from training.sft import SFTSettings
    from training.tiny.pretrain import CopySettings

    for source in (
        IngestSettings,
        WindowSettings,
        SplitSettings,
        EvalSettings,
        RefreshSettings,
        PolicyStartSettings,
        GateConfig,
        HealthSettings,
        TraceSettings,
        WatchSettings,
        GRPORunConfig,
        SFTSettings,
        CopySettings,
    ):
        for f in dataclasses.fields(source):
            assert f.metadata.get("help", "").strip(), f"{source.__name__}.{f.name} has no help text"


def test_no_module_keeps_its_own_setting_helper():
    """`dataplane.settings.setting` is the one way a setting is declared."""
    import re

    for module, text in _product_sources():
        assert not re.search(r"^def _setting\(", text, re.M), module
        assert not re.search(r"""field\([^)]*metadata=\{\s*["']help["']""", text), module


def test_config_show_names_each_values_source(monkeypatch, capsys, tmp_path):
    import json

    from orchestration.cli import main

    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RETRAIN_HEALTH_MARGIN", "0.2")
    monkeypatch.delenv("RETRAIN_HEALTH_WINDOW", raising=False)
    monkeypatch.delenv("RETRAIN_GATE_FLOORS", raising=False)
    assert main(["config", "show", "--json"]) == 0
    rows = {(r["concern"], r["setting"]): r for r in json.loads(capsys.readouterr().out)}
    assert rows["health", "margin"]["value"] == 0.2
    assert rows["health", "margin"]["source"] == "env RETRAIN_HEALTH_MARGIN"
    assert rows["health", "window"]["source"] == "default"
    assert rows["window", "size"] == {**rows["window", "size"], "value": window.DEFAULT_SIZE, "source": "default"}
    assert rows["environment", "RETRAIN_HOME"]["source"] == "env RETRAIN_HOME"
    assert rows["environment", "RETRAIN_PII_KEY"]["value"] == "(set)"  # conftest sets it; a secret is not printed
    assert all(r["help"] for r in rows.values())
    for concern in ("window", "split", "policy", "evaluation", "calibration"):
        assert any(r["concern"] == concern for r in rows.values()), concern
    assert main(["config", "show"]) == 0
    assert "margin = 0.2  (env RETRAIN_HEALTH_MARGIN)" in capsys.readouterr().out


def test_config_show_names_the_gate_floors_file(monkeypatch, capsys, tmp_path):
    import json

    from orchestration.cli import main

    floors = tmp_path / "floors.yaml"
    floors.write_text("max_tool_drift: 0.01\n")
    monkeypatch.setenv("RETRAIN_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("RETRAIN_GATE_FLOORS", str(floors))
    assert main(["config", "show", "--json"]) == 0
    rows = {(r["concern"], r["setting"]): r for r in json.loads(capsys.readouterr().out)}
    assert (rows["gates", "max_tool_drift"]["value"], rows["gates", "max_tool_drift"]["source"]) == (
        0.01,
        f"file {floors}",
    )
    assert rows["gates", "shadow_margin"]["source"] == "default"


def test_the_cli_takes_its_defaults_from_the_settings_it_runs_with():
    """`retrain demo` and `retrain review export` options are generated from the settings their code
    declares; `retrain simulate` leaves the seed to the domain's traffic simulator."""
    import dataclasses
    import inspect

    from orchestration.cli.commands import build_parser
    from orchestration.cli.demo import DemoSettings, run_demo
    from orchestration.cli.options import settings_values
    from orchestration.cli.review import SampleSettings, export_review

    parser = build_parser()
    assert settings_values(parser.parse_args(["demo"]), DemoSettings) == dataclasses.asdict(DemoSettings())
    demo = inspect.signature(run_demo).parameters
    assert {f.name: demo[f.name].default for f in dataclasses.fields(DemoSettings)} == dataclasses.asdict(
        DemoSettings()
    )
    review = parser.parse_args(["review", "export", "--week", "2026-11-09"])
    assert settings_values(review, SampleSettings) == dataclasses.asdict(SampleSettings())
    export = inspect.signature(export_review).parameters
    assert (export["n"].default, export["seed"].default) == (SampleSettings.n, SampleSettings.seed)
    assert parser.parse_args(["simulate", "--days", "1", "--per-day", "1", "--out", "x"]).seed is None
