"""Where a week's policy starts: the champion (or the canary beside it), else the base model,
warm-started or not, and the probe that checks it can call tools before any compute is spent on it.

`policy_base`'s Dagster config is built from `PolicyStartSettings`' fields (and SFT's, prefixed
`sft_`), so each knob's default and help text are declared here once.
"""

from __future__ import annotations

from dataclasses import dataclass

from dataplane.settings import setting

SCRATCH_BASE = "scratch"  # `base_model` value: build the tiny model here instead of the shipped agent


@dataclass(frozen=True)
class PolicyStartSettings:
    """Where the week's policy starts: the champion, else the base model (tiny and local by default)."""

    base_model: str = setting(
        "",
        "empty: the shipped agent (models/retail-agent-tiny, checked against its manifest), which can "
        "already act; a local folder (or a hub id, with network): that model; "
        f"{SCRATCH_BASE!r}: a tiny model built here from nothing, which needs sft_warm_start (and copy "
        "pretraining) to act",
    )
    use_champion: bool = setting(True, "start from the MLflow champion when one is registered")
    # A canary passed every gate against the champion and is only waiting for served evidence; a
    # week that trained from the champion again would redo the canary's gain and, if it passed,
    # replace the canary with a model no better than it. Training from the canary compounds the
    # weeks' gains; the gates still judge the week's candidate against the champion, the version
    # that serves the traffic it would replace.
    start_from_canary: bool = setting(
        True, "train from the canary when one serves beside the champion (the gates still compare with the champion)"
    )
    # Off by default: the shipped agent and an instruct model already call tools; a model built
    # from scratch needs it.
    sft_warm_start: bool = setting(
        False, "SFT on the window's trajectories before the first week (when no champion is used)"
    )
    # A freshly built model cannot copy a customer's name or zip into a call; 1000 steps
    # (about 4 minutes on 2 cores) start it.
    copy_pretrain_steps: int = setting(
        0, f"copy pretraining steps of a {SCRATCH_BASE!r} model before SFT (training.tiny.pretrain)"
    )
    probe_prompts: int = setting(8, "train-split first turns the starting policy is probed on")
    min_tool_call_rate: float = setting(
        0.5, "smallest share of probed first turns that must parse as a call of an offered tool"
    )
