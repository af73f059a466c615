"""The Dagster instance under the home folder, with the retrain concurrency rules.

`dagster dev`, the daemon and `retrain run` all use `<home>/dagster`, so runs launched from the
CLI show up in the UI. The run queue allows one weekly retrain and one daily watch at a time (runs
carry the `agent-retrain/pipeline` tag: days watched one after another append to the champion's
MLflow run and the pause in order), and the `retrain` pool admits one training/registration step.

The instance's folder is also where a deployment may keep its gate floors: `gate_floors.yaml`
beside `dagster.yaml` bounds what any run config may set for the promotion gates
(`evaluation.gate_floors`; `RETRAIN_GATE_FLOORS` names another file). Nothing writes it here: the
product's defaults are the floors until a person puts one there.
"""

from __future__ import annotations

import os
from pathlib import Path

from dataplane.home import Home

DAGSTER_YAML = """\
# Written by agent-retrain (orchestration/instance.py); edit freely, it is not overwritten.
concurrency:
  runs:
    max_concurrent_runs: 4
    tag_concurrency_limits:
      - key: "agent-retrain/pipeline"
        value: "weekly"
        limit: 1
      - key: "agent-retrain/pipeline"
        value: "watch"
        limit: 1
  pools:
    default_limit: 1
telemetry:
  enabled: false
nux:
  enabled: false  # no first-visit dialog in the UI (an offline instance cannot join anything)
"""


def prepare_dagster_home(home: Home) -> Path:
    """Create `<home>/dagster` with its dagster.yaml and export DAGSTER_HOME to it."""
    path = home.dagster_home
    path.mkdir(parents=True, exist_ok=True)
    config = path / "dagster.yaml"
    if not config.exists():
        config.write_text(DAGSTER_YAML)
    os.environ["DAGSTER_HOME"] = str(path)
    return path
