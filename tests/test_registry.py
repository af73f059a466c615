"""MLflow registration on the embedded sqlite store: aliases, idempotency, crash repair, outages."""

from __future__ import annotations

import itertools
import json
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from safetensors.numpy import save_file

from dataplane.hashing import MODEL_DIGEST_KEY, model_digest
from evaluation.decision import ChampionLineage
from evaluation.gates import approve, evaluate_gates
from tests.helpers_gates import gate_inputs
from tracking.registry import (
    ALIAS_MOVES_MAX_CHARS,
    CHAMPION,
    PREVIOUS,
    ModelDigestError,
    ModelDirError,
    NoPreviousChampionError,
    NotPromotableError,
    RegistryError,
    StaleCandidateError,
    alias_moves,
    champion_info,
    download_champion,
    find_base_version,
    find_week_version,
    register_base_champion,
    register_candidate,
    rollback,
)

_names = itertools.count()


class Crash(BaseException):
    """A process dying mid-call: not an Exception, so nothing on the way may catch it."""


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("mlflow")
    return f"sqlite:///{root / 'mlflow.db'}", (root / "artifacts").as_uri()


@pytest.fixture(scope="module")
def promoted():
    return evaluate_gates(gate_inputs("better"))


@pytest.fixture()
def model_dir(tmp_path):
    path = tmp_path / "model"
    path.mkdir()
    save_file({"w": np.arange(6, dtype=np.float32).reshape(2, 3)}, str(path / "model.safetensors"))
    (path / "tokenizer.json").write_text('{"version": "1.0"}')
    (path / "config.json").write_text('{"model_type": "qwen2"}')
    return path


@pytest.fixture()
def reg(store, promoted, model_dir):
    """register(week) on a fresh model name in the shared sqlite store."""
    uri, artifacts = store
    name = f"agent-{next(_names)}"

    def register(week, report=promoted, **lineage):
        lineage = ChampionLineage(
            **{
                "window_hash": f"hash-{week}",
                "validation": "passed",
                "window_rows": 80,
                "model_digest": model_digest(model_dir),  # as the week's decision records it
                **lineage,
            }
        )
        return register_candidate(
            uri, model_dir, week, lineage, report, name=name, artifact_location=artifacts, moved_by="test"
        )

    register.uri, register.name = uri, name
    register.client = MlflowClient(uri, registry_uri=uri)
    return register


def aliases(reg) -> dict[str, int]:
    return {k: int(v) for k, v in reg.client.get_registered_model(reg.name).aliases.items()}


def versions(reg) -> list[int]:
    return sorted(int(mv.version) for mv in reg.client.search_model_versions(f"name = '{reg.name}'"))


def test_first_registration_becomes_champion_with_lineage(reg, promoted, tmp_path):
    assert reg("2025-W01") == 1
    assert aliases(reg) == {CHAMPION: 1}
    info = champion_info(reg.uri, reg.name)
    assert info.version == 1 and info.week == "2025-W01" and info.previous_version is None
    assert info.tags["window_hash"] == "hash-2025-W01" and info.tags["validation"] == "passed"
    assert info.tags["gate_report_digest"] == promoted.digest() and info.tags["gate_decision"] == "promote"
    assert info.lineage.window_rows == 80 and info.run_id and info.source.endswith("/model")
    mv = reg.client.get_model_version(reg.name, "1")
    assert "2025-W01" in mv.description and "calibration_improvement" in mv.description
    # The registered artifact is the plain folder: safetensors + tokenizer, nothing pickled.
    local = download_champion(reg.uri, tmp_path / "dl", reg.name)
    assert sorted(p.name for p in local.iterdir()) == ["config.json", "model.safetensors", "tokenizer.json"]


def test_next_week_moves_champion_and_keeps_previous(reg):
    reg("2025-W01")
    assert reg("2025-W02") == 2
    assert aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}
    assert champion_info(reg.uri, reg.name).previous_version == 1


def test_rerunning_a_week_never_creates_a_second_version(reg):
    reg("2025-W01")
    reg("2025-W02")
    assert reg("2025-W02") == 2 and reg("2025-W01") == 1
    assert versions(reg) == [1, 2]
    assert aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}  # re-running W01 did not move champion back
    assert find_week_version(reg.uri, "2025-W02", reg.name) == 2
    assert find_week_version(reg.uri, "2025-W09", reg.name) is None


def test_with_no_champion_the_base_model_becomes_the_first_one_and_the_rollback_target(reg, model_dir):
    def base(week):
        return register_base_champion(
            reg.uri,
            model_dir,
            week,
            ChampionLineage(shadow_success=0.25, violation_rate=0.0),
            name=reg.name,
            moved_by="test",
        )

    assert base("2025-W01") == 1  # week one: nothing promoted yet, the base serves and is champion
    info = champion_info(reg.uri, reg.name)
    assert info.version == 1 and info.week is None and info.tags["role"] == "base"
    assert info.tags["shadow_success"] == "0.25" and info.source.endswith("/base_model")
    assert base("2025-W01") is None and versions(reg) == [1]  # never twice, never over a champion
    assert find_week_version(reg.uri, "2025-W01", reg.name) is None  # not a week's promoted candidate
    assert find_base_version(reg.uri, reg.name) == (1, "2025-W01")
    assert reg("2025-W01") == 2  # a candidate that beat the base takes over; the base is kept for rollback
    assert aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}
    assert base("2025-W02") is None and versions(reg) == [1, 2]
    assert rollback(reg.uri, reg.name, moved_by="test").to_version == 1


def test_a_base_version_left_without_its_alias_is_reused(reg, model_dir, monkeypatch):
    real = MlflowClient.set_registered_model_alias

    def dying(self, name, alias, version):
        raise Crash("killed before the alias moved")

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", dying)
    with pytest.raises(Crash):
        register_base_champion(reg.uri, model_dir, "2025-W01", ChampionLineage(), name=reg.name, moved_by="test")
    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", real)
    assert (
        register_base_champion(reg.uri, model_dir, "2025-W01", ChampionLineage(), name=reg.name, moved_by="test") == 1
    )
    assert versions(reg) == [1] and aliases(reg) == {CHAMPION: 1}


@pytest.mark.parametrize("crash_on_alias", [PREVIOUS, CHAMPION])
def test_crash_between_version_and_alias_is_repaired_on_retry(reg, monkeypatch, crash_on_alias):
    reg("2025-W01")
    real = MlflowClient.set_registered_model_alias

    def dying(self, name, alias, version):
        if alias == crash_on_alias:
            raise Crash(f"killed before setting {alias}")
        return real(self, name, alias, version)

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", dying)
    with pytest.raises(Crash):
        reg("2025-W02")
    assert versions(reg) == [1, 2]
    assert aliases(reg)[CHAMPION] == 1  # serving unaffected by the crash
    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", real)
    assert reg("2025-W02") == 2
    assert versions(reg) == [1, 2]
    assert aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}


def test_store_failure_during_registration_leaves_champion_and_retry_registers_once(reg, monkeypatch):
    reg("2025-W01")
    real = MlflowClient.create_model_version

    def outage(self, *args, **kwargs):
        raise MlflowException("API request to registry failed: connection reset")

    monkeypatch.setattr(MlflowClient, "create_model_version", outage)
    with pytest.raises(RegistryError, match="create model version") as err:
        reg("2025-W02")
    assert err.value.step == "create model version" and reg.uri in str(err.value)
    monkeypatch.setattr(MlflowClient, "create_model_version", real)
    assert aliases(reg) == {CHAMPION: 1}
    assert reg("2025-W02") == 2 and reg("2025-W02") == 2
    assert versions(reg) == [1, 2] and aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}


def test_unreadable_sqlite_store_raises_clearly_then_retry_registers_once(tmp_path, promoted, model_dir):
    uri, artifacts = f"sqlite:///{tmp_path / 'mlflow.db'}", (tmp_path / "art").as_uri()
    lineage = ChampionLineage(window_hash="h", model_digest=model_digest(model_dir))
    register_candidate(uri, model_dir, "2025-W01", lineage, promoted, artifact_location=artifacts, moved_by="test")
    db = tmp_path / "mlflow.db"
    good = db.read_bytes()
    db.write_bytes(b"this is not a database" * 512)  # same inode: open connections see it too
    with pytest.raises(RegistryError) as err:
        register_candidate(uri, model_dir, "2025-W02", lineage, promoted, artifact_location=artifacts, moved_by="test")
    assert "Re-run to retry" in str(err.value)
    db.write_bytes(good)
    assert champion_info(uri).version == 1
    assert (
        register_candidate(uri, model_dir, "2025-W02", lineage, promoted, artifact_location=artifacts, moved_by="test")
        == 2
    )
    assert find_week_version(uri, "2025-W02") == 2 and champion_info(uri).version == 2


def test_closed_port_is_a_clear_error(model_dir, promoted, monkeypatch):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "5")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    with pytest.raises(RegistryError) as err:
        register_candidate(
            uri, model_dir, "2025-W01", ChampionLineage(model_digest=model_digest(model_dir)), promoted, moved_by="test"
        )
    assert uri in str(err.value) and err.value.step == "find week version"


def test_rollback_restores_previous_and_walks_further_back(reg):
    for week in ("2025-W01", "2025-W02", "2025-W03"):
        reg(week)
    result = rollback(reg.uri, reg.name, moved_by="test")
    assert (result.from_version, result.to_version, result.previous_version) == (3, 2, 1)
    assert aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}
    assert reg.client.get_model_version(reg.name, "3").tags["rolled_back"] == "true"
    # Re-running the rolled-back week must not re-promote it.
    assert reg("2025-W03") == 3 and aliases(reg)[CHAMPION] == 2
    second = rollback(reg.uri, reg.name, moved_by="test")
    assert (second.to_version, second.previous_version) == (1, None)
    assert aliases(reg) == {CHAMPION: 1}
    with pytest.raises(NoPreviousChampionError):
        rollback(reg.uri, reg.name, moved_by="test")


def test_every_alias_move_records_who_or_what_moved_it(reg):
    reg("2025-W01")
    reg("2025-W02")
    rollback(reg.uri, reg.name, moved_by="retrain rollback (OS user ann)")
    moves = [(m["alias"], m["version"], m["by"]) for m in alias_moves(reg.uri, reg.name)]
    assert moves == [
        (CHAMPION, 1, "test"),
        (PREVIOUS, 1, "test"),
        (CHAMPION, 2, "test"),
        (CHAMPION, 1, "retrain rollback (OS user ann)"),
        (PREVIOUS, None, "retrain rollback (OS user ann)"),  # nothing older to roll back to: removed
    ]
    assert reg.client.get_model_version(reg.name, "1").tags[f"{CHAMPION}_set_by"] == "retrain rollback (OS user ann)"
    assert alias_moves(reg.uri, "never-registered") == []


def test_an_alias_move_without_a_mover_is_refused_before_anything_moves(reg):
    reg("2025-W01")
    reg("2025-W02")
    with pytest.raises(RegistryError, match="who or what moved it"):
        rollback(reg.uri, reg.name, moved_by=" ")
    assert aliases(reg) == {CHAMPION: 2, PREVIOUS: 1}


def test_the_move_history_stays_under_mlflows_tag_size(reg):
    reg("2025-W01")
    reg("2025-W02")
    for _ in range(30):  # rollback and re-promote by hand, many times over
        rollback(reg.uri, reg.name, moved_by="x" * 150)
        reg.client.set_registered_model_alias(reg.name, PREVIOUS, "1")
    moves = alias_moves(reg.uri, reg.name)
    assert len(json.dumps(moves)) <= ALIAS_MOVES_MAX_CHARS and moves[-1]["by"] == "x" * 150


def test_only_promote_decisions_register(reg):
    held = evaluate_gates(gate_inputs("drifter"))
    rejected = evaluate_gates(gate_inputs("random"))
    for report in (held, rejected, rejected.to_dict()):
        with pytest.raises(NotPromotableError):
            reg("2025-W01", report)
    assert find_week_version(reg.uri, "2025-W01", reg.name) is None
    # After a person approves the held run, it registers, and the approval is on the version.
    assert reg("2025-W01", approve(held, "ops-lead").to_dict()) == 1
    assert champion_info(reg.uri, reg.name).tags["approved_by"] == "ops-lead"


def test_older_week_never_replaces_a_newer_champion(reg):
    reg("2025-W05")
    with pytest.raises(StaleCandidateError):
        reg("2025-W04")
    assert aliases(reg) == {CHAMPION: 1}


def test_pickled_or_incomplete_model_folders_are_refused(reg, model_dir):
    (model_dir / "pytorch_model.bin").write_bytes(b"\x80\x04pickle")
    with pytest.raises(ModelDirError) as err:
        reg("2025-W01")
    assert err.value.rule == "pickled_weights"
    (model_dir / "pytorch_model.bin").unlink()
    (model_dir / "tokenizer.json").unlink()
    with pytest.raises(ModelDirError) as err:
        reg("2025-W01")
    assert err.value.rule == "no_tokenizer"


def test_the_model_digest_covers_every_file_and_its_name(model_dir, tmp_path):
    import shutil

    digest = model_digest(model_dir)
    assert model_digest(shutil.copytree(model_dir, tmp_path / "copy")) == digest  # the bytes, not the place
    (model_dir / "config.json").write_text('{"model_type": "qwen3"}')
    changed_config = model_digest(model_dir)
    assert changed_config != digest
    (model_dir / "tokenizer.json").rename(model_dir / "tokenizer2.json")
    assert model_digest(model_dir) != changed_config  # same bytes under another name
    (model_dir / "sub").mkdir()
    (model_dir / "sub" / "extra.safetensors").write_bytes(b"")
    assert len({digest, changed_config, model_digest(model_dir)}) == 3


def test_a_weight_file_changed_after_the_decision_is_refused_and_nothing_registered(reg, model_dir, promoted):
    decided = model_digest(model_dir)  # what the week's decision recorded
    weights = model_dir / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelDigestError) as refused:
        reg("2025-W01", **{MODEL_DIGEST_KEY: decided})
    message = str(refused.value)
    assert f"the decision evaluated {decided}" in message and str(model_dir) in message
    assert "nothing registered" in message
    assert versions(reg) == [] and aliases(reg) == {}
    assert not list(model_dir.parent.glob(".model-staged-*"))  # the staged copy is gone
    with pytest.raises(ModelDigestError, match=r"records no model_digest"):
        register_candidate(
            reg.uri, model_dir, "2025-W01", ChampionLineage(window_hash="h"), promoted, name=reg.name, moved_by="test"
        )
    assert versions(reg) == []


def test_the_registered_version_is_the_folder_the_decision_digested(reg, model_dir, tmp_path):
    assert reg("2025-W01") == 1
    info = champion_info(reg.uri, reg.name)
    assert info.tags[MODEL_DIGEST_KEY] == model_digest(model_dir)
    assert model_digest(download_champion(reg.uri, tmp_path / "dl", reg.name)) == model_digest(model_dir)
    base = register_base_champion(
        reg.uri, model_dir, "2025-W01", ChampionLineage(), name=f"{reg.name}-base", moved_by="test"
    )
    mv = reg.client.get_model_version(f"{reg.name}-base", str(base))
    assert mv.tags[MODEL_DIGEST_KEY] == model_digest(model_dir)  # the base is digested as it is uploaded


def test_no_champion_yet(store):
    assert champion_info(store[0], "never-registered") is None


# --- the week's MLflow run (tracking.run_log) --------------------------------------------------


def week_run(report, week="2025-W07", samples=None):
    from dataplane.window import records_frame
    from tests.helpers_gates import make_record
    from tracking.run_log import WeekRun

    frame = records_frame([make_record(i) for i in range(30)]).drop(columns=["text"])
    metrics = {
        s: {
            p: {"success": v, "pass_hat_1": v, "pass_hat_2": v * 0.8, "pass_hat_3": v * 0.7}
            for p, v in (("candidate", 0.7), ("champion", 0.55))
        }
        for s in ("calibration", "shadow")
    }
    return WeekRun(
        week=week,
        window_hash="ab" * 32,
        window_frame=frame,
        gate_report=report,
        params={"grpo": {"learning_rate": 1e-5, "num_generations": 4}, "window_size": 30},
        metrics=metrics,
        failure_modes={"candidate": {"wrong_tool": 0.1, "looping": 0.02}, "champion": {"wrong_tool": 0.2}},
        tool_distribution={
            "candidate": {"get_order_details": 0.6, "think": 0.4},
            "champion": {"get_order_details": 0.7, "think": 0.3},
        },
        reward_curve=[1.0, 1.5, 2.0, 2.2],
        samples=samples
        if samples is not None
        else [
            {
                "interaction_id": "int-1",
                "policy": "candidate",
                "success": True,
                "transcript": "customer: my card is 4111 1111 1111 1111, call 415-555-0100",
            }
        ],
        validation={"success": True, "results": [{"expectation": "rows", "success": True}]},
    )


def test_week_run_logs_stable_metrics_window_input_and_artifacts(store, tmp_path):
    from dataplane.scrub import find_pii
    from tracking.run_log import find_week_runs, load_gate_report, log_week_run

    uri, artifacts = store
    report = evaluate_gates(gate_inputs("random"))  # a rejected candidate keeps every number too
    run_id = log_week_run(uri, week_run(report), experiment_name="weekly-test", artifact_location=artifacts)
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    m = run.data.metrics
    assert m["calibration/candidate/success"] == 0.7 and m["shadow/champion/pass_hat_2"] == pytest.approx(0.44)
    assert m["failure_modes/candidate/wrong_tool"] == 0.1 and m["tools/champion/think"] == 0.3
    assert m["gate/calibration_improvement/passed"] == 0.0
    assert m["gate/calibration_improvement/value"] == report.gate("calibration_improvement").value
    assert [x.value for x in client.get_metric_history(run_id, "train/reward")] == [1.0, 1.5, 2.0, 2.2]
    assert run.data.params["grpo.learning_rate"] == "1e-05" and run.data.tags["gate_decision"] == "reject"
    assert run.info.status == "FINISHED"
    (inp,) = run.inputs.dataset_inputs
    assert inp.dataset.digest == ("ab" * 32)[:32] and inp.dataset.name == "window-2025-W07"
    assert json.loads(inp.dataset.profile)["num_rows"] == 30
    names = {f.path for f in client.list_artifacts(run_id)} | {
        f.path for d in ("plots", "samples", "validation") for f in client.list_artifacts(run_id, d)
    }
    assert {
        "gate_report.json",
        "plots/failure_modes.png",
        "plots/pass_hat_k.png",
        "plots/tool_distribution.png",
        "plots/training_reward.png",
        "samples/trajectories.json",
        "validation/results.json",
    } <= names
    table = Path(client.download_artifacts(run_id, "samples/trajectories.json", str(tmp_path))).read_text()
    assert find_pii(table) == [] and "4111" not in table and "int-1" in table
    assert load_gate_report(uri, run_id) == report
    assert find_week_runs(uri, "2025-W07", "weekly-test") == [run_id]


def test_week_run_refuses_samples_that_still_carry_pii(store, monkeypatch):
    import tracking.run_log as run_log

    monkeypatch.setattr(run_log, "scrub_text", lambda text: text)  # a scrubber that misses everything
    report = evaluate_gates(gate_inputs("better"))
    with pytest.raises(run_log.PIILeakError) as err:
        run_log.log_week_run(
            store[0], week_run(report, week="2025-W08"), experiment_name="weekly-test", artifact_location=store[1]
        )
    assert err.value.column == "transcript" and err.value.row == 0
    assert run_log.find_week_runs(store[0], "2025-W08", "weekly-test") == []


def test_importing_the_registry_and_run_log_leaves_mlflow_unimported():
    # The CLI and every Dagster code-location load import these modules; mlflow costs ~1 s.
    code = "import sys, tracking.registry, tracking.run_log; print(sorted(m for m in sys.modules if m.startswith('mlflow')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]"
