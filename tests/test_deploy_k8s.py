"""The Kubernetes code location (deploy/k8s_location.py), the Helm values that configure it, and the
companion chart deploy/helm/retrain-services (MLflow with basic auth, the NetworkPolicies).

No cluster here: these check what can be checked without one. The location loads with the
training step's client swapped and nothing else changed; the training pod described in
deploy/helm/values.yaml is a valid Kubernetes PodSpec as dagster-k8s builds the pod from it; the
launcher swap turns the asset's `python -m training.grpo` into `accelerate launch -m training.grpo`;
missing or malformed settings are refused naming the variable. The companion chart's templates are
rendered (tests.helpers_helm: no helm binary here) and read as the objects a cluster would get:
MLflow's credentials come from the `retrain-secrets` secret, and the policies admit the pipeline's
own pods and the labelled namespaces and pods only.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest
import yaml
from dagster_k8s.pipes import build_pod_body
from dagster_k8s.utils import get_common_labels

from deploy.k8s_location import (
    TRAINING_CLIENT_KEY,
    TrainingPodClient,
    TrainingPodSettingsError,
    kubernetes_definitions,
    training_pod_client_from_env,
)
from orchestration.definitions import defs as embedded_defs
from tests.conftest import REPO_ROOT
from tests.helpers_helm import UnsupportedTemplate, render, render_chart

VALUES = yaml.safe_load((REPO_ROOT / "deploy" / "helm" / "values.yaml").read_text())
SERVICES_CHART = REPO_ROOT / "deploy" / "helm" / "retrain-services"
NAMESPACE = "retrain"
SECRET = "retrain-secrets"
TRAINING_COMMAND = ["/opt/venv/bin/python", "-m", "training.grpo", "--config", "/retrain/runs/w/grpo_config.json"]


def user_deployment() -> dict:
    [deployment] = VALUES["dagster-user-deployments"]["deployments"]
    return deployment


def deployment_env() -> dict[str, str]:
    return {item["name"]: item["value"] for item in user_deployment()["env"]}


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
    # The trainer logs to MLflow, which signs every request in: the pod gets the credentials' secret.
    assert [e.secret_ref.name for e in container.env_from] == [SECRET]


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


# ---------- the companion chart: MLflow with basic auth, and the NetworkPolicies ----------


def _objects(**overrides) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in render_chart(SERVICES_CHART, NAMESPACE, overrides)}


def _env(container: dict) -> dict[str, dict]:
    return {item["name"]: item for item in container["env"]}


def test_mlflow_runs_its_basic_auth_app_with_credentials_from_the_secret():
    objects = _objects()
    deployment, service = objects[("Deployment", "mlflow")], objects[("Service", "mlflow")]
    pod = deployment["spec"]["template"]
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["sh", "/app/deploy/mlflow-server.sh"]  # the script runs --app-name basic-auth
    env = _env(container)
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_FLASK_SERVER_SECRET_KEY"):
        assert env[name]["valueFrom"]["secretKeyRef"] == {"name": SECRET, "key": name}, name
        assert "value" not in env[name]  # never a literal in the chart
    for name in ("MLFLOW_BACKEND_STORE_URI", "MLFLOW_AUTH_DATABASE_URI"):
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "mlflow-backend", name
    assert env["MLFLOW_HOST"]["value"] == "0.0.0.0"  # the pod's address; the NetworkPolicy decides who reaches it
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"  # the auth app's one open route
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    # The code location and its pods talk to this service, signed in with the same secret's keys.
    assert deployment_env()["MLFLOW_TRACKING_URI"] == f"http://mlflow.{NAMESPACE}.svc.cluster.local:5000"
    assert {"name": SECRET} in user_deployment()["envSecrets"]
    assert user_deployment()["includeConfigInLaunchedRuns"]["enabled"]  # run pods inherit envSecrets


def _admits(policy: dict, pod_labels: dict, namespace_labels: dict | None = None) -> bool:
    """Whether `policy` lets in a pod with `pod_labels`, in the policy's namespace (namespace_labels
    None) or in another namespace with `namespace_labels`; NetworkPolicy's own rules for peers."""
    for rule in policy["spec"]["ingress"]:
        for peer in rule["from"]:
            assert "ipBlock" not in peer, "an address range would admit pods by address, not by label"
            pods = peer.get("podSelector", {}).get("matchLabels")
            spaces = peer.get("namespaceSelector", {}).get("matchLabels")
            assert pods or spaces, f"an empty selector admits everything: {peer}"
            if spaces is None and namespace_labels is not None:
                continue  # a podSelector alone means pods of the policy's own namespace
            if spaces is not None and not (namespace_labels and spaces.items() <= namespace_labels.items()):
                continue
            if pods is None or pods.items() <= pod_labels.items():
                return True
    return False


def test_the_dagster_ui_and_mlflow_admit_only_labelled_namespaces_and_the_pipelines_pods():
    objects = _objects()
    webserver, mlflow = (
        objects[("NetworkPolicy", "dagster-webserver-ingress")],
        objects[("NetworkPolicy", "mlflow-ingress")],
    )
    for policy in (webserver, mlflow):
        assert policy["metadata"]["namespace"] == NAMESPACE and policy["spec"]["policyTypes"] == ["Ingress"]
    # Each policy selects the pods it protects: the Dagster chart's webserver pods, the chart's MLflow pods.
    assert webserver["spec"]["podSelector"]["matchLabels"] == {"component": "dagster-webserver"}
    mlflow_pod = objects[("Deployment", "mlflow")]["spec"]["template"]["metadata"]["labels"]
    assert mlflow["spec"]["podSelector"]["matchLabels"].items() <= mlflow_pod.items()

    # Who reaches the UI: a labelled namespace (an ingress controller's, a VPN gateway's) or pod only.
    assert _admits(webserver, {}, {"agent-retrain/dagster-ui": "allowed"})
    assert _admits(webserver, {"agent-retrain/dagster-ui": "allowed"})
    assert not _admits(webserver, {"app": "anything"}, {"kubernetes.io/metadata.name": "other-team"})
    assert not _admits(webserver, get_common_labels())  # not even the pipeline's own run pods
    # Who reaches MLflow: the run and training pods dagster-k8s labels, the code server, labelled ones.
    training_pod = build_pod_body(
        pod_name="dagster-pipes-test",
        image="i",
        command=TRAINING_COMMAND,
        env_vars={},
        base_pod_meta=None,
        base_pod_spec=training_pod_client_from_env(deployment_env()).pod_spec,
    )
    assert _admits(mlflow, training_pod.metadata.labels) and _admits(mlflow, get_common_labels())
    assert _admits(mlflow, {"component": "user-deployments", "deployment": "agent-retrain"})
    assert _admits(mlflow, {}, {"agent-retrain/mlflow": "allowed"})
    assert not _admits(mlflow, {"component": "user-deployments"}, {"kubernetes.io/metadata.name": "other-team"})
    assert not _admits(mlflow, {"app": "anything"})
    assert [rule["ports"] for rule in mlflow["spec"]["ingress"]] == [[{"port": 5000}]]


def test_the_policies_can_be_left_out_and_the_renderer_refuses_what_it_does_not_know():
    kinds = {kind for kind, _ in _objects(networkPolicy={"enabled": False})}
    assert kinds == {"Deployment", "Service"}
    with pytest.raises(UnsupportedTemplate, match=r"include"):
        render('{{ include "x" . }}', {}, NAMESPACE)
