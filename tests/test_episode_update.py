"""The week's supervised step on its good episodes: only training-split verified successes, skipped
below its minimum, a real weight change on the tiny model, and its counts in the week's run."""

from __future__ import annotations

import json

import pytest

from tests.helpers_training import failed_cancellation as _failed
from tests.helpers_training import level1_records, tiny_spec


def _split(record: dict) -> str:
    from dataplane.splits import split_of

    return split_of(record["customer_id"])


def test_good_episodes_are_training_split_verified_successes_in_the_levels_form(world):
    from training.episode_update import good_episodes

    records = level1_records(world, 60, seed=6)
    held_out = [r for r in records if _split(r) != "train"]
    assert held_out, "the fixture must hold a calibration or shadow customer"
    train = [r for r in records if _split(r) == "train"]
    cancel = next(r for r in train if r["intent"] == "cancel_order")
    failed = dict(_failed(cancel), interaction_id="failed")
    labelled = dict(train[0], interaction_id="labelled", human_label={"task_success": False, "rater": "r"})
    no_gold = dict(train[1], interaction_id="no-gold", gold=None)
    episodes = good_episodes([*records, failed, labelled, no_gold], level=1)  # no model_name: any server
    ids = {e["interaction_id"] for e in episodes}
    assert ids == {r["interaction_id"] for r in train}  # every train success, nothing else
    assert not ids & {r["interaction_id"] for r in held_out}  # a held-out customer's success never
    assert not ids & {"failed", "labelled", "no-gold"}
    # Level 1's form: its own opening (the domain's level-1 system prompt), then the recorded turns.
    first = next(e for e in episodes if e["interaction_id"] == train[0]["interaction_id"])
    assert first["messages"][0]["content"] != train[0]["messages"][0]["content"]
    recorded_calls = [m for m in train[0]["messages"] if m.get("tool_calls")]
    assert [m for m in first["messages"] if m.get("tool_calls")] == recorded_calls


def test_a_record_whose_world_cannot_start_is_left_out_and_counted(world):
    """A stored record's state is whatever its producer logged: one the domain's world refuses (a
    customer record without its name) is no episode and must not stop the step."""
    import copy

    from training.episode_update import good_episodes
    from training.sft import UnreplayableError, replay_trajectory

    train = [r for r in level1_records(world, 60, seed=6) if _split(r) == "train"]
    sparse = copy.deepcopy(train[0])
    sparse["interaction_id"] = "sparse-world"
    for user in sparse["initial_state"]["users"].values():
        user["name"] = 7
    with pytest.raises(UnreplayableError, match="sparse-world"):
        replay_trajectory(sparse)
    refused: list[str] = []
    episodes = good_episodes([sparse, *train], level=1, unreplayable=refused)
    assert refused == ["sparse-world"]
    assert {e["interaction_id"] for e in episodes} == {r["interaction_id"] for r in train}


def _turn(name: str, **arguments) -> list[dict]:
    return [
        {"role": "assistant", "content": "", "tool_calls": [{"name": name, "arguments": arguments}]},
        {"role": "tool", "name": name, "content": "(recorded)"},
    ]


def test_an_episode_is_imitated_up_to_where_its_work_was_done_and_only_without_refused_calls(world):
    """A verified success can go on after its work (messages naming other orders, malformed calls):
    those turns are cut, the agent's own closing words kept; a success whose agent made a call the
    environment refused on the way is not imitated; a retried back-end fault is."""
    train = [r for r in level1_records(world, 60, seed=6) if _split(r) == "train"]
    for intent in ("order_status", "cancel_order"):  # the work ends on the message; on the write
        _cut_after_the_work(next(r for r in train if r["intent"] == intent))


def _cut_after_the_work(record: dict) -> None:
    from training.episode_update import good_episodes, worth_imitating
    from training.sandbox.core import INJECTED_ERROR

    work = record["messages"][:-1]  # through the message telling the customer; then "Thank you."
    tail = _turn("send_message_to_customer", message="Order #W0000000 is cancelled.") + _turn("__malformed__", raw="")
    closing = {"role": "assistant", "content": "Goodbye!"}
    tailed = dict(record, messages=[*work, *tail, closing])
    (kept,) = good_episodes([tailed], level=1)
    calls = [c["name"] for m in kept["messages"] for c in m.get("tool_calls") or ()]
    assert calls == [c["name"] for m in work for c in m.get("tool_calls") or ()]
    assert kept["messages"][-1]["role"] == "tool"  # cut on the work's last call: the replay closes it
    # The agent's own closing straight after the work is kept.
    assert worth_imitating(dict(record, messages=[*work, closing]))["messages"][-1] == closing
    # A call refused on the way (before the work was done): not imitated.
    opening = next(i for i, m in enumerate(work) if m["role"] == "user")
    refused = dict(record, messages=[*work[: opening + 1], *_turn("__malformed__", raw="{"), *work[opening + 1 :]])
    assert worth_imitating(refused) is None and good_episodes([refused], level=1) == []
    # A back-end fault the environment injected, retried: the behaviour to learn.
    first_call = work[opening + 1]
    faulted = [*work[: opening + 1], first_call, {"role": "tool", "content": INJECTED_ERROR}, *work[opening + 1 :]]
    assert worth_imitating(dict(record, messages=faulted)) is not None


def test_by_default_only_what_the_registered_model_served_is_imitated(world):
    """A scripted agent's successes (another policy_version) are not the policy's own: the default
    source leaves them out, `any` takes them, and `model` without the model's name is refused."""
    from training.episode_update import EpisodeUpdateSettings, episode_update, good_episodes

    train = [r for r in level1_records(world, 60, seed=6) if _split(r) == "train"]
    ours = [dict(r, policy_version="retail-agent/3") for r in train[: len(train) // 2]]
    scripted = [dict(r, policy_version="rules-agent/legacy") for r in train[len(train) // 2 :]]
    assert ours and scripted
    kept = good_episodes([*ours, *scripted], level=1, model_name="retail-agent")
    assert {e["interaction_id"] for e in kept} == {r["interaction_id"] for r in ours}
    assert len(good_episodes([*ours, *scripted], level=1)) == len(train)
    # A name that is only a prefix of another model's name does not match it.
    assert good_episodes(ours, level=1, model_name="retail") == []
    with pytest.raises(ValueError, match="needs the registered model's name"):
        episode_update("base", ours, None, EpisodeUpdateSettings(), level=1)
    with pytest.raises(ValueError, match="episodes_source"):
        EpisodeUpdateSettings(source="everyone")


def test_the_step_is_skipped_below_its_minimum_or_when_disabled_and_says_why(tmp_path, world):
    from training.episode_update import EpisodeUpdateSettings, episode_update

    records = [r for r in level1_records(world, 30, seed=6) if _split(r) == "train"][:5]
    logged: list[str] = []
    update = episode_update(
        "base",
        records,
        tmp_path / "ep",
        EpisodeUpdateSettings(min_episodes=6, source="any"),
        level=1,
        log=logged.append,
    )
    assert (update.model_path, update.episodes, update.steps, update.train_loss) == ("base", 5, 0, None)
    assert "fewer than episodes_min_episodes 6" in update.skipped and update.skipped in logged[0]
    assert update.metrics() == {
        "sft/episodes": 5.0,
        "sft/candidates": 5.0,
        "sft/steps": 0.0,
        "sft/seconds": 0.0,
        "sft/unreplayable": 0.0,
    }
    off = episode_update("base", records, tmp_path / "ep", EpisodeUpdateSettings(enabled=False, source="any"), level=1)
    assert off.model_path == "base" and "disabled" in off.skipped
    assert not (tmp_path / "ep").exists()


@pytest.mark.slow
def test_the_step_moves_the_tiny_models_weights_and_a_retry_reuses_it(tmp_path, world):
    from assets.training import weights_digest
    from training.episode_update import SUMMARY_FILE, EpisodeUpdateSettings, episode_update
    from training.tiny.bootstrap import build_tiny_policy

    records = level1_records(world, 40, seed=6)
    base = build_tiny_policy(tmp_path / "base", records, tiny_spec())
    settings = EpisodeUpdateSettings(steps=4, batch_size=4, min_episodes=8, source="any")
    update = episode_update(base, records, tmp_path / "ep", settings, level=1, torch_threads=1)
    assert update.skipped is None and update.model_path == str(tmp_path / "ep")
    assert update.episodes == sum(_split(r) == "train" for r in records) and update.steps == 4
    assert update.train_loss > 0 and update.seconds > 0
    assert weights_digest(update.model_path) != weights_digest(str(base))
    assert json.loads((tmp_path / "ep" / SUMMARY_FILE).read_text())["episodes"] == update.episodes
    # A retry of the run finds the folder trained: the same result, no second training.
    digest = weights_digest(update.model_path)
    assert episode_update(base, [], tmp_path / "ep", settings, level=1) == update
    assert weights_digest(update.model_path) == digest


def test_the_counts_and_the_mix_go_to_the_weeks_run_and_the_metadata(tmp_path):
    from mlflow import MlflowClient

    from assets.training import _log_inputs
    from tracking.run_log import open_week_run
    from training.curriculum import week_mix
    from training.episode_update import EpisodeUpdate

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = open_week_run(uri, "2026-11-16", "dagster-run", artifact_location=(tmp_path / "artifacts").as_uri())
    update = EpisodeUpdate("/models/ep", episodes=42, candidates=50, steps=20, train_loss=0.7, seconds=9.5)
    mix = week_mix(
        {"1": 1.0},
        {"order_status": 10, "cancel_order": 10},
        {"cancel_order": 4},
        {"1": 4},
        judged=20,
        personas_seen={"polite forthcoming": 12, "": 8},
        failed_by_persona={"polite forthcoming": 4},
        failed_tasks={"a", "b", "c", "d"},
    )
    metadata = _log_inputs(uri, run_id, update, mix)
    client = MlflowClient(tracking_uri=uri)
    metrics = client.get_run(run_id).data.metrics
    assert (metrics["sft/episodes"], metrics["sft/steps"], metrics["sft/train_loss"]) == (42, 20, 0.7)
    assert metrics["mix/intent/cancel_order"] == pytest.approx(0.9)
    assert metrics["mix/level/1"] == 1.0
    # Persona names are free text: each becomes one stable metric name part.
    assert metrics["mix/persona/polite_forthcoming"] == pytest.approx(0.9)
    assert metrics["mix/persona/unnamed"] == pytest.approx(0.1)
    assert metrics["mix/failed_task_share"] == pytest.approx(0.9)
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"episode_update.json", "curriculum_weights.json"} <= artifacts
    assert (metadata["sft_episodes"], metadata["sft_steps"], metadata["sft_skipped"]) == (42, 20, "")
    assert "mix/intent/cancel_order | 0.900" in metadata["curriculum_weights"].value


def test_free_text_personas_of_any_length_log_as_distinct_short_metrics(tmp_path):
    """A producer's persona is free text: two long ones that share their first 400 characters
    still log (MLflow refuses a metric name over 250 characters, and the batch with it) under two
    names; so does a step that left records out."""
    from mlflow import MlflowClient

    from assets.training import _log_inputs
    from tracking.run_log import MAX_METRIC_KEY, metric_key, metric_part, open_week_run
    from training.curriculum import week_mix
    from training.episode_update import EpisodeUpdate

    long_a, long_b = "angry " * 70 + "a", "angry " * 70 + "b"
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_id = open_week_run(uri, "2026-11-16", "dagster-run", artifact_location=(tmp_path / "artifacts").as_uri())
    update = EpisodeUpdate("/models/ep", episodes=42, candidates=50, steps=20, unreplayable=3)
    mix = week_mix(
        {"1": 1.0},
        {"order_status": 10},
        {},
        {},
        judged=20,
        personas_seen={long_a: 10, long_b: 10},
        failed_by_persona={long_a: 2},
    )
    _log_inputs(uri, run_id, update, mix)
    metrics = MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics
    personas = {k: v for k, v in metrics.items() if k.startswith("mix/persona/")}
    assert len(personas) == 2 and max(map(len, personas)) <= 12 + 64
    assert set(personas) == {f"mix/persona/{metric_part(long_a)}", f"mix/persona/{metric_part(long_b)}"}
    assert metrics["sft/unreplayable"] == 3
    assert metric_part("polite forthcoming") == "polite_forthcoming"  # short text unchanged
    with pytest.raises(ValueError, match="over MLflow"):
        metric_key("tools", "x" * MAX_METRIC_KEY)
