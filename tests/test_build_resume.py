"""A stopped agent build resumes from its last finished stage, and only from a stage that matches.

`domains.retail.tiny_agent.resumable_stage` keys a finished stage by its settings and the digest of
the model it started from; anything else runs the stage again.
"""

from __future__ import annotations

import json
from pathlib import Path

from domains.retail.tiny_agent import STAGE_MARKER, resumable_stage


def _model(folder: Path, weights: bytes) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights)
    return folder


class Stage:
    """A stand-in for a training stage: writes the output folder and counts its runs."""

    def __init__(self, out: Path):
        self.out, self.runs = out, 0

    def __call__(self) -> dict:
        self.runs += 1
        _model(self.out, b"trained %d" % self.runs)
        return {"train_loss": 0.5 / self.runs}


def test_a_finished_stage_is_not_run_again_and_its_summary_comes_back(tmp_path):
    source, out = _model(tmp_path / "base", b"w0"), tmp_path / "stage"
    stage = Stage(out)
    first = resumable_stage(source, out, {"steps": 10, "lr": 1e-3}, stage)
    again = resumable_stage(source, out, {"steps": 10, "lr": 1e-3}, stage)
    assert stage.runs == 1
    assert again == first == {"train_loss": 0.5}


def test_other_settings_or_another_starting_model_run_the_stage_again(tmp_path):
    source, out = _model(tmp_path / "base", b"w0"), tmp_path / "stage"
    stage = Stage(out)
    resumable_stage(source, out, {"steps": 10}, stage)
    resumable_stage(source, out, {"steps": 20}, stage)
    assert stage.runs == 2
    _model(source, b"w1")  # the stage before was retrained: its output is not what this one started from
    assert resumable_stage(source, out, {"steps": 20}, stage) == {"train_loss": 0.5 / 3}
    assert stage.runs == 3


def test_a_stage_stopped_before_it_finished_runs_again(tmp_path):
    source, out = _model(tmp_path / "base", b"w0"), tmp_path / "stage"
    _model(out, b"half-written")  # output folder without the marker: the stage never finished
    stage = Stage(out)
    resumable_stage(source, out, {"steps": 10}, stage)
    assert stage.runs == 1
    marker = json.loads((out / STAGE_MARKER).read_text())
    assert marker["key"]["settings"] == {"steps": 10}
