"""Registration, aliases and rollback against an `mlflow server` whose backend store is PostgreSQL.

The server is a real process on 127.0.0.1 with its own, fresh database. A registration that
fails after creating the version (the `champion` alias move refused once) is retried, as the
asset's retry policy would: the retry finds the same version by its week tag and finishes the
moves, so nothing is registered twice. The aliases are read back from PostgreSQL itself.
"""

from __future__ import annotations

import numpy as np
import pytest
from mlflow import MlflowClient
from mlflow.exceptions import MlflowException
from safetensors.numpy import save_file

from dataplane.hashing import model_digest
from evaluation.decision import ChampionLineage
from evaluation.gates import evaluate_gates
from tests.helpers_gates import gate_inputs
from tests.helpers_postgres import fresh_database, mlflow_server, query, require_postgres
from tracking.registry import RegistryError, champion_info, find_week_version, register_candidate, rollback

pytestmark = [pytest.mark.postgres, pytest.mark.server, pytest.mark.slow, pytest.mark.timeout(600)]


@pytest.fixture()
def server(tmp_path):
    require_postgres()
    with fresh_database("retrain_registry") as db, mlflow_server(db, tmp_path / "artifacts", tmp_path / "logs") as uri:
        yield uri, db


def aliases_in_postgres(db: str) -> dict[str, int]:
    return dict(query(db, "select alias, version from registered_model_aliases where name = %s", ("retail-agent",)))


def test_registration_aliases_and_rollback_are_idempotent_across_retries(server, tmp_path, monkeypatch):
    uri, db = server
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    model = tmp_path / "model"
    model.mkdir()
    save_file({"w": np.ones((2, 2), dtype=np.float32)}, str(model / "model.safetensors"))
    (model / "tokenizer.json").write_text("{}")
    report = evaluate_gates(gate_inputs("better"))

    def register(week: str) -> int:
        lineage = ChampionLineage(window_hash=f"h-{week}", model_digest=model_digest(model))
        return register_candidate(uri, model, week, lineage, report, moved_by="test")

    assert register("2026-11-16") == 1
    assert register("2026-11-23") == 2
    assert aliases_in_postgres(db) == {"champion": 2, "previous_champion": 1}

    # Week 3's registration dies between "version created" and "champion moved".
    real_set_alias = MlflowClient.set_registered_model_alias

    def refuse_champion(self, name, alias, version):
        if alias == "champion":
            raise MlflowException("injected: the server went away before champion moved")
        return real_set_alias(self, name, alias, version)

    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", refuse_champion)
    with pytest.raises(RegistryError, match="set alias champion"):
        register("2026-11-30")
    assert find_week_version(uri, "2026-11-30") == 3  # the version exists, not yet promoted
    assert champion_info(uri).version == 2  # serving is unaffected by the half-done attempt
    monkeypatch.setattr(MlflowClient, "set_registered_model_alias", real_set_alias)

    assert register("2026-11-30") == 3  # the retry finishes the moves on the same version
    assert register("2026-11-30") == 3
    assert aliases_in_postgres(db) == {"champion": 3, "previous_champion": 2}
    assert query(db, "select count(*) from model_versions where name = %s", ("retail-agent",)) == [(3,)]

    assert rollback(uri, moved_by="test").to_version == 2
    assert aliases_in_postgres(db) == {"champion": 2, "previous_champion": 1}
    assert register("2026-11-30") == 3  # a retried registration never re-promotes a rolled-back week
    assert champion_info(uri).version == 2
