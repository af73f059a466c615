"""The containment mode of a registered model, kept in MLflow where every server reads it.

`retrain contain --mode handoff|read-only|off --by NAME --reason TEXT` records the mode as tags of
the registered model (so whatever serves the champion reads one value, wherever it runs) and, for
the history the tags overwrite, one run per change in the `containment` experiment. What each mode
does to served conversations is `training.sandbox.containment`'s.

Who and why are required for every change, lifting included: containment is an operator's act on
production, and the next person needs to know whose it was. The name is checked and masked as a
rater's is (`dataplane.labels.check_rater`), the reason scrubbed as any stored text.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any

from dataplane.labels import check_rater
from dataplane.scrub import scrub_text
from tracking.registry import ensure_experiment, has_code, mlflow_client, mlflow_step
from training.sandbox.containment import check_mode

CONTAINMENT_EXPERIMENT = "containment"
_TAG = "containment_"  # prefix of the registered model's tags: containment_mode, _by, _reason, _at
MAX_REASON_CHARS = 2000


class ContainmentRecordError(ValueError):
    """A containment change that cannot be recorded (no such model, no name, no reason)."""


@dataclass(frozen=True)
class Containment:
    """The mode in force; `by`, `reason` and `at` are None for a model never contained."""

    mode: str = "off"
    by: str | None = None
    reason: str | None = None
    at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def containment_of(tracking_uri: str, model_name: str) -> Containment:
    """The containment mode recorded on `model_name` ("off" when none, or the model does not exist)."""
    from mlflow.exceptions import MlflowException  # heavy (~1 s): only when MLflow is asked

    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "read containment"):
        try:
            tags = dict(client.get_registered_model(model_name).tags)
        except MlflowException as err:
            if has_code(err, "RESOURCE_DOES_NOT_EXIST"):
                return Containment()
            raise
    if f"{_TAG}mode" not in tags:
        return Containment()
    return Containment(
        mode=check_mode(tags[f"{_TAG}mode"]),
        by=tags.get(f"{_TAG}by"),
        reason=tags.get(f"{_TAG}reason"),
        at=tags.get(f"{_TAG}at"),
    )


def set_containment(
    tracking_uri: str, model_name: str, mode: str, by: str, reason: str, artifact_location: str | None = None
) -> Containment:
    """Record `mode` on `model_name` with who set it and why; the new state.

    Raises ContainmentError for an unknown mode and ContainmentRecordError when the model is not
    registered (nothing serves it, so nothing can be contained) or the name or reason is missing."""
    from mlflow.exceptions import MlflowException  # heavy (~1 s): only when MLflow is asked

    mode = check_mode(mode)
    try:
        person = check_rater(by)
    except ValueError as err:
        raise ContainmentRecordError(f"containment needs the name of the person who sets it (--by): {err}") from None
    if not isinstance(reason, str) or not reason.strip():
        raise ContainmentRecordError("containment needs the reason: what was seen and why this mode (--reason)")
    state = Containment(mode, person, scrub_text(reason.strip())[:MAX_REASON_CHARS], _now())
    client = mlflow_client(tracking_uri)
    with mlflow_step(tracking_uri, "set containment"):
        try:
            client.get_registered_model(model_name)
        except MlflowException as err:
            if has_code(err, "RESOURCE_DOES_NOT_EXIST"):
                raise ContainmentRecordError(
                    f"no registered model {model_name!r} in {tracking_uri}: nothing serves it, so nothing to contain"
                ) from None
            raise
        for key, value in state.to_dict().items():
            client.set_registered_model_tag(model_name, f"{_TAG}{key}", value)
        experiment = ensure_experiment(client, CONTAINMENT_EXPERIMENT, artifact_location)
        run = client.create_run(
            experiment, run_name=f"{model_name}: {mode}", tags={"model": model_name, "mode": mode, "by": person}
        )
        for key, value in state.to_dict().items():
            client.log_param(run.info.run_id, key, value)
        client.set_terminated(run.info.run_id)
    return state


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
