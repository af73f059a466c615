"""The shipped production agent: its folder matches its manifest, loading refuses any mismatch,
and its recipe's production log carries the mistakes it states."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers_training import level1_records, tiny_spec


@pytest.fixture(scope="module")
def shipped_like(tmp_path_factory, world):
    """A folder shaped like the shipped agent (a freshly built tiny model, float16 weights) with a
    manifest, so the checks run without the real build."""
    from domains.retail.tiny_agent import SHIPPED_FILES, WEIGHTS_FILE, store_half
    from training.tiny.bootstrap import build_tiny_policy
    from training.tiny.manifest import write_manifest

    root = tmp_path_factory.mktemp("shipped")
    built = build_tiny_policy(root / "built", level1_records(world, 20, seed=2), tiny_spec())
    folder = root / "agent"
    folder.mkdir()
    for name in SHIPPED_FILES:
        if name == WEIGHTS_FILE:
            store_half(built / name, folder / name)
        else:
            shutil.copyfile(built / name, folder / name)
    write_manifest(folder, recipe={"seed": 0}, build={"cpu": "test"}, figures={"success": 0.0, "n": 0})
    return folder


@pytest.fixture()
def copy_of(shipped_like, tmp_path):
    target = tmp_path / "agent"
    shutil.copytree(shipped_like, target)
    return target


def test_the_shipped_folder_matches_its_manifest_and_holds_the_measured_figures():
    from domains.retail.tiny_agent import SHIPPED_FILES
    from training.tiny.manifest import (
        MAX_SHIPPED_BYTES,
        SHIPPED_AGENT_DIR,
        manifest_digest,
        shipped_agent_path,
        verify_shipped,
    )

    manifest = verify_shipped(SHIPPED_AGENT_DIR)
    assert shipped_agent_path() == SHIPPED_AGENT_DIR
    assert manifest["manifest_sha256"] == manifest_digest(manifest)  # the shipped manifest is sealed
    assert sorted(manifest["files"]) == sorted(SHIPPED_FILES)
    assert sum(entry["bytes"] for entry in manifest["files"].values()) <= MAX_SHIPPED_BYTES
    assert manifest["rebuild_command"].startswith("python bench/shipped_agent.py build")
    recipe = manifest["recipe"]
    # The recipe's defaults are the shipped agent's (its docstring says so, and the benches that
    # rebuild its held-out customers from the manifest refuse any difference).
    from domains.retail.tiny_agent import AgentRecipe

    assert recipe == AgentRecipe().as_dict()
    assert recipe["mistake_rates"]["unnecessary_escalation"] > 0
    assert recipe["mistake_rates"]["skipped_authentication"] > 0
    build = manifest["build"]
    for key in ("cpu", "cores", "torch", "transformers", "torch_threads"):
        assert key in build, key
    figures = manifest["figures"]
    shipped = figures["shipped"]
    assert shipped["tasks"] >= 100
    assert 0.0 <= shipped["success_rate"] <= 1.0 and shipped["ci95"] > 0
    assert "pass_hat_2" in shipped
    shares = shipped["failure_mode_shares"]
    assert sum(shares.values()) == pytest.approx(1 - shipped["success_rate"], abs=1e-9)
    assert figures["expert_sft"]["tasks"] == shipped["tasks"]


def test_the_shipped_agent_loads_in_float32_from_float16_weights(shipped_like):
    import torch
    from safetensors import safe_open

    from training.tiny.manifest import load_shipped_agent

    with safe_open(str(shipped_like / "model.safetensors"), framework="pt") as weights:
        assert {weights.get_tensor(name).dtype for name in weights.keys()} == {torch.float16}  # noqa: SIM118
    model, tokenizer = load_shipped_agent(shipped_like)
    assert model.dtype == torch.float32
    assert model.config.vocab_size == len(tokenizer)


def test_a_changed_byte_is_refused_naming_the_file(copy_of):
    from training.tiny.manifest import ManifestError, load_shipped_agent

    path = copy_of / "tokenizer.json"
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(ManifestError, match=r"sha256_mismatch: tokenizer\.json has sha256") as error:
        load_shipped_agent(copy_of)
    assert error.value.rule == "sha256_mismatch"


def test_a_missing_file_is_refused_naming_it(copy_of):
    from training.tiny.manifest import ManifestError, shipped_agent_path

    (copy_of / "chat_template.jinja").unlink()
    with pytest.raises(ManifestError, match=r"missing_file: chat_template\.jinja is listed"):
        shipped_agent_path(copy_of)


@pytest.mark.parametrize("name", ["pytorch_model.bin", "notes.txt"])
def test_an_extra_file_is_refused_naming_it(copy_of, name):
    from training.tiny.manifest import ManifestError, verify_shipped

    (copy_of / name).write_bytes(b"extra")
    with pytest.raises(ManifestError, match=rf"extra_file: {name} is not listed"):
        verify_shipped(copy_of)


def test_a_missing_or_unreadable_manifest_is_refused(copy_of):
    from training.tiny.manifest import MANIFEST_NAME, ManifestError, verify_shipped

    (copy_of / MANIFEST_NAME).write_text("{not json")
    with pytest.raises(ManifestError, match="bad_manifest"):
        verify_shipped(copy_of)
    (copy_of / MANIFEST_NAME).unlink()
    with pytest.raises(ManifestError, match="no_manifest"):
        verify_shipped(copy_of)


def test_another_tokenizer_format_is_refused(copy_of):
    from training.tiny.bootstrap import TOKENIZER_FORMAT
    from training.tiny.manifest import (
        MANIFEST_DIGEST_KEY,
        MANIFEST_NAME,
        ManifestError,
        manifest_digest,
        verify_shipped,
    )

    manifest = json.loads((copy_of / MANIFEST_NAME).read_text())
    manifest["tokenizer_format"] = TOKENIZER_FORMAT - 1
    manifest[MANIFEST_DIGEST_KEY] = manifest_digest(manifest)  # a manifest written so, not edited after
    (copy_of / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match="tokenizer_format"):
        verify_shipped(copy_of)


@pytest.mark.parametrize(
    "edit",
    [
        lambda m: m["figures"].update(success=0.99),  # a better figure than was measured
        lambda m: m["recipe"].update(seed=1),
        lambda m: m["files"]["tokenizer.json"].update(bytes=1),
        lambda m: m.pop("rebuild_command"),
    ],
)
def test_a_manifest_edited_after_it_was_written_is_refused(copy_of, edit):
    from training.tiny.manifest import MANIFEST_NAME, ManifestError, load_shipped_agent

    manifest = json.loads((copy_of / MANIFEST_NAME).read_text())
    edit(manifest)
    (copy_of / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    with pytest.raises(ManifestError) as error:
        load_shipped_agent(copy_of)
    assert error.value.rule in ("manifest_digest", "bad_manifest")
    if error.value.rule == "manifest_digest":
        assert "the manifest was changed after it was written" in str(error.value)


def test_weights_swapped_with_their_recorded_sha256_updated_are_refused(copy_of, tmp_path):
    """Changing a file and its recorded sha256 together still breaks the manifest's own digest."""
    from dataplane.hashing import sha256_file
    from training.tiny.manifest import MANIFEST_NAME, ManifestError, verify_shipped

    path = copy_of / "tokenizer.json"
    data = bytearray(path.read_bytes())
    data[100] ^= 1
    path.write_bytes(bytes(data))
    manifest = json.loads((copy_of / MANIFEST_NAME).read_text())
    manifest["files"]["tokenizer.json"]["sha256"] = sha256_file(path)
    (copy_of / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2, sort_keys=True))
    with pytest.raises(ManifestError, match=r"manifest_digest: manifest\.json's content has sha256"):
        verify_shipped(copy_of)


def test_an_unsealed_manifest_is_refused_and_sealing_checks_the_files_first(copy_of):
    from training.tiny.manifest import (
        MANIFEST_DIGEST_KEY,
        MANIFEST_NAME,
        ManifestError,
        seal_manifest,
        verify_shipped,
    )

    manifest = json.loads((copy_of / MANIFEST_NAME).read_text())
    del manifest[MANIFEST_DIGEST_KEY]
    (copy_of / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ManifestError, match=f"manifest_digest: manifest.json carries no {MANIFEST_DIGEST_KEY}"):
        verify_shipped(copy_of)
    (copy_of / "config.json").write_text("{}")
    with pytest.raises(ManifestError, match=r"sha256_mismatch: config\.json"):
        seal_manifest(copy_of)  # never seals a folder whose files do not match
    assert MANIFEST_DIGEST_KEY not in json.loads((copy_of / MANIFEST_NAME).read_text())


def test_writing_a_manifest_refuses_a_folder_over_the_size_limit(copy_of, monkeypatch):
    from training.tiny import manifest as module

    monkeypatch.setattr(module, "MAX_SHIPPED_BYTES", 1000)
    with pytest.raises(module.ManifestError, match="too_large"):
        module.write_manifest(copy_of, recipe={}, build={}, figures={})


def test_writing_a_manifest_refuses_a_pickle_beside_the_weights(copy_of):
    from training.tiny.manifest import ManifestError, write_manifest

    (copy_of / "training_args.bin").write_bytes(b"pickle")
    with pytest.raises(ManifestError, match=r"extra_file: training_args\.bin"):
        write_manifest(copy_of, recipe={}, build={}, figures={})


def test_the_production_log_carries_the_stated_mistakes(world):
    from domains.retail.level1 import as_level1
    from domains.retail.tiny_agent import AgentRecipe, production_log
    from tests.helpers_retail import AUTH_TOOLS

    tasks = [task for task in map(as_level1, level1_records(world, 200, seed=3)) if task is not None]
    recipe = AgentRecipe(mistake_rates={"unnecessary_escalation": 0.4, "skipped_authentication": 0.2})
    log, counts = production_log(tasks, recipe)
    assert production_log(tasks, recipe) == (log, counts)  # one seeded draw: the same log everywhere

    def calls(conversation):
        return [c["name"] for m in conversation["messages"] for c in m.get("tool_calls") or []]

    handed_over = sum("transfer_to_human_agents" in calls(c) for c in log)
    unidentified = sum(not set(calls(c)) & set(AUTH_TOOLS) for c in log)
    assert (handed_over, unidentified) == (counts["unnecessary_escalation"], counts["skipped_authentication"])
    # Binomial(n, p) within four standard deviations of n * p.
    for name, rate in recipe.mistake_rates.items():
        n = len(tasks)
        assert abs(counts[name] - n * rate) < 4 * (n * rate * (1 - rate)) ** 0.5, name


@pytest.mark.parametrize(
    "rates, rule",
    [({"wrong_item": 0.1}, "not level-1 mistakes"), ({"unnecessary_escalation": 1.5}, "must be a number in")],
)
def test_a_recipe_with_bad_mistake_rates_is_refused(rates, rule):
    from domains.retail.tiny_agent import AgentRecipe, RecipeError

    with pytest.raises(RecipeError, match=rule):
        AgentRecipe(mistake_rates=rates)


def test_the_recipes_tasks_carry_e_mail_pseudonyms_as_ingestion_stores_them(tmp_path, monkeypatch):
    """The shipped agent is served stored records, whose e-mail addresses are pseudonyms: its recipe
    trains and measures on such tasks, under its own key, whatever key the environment holds."""
    import os

    from dataplane.home import PII_KEY_ENV
    from dataplane.scrub import PSEUDONYM_RE
    from domains.retail.tiny_agent import AgentRecipe, level1_tasks

    monkeypatch.setenv(PII_KEY_ENV, "another-home-key-0123456789")
    recipe = AgentRecipe(traffic=400, n_users=60, train_tasks=20, held_out_tasks=5)
    train, held = level1_tasks(tmp_path / "a", recipe)
    assert os.environ[PII_KEY_ENV] == "another-home-key-0123456789"  # restored after the recipe's block
    by_email = [t for t in train + held if "@" in t["messages"][1]["content"]]
    assert by_email, "no customer of this world identifies by e-mail"
    for task in by_email:
        email = task["user_scenario"]["known_info"]["email"]
        assert PSEUDONYM_RE.fullmatch(email) and email in task["messages"][1]["content"]
        users = task["initial_state"]["users"]
        assert email in {user["email"] for user in users.values()}  # the world answers the pseudonym
    assert "@example" not in json.dumps(train + held)
    # The recipe's key, not the environment's: the same tasks on every machine.
    monkeypatch.setenv(PII_KEY_ENV, "a-third-key-abcdefghijklmnop")
    assert level1_tasks(tmp_path / "b", recipe) == (train, held)
