"""The Kubernetes code location (deploy/k8s_location.py) and the Helm values that configure it.

No cluster here: these check what can be checked without one. The location loads with the
training step's client swapped and nothing else changed; the training pod described in
deploy/helm/values.yaml is a valid Kubernetes PodSpec as dagster-k8s builds the pod from it; the
launcher swap turns the asset's `python -m training.grpo` into `accelerate launch -m training.grpo`;
missing or malformed settings are refused naming the variable.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from dagster_k8s.pipes import build_pod_body

from deploy.k8s_location import (
    TRAINING_CLIENT_KEY,
    TrainingPodClient,
    TrainingPodSettingsError,
    kubernetes_definitions,
    training_pod_client_from_env,
)
from orchestration.definitions import defs as embedded_defs
from tests.conftest import REPO_ROOT

VALUES = yaml.safe_load((REPO_ROOT / "deploy" / "helm" / "values.yaml").read_text())
TRAINING_COMMAND = ["/opt/venv/bin/python", "-m", "training.grpo", "--config", "/retrain/runs/w/grpo_config.json"]


def deployment_env() -> dict[str, str]:
    [deployment] = VALUES["dagster-user-deployments"]["deployments"]
    return {item["name"]: item["value"] for item in deployment["env"]}


def test_the_location_swaps_only_the_training_client():
    defs = kubernetes_definitions(deployment_env())
    assert isinstance(defs.resources[TRAINING_CLIENT_KEY], TrainingPodClient)
    assert {k: v for k, v in defs.resources.items() if k != TRAINING_CLIENT_KEY} == {
        k: v for k, v in embedded_defs.resources.items() if k != TRAINING_CLIENT_KEY
    }
    job = defs.resolve_job_def("weekly_retrain")
    assert job.tags == embedded_defs.resolve_job_def("weekly_retrain").tags
    assert {s.name for s in defs.schedules} == {"weekly_retrain_schedule", "daily_watch_schedule"}
    assert dg.AssetKey("grpo_candidate") in defs.resolve_asset_graph().get_all_asset_keys()


def test_the_helm_training_pod_is_a_valid_pod_spec():
    client = training_pod_client_from_env(deployment_env())
    body = build_pod_body(
        pod_name="dagster-pipes-test",
        image=client.image,
        command=client.pod_command(TRAINING_COMMAND),
        env_vars={"RETRAIN_REPORTER": "assets.pipes_reporter:PipesReporter"},
        base_pod_meta=None,
        base_pod_spec=client.pod_spec,
    )
    [container] = body.spec.containers
    assert container.image == "REGISTRY/agent-retrain:0.1.0-cuda"
    assert container.command == TRAINING_COMMAND
    assert str(container.resources.limits["nvidia.com/gpu"]) == "1"
    assert {m.mount_path for m in container.volume_mounts} == {"/retrain", "/models"}
    assert {v.persistent_volume_claim.claim_name for v in body.spec.volumes} == {"retrain-home", "retrain-models"}
    assert body.spec.restart_policy == "Never"


def test_a_launcher_replaces_the_interpreter():
    client = TrainingPodClient(
        image="i", namespace="n", pod_spec={}, launcher=["accelerate", "launch", "--config_file", "multi.yaml"]
    )
    assert client.pod_command(TRAINING_COMMAND) == [
        "accelerate",
        "launch",
        "--config_file",
        "multi.yaml",
        "-m",
        "training.grpo",
        "--config",
        "/retrain/runs/w/grpo_config.json",
    ]
    with pytest.raises(TrainingPodSettingsError, match="python -m module"):
        client.pod_command(["/opt/venv/bin/python", "train.py"])


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "RETRAIN_TRAINING_IMAGE is not set"),
        (
            {"RETRAIN_TRAINING_IMAGE": "i", "RETRAIN_TRAINING_POD_SPEC_JSON": "{nope"},
            "RETRAIN_TRAINING_POD_SPEC_JSON is not JSON",
        ),
        ({"RETRAIN_TRAINING_IMAGE": "i", "RETRAIN_TRAINING_POD_SPEC_JSON": "[]"}, "must be a JSON object"),
    ],
)
def test_bad_training_pod_settings_are_named(env, message):
    with pytest.raises(TrainingPodSettingsError, match=message):
        training_pod_client_from_env(env)


def test_helm_values_carry_the_instance_settings_of_deploy_dagster_yaml():
    instance = yaml.safe_load((REPO_ROOT / "deploy" / "dagster.yaml").read_text())
    runs = VALUES["concurrency"]["runs"]
    assert runs["maxConcurrentRuns"] == instance["concurrency"]["runs"]["max_concurrent_runs"]
    assert runs["tagConcurrencyLimits"] == instance["concurrency"]["runs"]["tag_concurrency_limits"]
    assert VALUES["concurrency"]["pools"]["defaultLimit"] == instance["concurrency"]["pools"]["default_limit"]
    retries = VALUES["dagsterDaemon"]["runRetries"]
    assert (retries["maxRetries"], retries["retryOnAssetOrOpFailure"]) == (
        instance["run_retries"]["max_retries"],
        instance["run_retries"]["retry_on_asset_or_op_failure"],
    )
    monitoring = VALUES["dagsterDaemon"]["runMonitoring"]
    assert monitoring["freeSlotsAfterRunEndSeconds"] == instance["run_monitoring"]["free_slots_after_run_end_seconds"]
    assert VALUES["postgresql"]["postgresqlScheme"] == instance["storage"]["postgres"]["postgres_db"]["scheme"]
    assert VALUES["runLauncher"]["type"] == "K8sRunLauncher"
    assert json.loads(deployment_env()["RETRAIN_TRAINING_POD_SPEC_JSON"])["restartPolicy"] == "Never"
