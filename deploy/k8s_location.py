"""The code location a Kubernetes deployment serves: `orchestration.definitions` with the training
step's Pipes client swapped for one that runs `python -m training.grpo` in a pod of its own.

The user-code image serves it (`dagster code-server start -m deploy.k8s_location`, see
deploy/helm/values.yaml). Everything else (assets, checks, job, schedule, sensors, the other
resources) is the embedded deployment's, unchanged. The training pod is described by environment
variables of the user-code deployment, which the Kubernetes run launcher passes on to run pods:

    RETRAIN_TRAINING_IMAGE          the image for the training pod (normally the user-code image)
    RETRAIN_TRAINING_NAMESPACE      where to create it (default: the run's namespace, else "default")
    RETRAIN_TRAINING_POD_SPEC_JSON  Kubernetes PodSpec fields as JSON: GPU limits, node selector,
                                    tolerations, and the volume holding RETRAIN_HOME (the training
                                    config, records and checkpoints are files there)
    RETRAIN_TRAINING_LAUNCHER       optional command in place of `python`, e.g.
                                    "accelerate launch --config_file /app/training/accelerate/multi_gpu_zero2.yaml"
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

import dagster as dg
from dagster_k8s import PipesK8sClient

from orchestration.definitions import defs as embedded_defs
from orchestration.environment import value

TRAINING_CLIENT_KEY = "pipes_subprocess_client"  # the resource key grpo_candidate asks for
NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


class TrainingPodSettingsError(ValueError):
    """A RETRAIN_TRAINING_* variable that is missing or malformed (the message names it)."""


class TrainingPodClient(PipesK8sClient):
    """PipesK8sClient that takes the subprocess client's call (`command`, `context`, `env`) and runs
    the command in a pod of the configured image, with the configured pod spec."""

    def __init__(
        self, image: str, namespace: str, pod_spec: Mapping[str, Any], launcher: Sequence[str] = (), **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.image, self.namespace, self.pod_spec, self.launcher = image, namespace, dict(pod_spec), list(launcher)

    def pod_command(self, command: Sequence[str]) -> list[str]:
        """`command` with the launcher in place of the interpreter (`python -m X` -> `accelerate launch -m X`)."""
        command = list(command)
        if not self.launcher:
            return command
        if len(command) < 3 or command[1] != "-m":
            raise TrainingPodSettingsError(
                f"RETRAIN_TRAINING_LAUNCHER needs a `python -m module ...` command to launch, got {command}"
            )
        return [*self.launcher, *command[1:]]

    def run(  # type: ignore[override] - the subprocess client's keywords, as grpo_candidate calls it
        self,
        *,
        context: dg.AssetExecutionContext | dg.OpExecutionContext,
        command: Sequence[str],
        env: Mapping[str, str] | None = None,
        extras: Mapping[str, Any] | None = None,
    ) -> dg.PipesClientCompletedInvocation:
        return super().run(
            context=context,
            extras=extras,
            image=self.image,
            command=self.pod_command(command),
            namespace=self.namespace,
            env=env,
            base_pod_spec=self.pod_spec,
        )


def _current_namespace() -> str:
    try:
        with open(NAMESPACE_FILE) as handle:
            return handle.read().strip() or "default"
    except FileNotFoundError:
        return "default"


def training_pod_client_from_env(environ: Mapping[str, str] | None = None) -> TrainingPodClient:
    image = (value("RETRAIN_TRAINING_IMAGE", environ) or "").strip()
    if not image:
        raise TrainingPodSettingsError("RETRAIN_TRAINING_IMAGE is not set: name the image the training pod runs")
    raw_spec = value("RETRAIN_TRAINING_POD_SPEC_JSON", environ) or "{}"
    try:
        pod_spec = json.loads(raw_spec)
    except json.JSONDecodeError as err:
        raise TrainingPodSettingsError(
            f"RETRAIN_TRAINING_POD_SPEC_JSON is not JSON ({err}): {raw_spec[:200]!r}"
        ) from err
    if not isinstance(pod_spec, dict):
        raise TrainingPodSettingsError(f"RETRAIN_TRAINING_POD_SPEC_JSON must be a JSON object, got {raw_spec[:200]!r}")
    return TrainingPodClient(
        image=image,
        namespace=value("RETRAIN_TRAINING_NAMESPACE", environ) or _current_namespace(),
        pod_spec=pod_spec,
        launcher=shlex.split(value("RETRAIN_TRAINING_LAUNCHER", environ) or ""),
    )


def kubernetes_definitions(environ: Mapping[str, str] | None = None) -> dg.Definitions:
    """The embedded definitions with the training step's Pipes client running pods."""
    return dg.Definitions(
        assets=embedded_defs.assets,
        asset_checks=embedded_defs.asset_checks,
        jobs=embedded_defs.jobs,
        schedules=embedded_defs.schedules,
        sensors=embedded_defs.sensors,
        loggers=embedded_defs.loggers,
        resources={**(embedded_defs.resources or {}), TRAINING_CLIENT_KEY: training_pod_client_from_env(environ)},
    )


@dg.definitions
def defs() -> dg.Definitions:
    # Built when the code server loads the location, so a missing or malformed RETRAIN_TRAINING_*
    # variable shows up there as a load error naming the variable.
    return kubernetes_definitions()
