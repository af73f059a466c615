"""Security properties of the pipeline: safetensors-only model loading, no PII in any stored table
or MLflow artifact, SQL built with parameters only, configuration paths confined to the home.

The hostile-tool-call and audit-hook tests live in tests/test_environment_hostile.py and the
contract fuzz in tests/test_dataplane_ingest.py; this file covers what those do not.
"""

from __future__ import annotations

import ast
import json
import os
import pickle
import shutil
from datetime import UTC, date, datetime
from pathlib import Path

import pytest

from dataplane.home import HomePathError
from dataplane.scrub import find_pii

REPO_ROOT = Path(__file__).resolve().parent.parent


# --- model loading: safetensors only -------------------------------------------------------------


class _Trap:
    """Unpickling this creates `path`: proof that a pickle was (or was not) executed."""

    def __init__(self, path: Path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory, world, reference_tasks) -> Path:
    from tests.helpers_data import build_records
    from training.tiny.bootstrap import TinyModelSpec, build_tiny_policy

    spec = TinyModelSpec(
        vocab_size=400,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,
    )
    return build_tiny_policy(tmp_path_factory.mktemp("policy") / "safe", build_records(world, reference_tasks, 4), spec)


def _pickled_copy(safe: Path, dest: Path, payload) -> Path:
    """`safe` with its safetensors weights replaced by a torch pickle `pytorch_model.bin`."""
    import torch

    shutil.copytree(safe, dest)
    (dest / "model.safetensors").unlink()
    torch.save(payload, dest / "pytorch_model.bin")
    return dest


def test_safetensors_policy_loads(tiny_policy):
    from training.checkpoints import load_policy

    model, tokenizer = load_policy(tiny_policy)
    assert model.config.hidden_size == 32 and tokenizer.eos_token == "<|im_end|>"


def test_pickled_weights_are_refused_even_when_harmless(tiny_policy, tmp_path):
    import torch
    from safetensors.torch import load_file

    from training.checkpoints import load_policy

    weights = load_file(str(tiny_policy / "model.safetensors"))
    folder = _pickled_copy(tiny_policy, tmp_path / "pickled", weights)
    # A plain state-dict pickle is exactly what transformers would otherwise load with torch.load.
    assert set(torch.load(folder / "pytorch_model.bin", weights_only=True)) == set(weights)
    with pytest.raises(OSError, match="model.safetensors"):
        load_policy(folder)


def test_booby_trapped_pickle_is_never_unpickled(tiny_policy, tmp_path):
    from training.checkpoints import load_policy

    marker = tmp_path / "unpickled"
    folder = _pickled_copy(tiny_policy, tmp_path / "trap", {"trap": _Trap(marker)})
    pickle.loads(pickle.dumps(_Trap(tmp_path / "self-check")))  # the trap does fire when unpickled
    assert (tmp_path / "self-check").exists()
    with pytest.raises(OSError):
        load_policy(folder)
    assert not marker.exists()


def test_an_index_pointing_at_a_pickle_shard_is_refused(tiny_policy, tmp_path):
    # A sharded checkpoint names its shards in an index; one naming a pickle must not be followed
    # (transformers would hand it to torch.load even with use_safetensors=True).
    from training.checkpoints import ModelLoadError, load_policy

    marker = tmp_path / "unpickled"
    folder = _pickled_copy(tiny_policy, tmp_path / "indexed", {"trap": _Trap(marker)})
    from safetensors.torch import load_file

    names = list(load_file(str(tiny_policy / "model.safetensors")))
    index = {"metadata": {}, "weight_map": {name: "pytorch_model.bin" for name in names}}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ModelLoadError, match="not safetensors"):
        load_policy(folder)
    assert not marker.exists()


def test_code_named_by_a_checkpoint_config_is_never_run(tiny_policy, tmp_path):
    # config.json can name a Python class to load (auto_map); without trust_remote_code it is ignored.
    from training.checkpoints import load_policy

    folder = tmp_path / "remote"
    shutil.copytree(tiny_policy, folder)
    marker = tmp_path / "executed"
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "evil.EvilModel", "AutoConfig": "evil.EvilConfig"}
    (folder / "config.json").write_text(json.dumps(config))
    try:
        load_policy(folder)
    except (OSError, ValueError):
        pass  # refusing is as good as ignoring; running the file is what must not happen
    assert not marker.exists()


# --- no PII in any table used for training or evaluation, nor in MLflow artifacts ----------------

CARD, PHONE, SSN = "4111 1111 1111 1111", "(415) 555-0100", "123-45-6789"
WEEK = "2026-11-16"


def _inject_pii(landing: Path) -> int:
    """Add a card, a phone and a national id to every message content (tool results included),
    every tool call's arguments, the scenario's instruction, known_info and persona of every landed
    record, and append invalid records (which go to quarantine) that carry the same PII. Returns
    records touched."""
    touched = 0
    for path in sorted(landing.rglob("*.jsonl")):
        lines = []
        for n, line in enumerate(path.read_text().splitlines()):
            record = json.loads(line)
            for message in record["messages"]:
                message["content"] = f"{message['content']} card {CARD}, call {PHONE}, ssn {SSN}".strip()
                for call in message.get("tool_calls") or []:
                    call["arguments"]["handover_summary"] = {"said": [f"card {CARD}", f"call {PHONE}"]}
            record["user_scenario"]["instruction"] += f" My card is {CARD}."
            record["user_scenario"]["known_info"]["card_number"] = CARD
            record["user_scenario"]["known_info"]["ssn"] = SSN
            record["user_scenario"]["persona"] += f" Reads out {PHONE} unprompted."
            lines.append(json.dumps(record))
            if n == 0:  # one rejected copy per file: an invalid outcome, same PII
                lines.append(
                    json.dumps(
                        {**record, "interaction_id": record["interaction_id"] + "-bad", "outcome": f"card {CARD}"}
                    )
                )
            touched += 1
        lines.append(f"not json at all, phone {PHONE}, ssn {SSN}, card {CARD}")
        path.write_text("\n".join(lines) + "\n")
    return touched


def _pii_in(text: str) -> list[str]:
    """PII kinds in `text` and, when it is JSON, in every string inside it (escapes decoded)."""
    found = find_pii(text)
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, TypeError):
        return found
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found += find_pii(item)
        elif isinstance(item, dict):
            stack += list(item.values()) + list(item.keys())
        elif isinstance(item, list):
            stack += item
    return found


@pytest.fixture()
def pii_store(home):
    """Simulated traffic with PII injected, ingested, windowed, split and turned into eval sets."""
    from assets.partitions import week_end
    from dataplane.ingest import ingest_paths
    from dataplane.store import open_store
    from dataplane.window import cut_window, window_records
    from domains.retail.traffic.simulate import simulate
    from evaluation.eval_sets import build_shadow_set, calibration_eligible, freeze_calibration_set

    simulate(
        days=7, per_day=30, seed=11, out_dir=str(home.landing), start=date(2026, 11, 16), n_users=80, label_share=0.6
    )
    touched = _inject_pii(home.landing)
    now = datetime(2026, 11, 30, tzinfo=UTC)
    summary = ingest_paths(home.duckdb_path, [home.landing], now=now)
    assert summary.accepted == touched and summary.quarantined >= 2 * len(summary.per_file)
    con = open_store(home.duckdb_path)
    try:
        info = cut_window(con, week_end(WEEK), size=10_000)
        records = window_records(con, info.week)
        calibration = freeze_calibration_set(con, calibration_eligible(records), now=now)
        shadow = build_shadow_set(con, info.week, week_end(WEEK), now=now)
        assert calibration.rows > 0 and shadow.rows > 0
        yield home, con, info.week, calibration, shadow
    finally:
        con.close()


def test_no_pii_in_any_training_or_evaluation_table(pii_store):
    from dataplane.window import window_frame, window_records

    home, con, week, calibration, shadow = pii_store
    texts = {"interactions.record": [r[0] for r in con.execute("SELECT record FROM interactions").fetchall()]}
    for column in ("raw", "detail", "interaction_id"):
        texts[f"quarantine.{column}"] = [
            r[0] for r in con.execute(f"SELECT {column} FROM quarantine WHERE {column} IS NOT NULL").fetchall()
        ]  # column: a literal above
    texts["windows (records)"] = [json.dumps(r) for r in window_records(con, week)]
    texts["window_frame"] = [window_frame(con, week).to_json(orient="records", date_format="iso")]
    texts["calibration_sets (records)"] = [json.dumps(r, default=str) for r in calibration.records(con)]
    texts["shadow_sets (records)"] = [json.dumps(r, default=str) for r in shadow.records(con)]
    assert all(texts.values()), {k: len(v) for k, v in texts.items()}
    leaks = {
        where: kinds for where, items in texts.items() if (kinds := sorted({k for t in items for k in _pii_in(t)}))
    }
    assert leaks == {}
    every = "\n".join(t for items in texts.values() for t in items)
    assert CARD not in every and PHONE not in every and SSN not in every
    assert "[CARD]" in every and "[PHONE]" in every and "[NATIONAL_ID]" in every  # it was there, masked


def test_no_pii_in_the_mlflow_artifacts_of_a_week_run(pii_store, tmp_path):
    from mlflow import MlflowClient

    from dataplane.window import window_frame
    from evaluation.gates import evaluate_gates
    from tests.helpers_gates import gate_inputs
    from tracking.run_log import WeekRun, log_week_run

    home, con, week, calibration, shadow = pii_store
    uri, artifacts = home.mlflow_uri, home.mlflow_artifacts
    samples = [
        {
            "interaction_id": r["interaction_id"],
            "policy": "candidate",
            "transcript": "\n".join(m["content"] for m in r["messages"]),
            "raw_note": f"customer said {CARD} and {PHONE} ({SSN})",
        }  # unscrubbed: log_week_run must mask
        for r in shadow.records(con)[:5]
    ]
    report = evaluate_gates(gate_inputs("better"))
    run_id = log_week_run(
        uri,
        WeekRun(
            week=week,
            window_hash="cd" * 32,
            window_frame=window_frame(con, week),
            gate_report=report,
            params={"note": "pii scan"},
            metrics={"shadow": {"candidate": {"success": 0.5}}},
            failure_modes={"candidate": {"wrong_tool": 0.1}},
            reward_curve=[0.1, 0.2],
            samples=samples,
            validation={"success": True},
        ),
        experiment_name="pii-scan",
        artifact_location=artifacts.as_uri(),
    )
    files = [p for p in artifacts.rglob("*") if p.is_file()]
    assert any(p.name == "trajectories.json" for p in files), files
    scanned, leaks = 0, {}
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue  # PNG plots: pixels, no text
        scanned += 1
        if kinds := _pii_in(text):
            leaks[str(path.relative_to(artifacts))] = sorted(set(kinds))
    assert scanned >= 3 and leaks == {}
    run = MlflowClient(uri).get_run(run_id)
    meta = json.dumps(
        [
            run.data.params,
            run.data.tags,
            [(d.dataset.source, d.dataset.schema, d.dataset.profile) for d in run.inputs.dataset_inputs],
        ]
    )
    assert _pii_in(meta) == []


def test_run_log_scrubs_nested_sample_cells_at_any_depth():
    from tracking.run_log import scrubbed_samples

    sample = {
        "interaction_id": "int-1",
        "messages": [
            {"role": "assistant", "tool_calls": [{"name": "handover", "arguments": {"summary": f"card {CARD}"}}]},
            {"role": "tool", "content": f"callback {PHONE}"},
        ],
        "user_scenario": {"known_info": {"ssn": SSN, f"card {CARD}": 1, "cards": [4012888888881881]}},
    }
    table = scrubbed_samples([sample])
    text = table.to_json(orient="records")
    assert _pii_in(text) == [] and "[CARD]" in text and "[NATIONAL_ID]" in text and "int-1" in text
    assert table.loc[0, "messages"][0]["tool_calls"][0]["arguments"]["summary"] == "card [CARD]"


def test_run_log_refuses_nested_pii_its_scrubber_missed(monkeypatch):
    import tracking.run_log as run_log

    monkeypatch.setattr(run_log, "scrub_text", lambda text: text)  # a scrubber that misses everything
    nested = {"interaction_id": "int-1", "transcript": "fine", "tool_args": [{"arguments": {"a": {"b": PHONE}}}]}
    with pytest.raises(run_log.PIILeakError) as err:
        run_log.scrubbed_samples([{"transcript": "fine"}, nested])
    assert (err.value.row, err.value.column, err.value.kinds) == (1, "tool_args", ["phone"])


def test_run_log_refuses_pii_in_params_before_logging_anything(tmp_path):
    import pandas as pd

    from evaluation.gates import evaluate_gates
    from tests.helpers_gates import gate_inputs
    from tracking.run_log import PIILeakError, WeekRun, log_week_run

    run = WeekRun(
        week="2026-W47",
        window_hash="ab" * 32,
        window_frame=pd.DataFrame({"rows": [1]}),
        gate_report=evaluate_gates(gate_inputs("better")),
        params={"note": {"from": f"ops, call {PHONE}"}},
    )
    uri = (tmp_path / "mlruns").as_uri()
    with pytest.raises(PIILeakError) as err:
        log_week_run(uri, run, experiment_name="pii-params")
    assert err.value.row is None and err.value.column == "params"
    assert not (tmp_path / "mlruns").exists()  # refused before MLflow was touched


# --- SQL is built with parameters only -----------------------------------------------------------

SQL_DIRS = ("dataplane", "evaluation", "monitoring", "tracking", "orchestration", "assets", "training")
_SQL_CALLS = {"execute", "executemany", "sql", "query", "from_query"}
_SQL_START = (
    "SELECT ",
    "INSERT ",
    "UPDATE ",
    "DELETE ",
    "CREATE ",
    "DROP ",
    "ALTER ",
    "WITH ",
    "COPY ",
    "ATTACH ",
    "PRAGMA ",
    "SET ",
    "INSTALL ",
    "LOAD ",
    "EXPORT ",
    "IMPORT ",
)
# Interpolations allowed in SQL text: none today. An entry would be (file, constant name) for a
# table-name constant that is not a value; values must always be `?` parameters.
ALLOWED_INTERPOLATIONS: set[tuple[str, str]] = set()


def _sql_head(node: ast.AST) -> str:
    """The literal text a string expression starts with ('' when it starts with a variable)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        first = node.values[0] if node.values else None
        return first.value if isinstance(first, ast.Constant) else ""
    if isinstance(node, ast.BinOp):
        return _sql_head(node.left)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return _sql_head(node.func.value)
    return ""


def _is_sql_text(node: ast.AST) -> bool:
    # Case-sensitive: the code base writes SQL keywords in capitals, and prose such as
    # "set alias champion" must not count. Lower-case SQL is still caught at the execute() call.
    return _sql_head(node).lstrip().startswith(_SQL_START)


def _interpolated(node: ast.AST) -> list[str]:
    """Names interpolated into a string expression (f-string, %, +, .format); [] when none."""
    if isinstance(node, ast.JoinedStr):
        return [ast.unparse(v.value) for v in node.values if isinstance(v, ast.FormattedValue)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        sides = [node.left, node.right]
        return [ast.unparse(s) for s in sides if not isinstance(s, ast.Constant)] + [
            n for s in sides for n in _interpolated(s)
        ]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return [ast.unparse(a) for a in node.args] + [ast.unparse(k.value) for k in node.keywords] or ["format()"]
    return []


def sql_violations(source: str, filename: str) -> list[str]:
    """Every line of `source` where a SQL statement gets something interpolated into its text."""
    found: dict[int, str] = {}
    for node in ast.walk(ast.parse(source, filename)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in _SQL_CALLS
            and node.args
        ):
            arg = node.args[0]  # whatever reaches the SQL engine
        elif isinstance(node, (ast.JoinedStr, ast.BinOp, ast.Call)) and _is_sql_text(node):
            arg = node  # SQL text built anywhere, e.g. into a variable executed later
        else:
            continue
        if [n for n in _interpolated(arg) if (filename, n) not in ALLOWED_INTERPOLATIONS]:
            found.setdefault(arg.lineno, f"{filename}:{arg.lineno}: {ast.unparse(arg)[:120]}")
    return [found[line] for line in sorted(found)]


def test_sql_checker_catches_interpolation():
    bad = """
def f(con, week, table):
    con.execute(f"SELECT * FROM t WHERE week = '{week}'")
    con.execute("SELECT * FROM t WHERE week = '%s'" % week)
    con.execute("SELECT * FROM t WHERE week = '{}'".format(week))
    con.execute("select * from t where week = '" + week + "'")
    query = f"DELETE FROM t WHERE week = '{week}'"
    con.execute(query)
"""
    good = (
        'def f(con, week, alias):\n    con.execute("SELECT * FROM t WHERE week = ?", [week])\n'
        '    step = f"set alias {alias}"\n'
    )
    assert len(sql_violations(bad, "bad.py")) == 5
    assert sql_violations(good, "good.py") == []


def test_no_sql_statement_interpolates_a_value():
    files = [p for d in SQL_DIRS for p in sorted((REPO_ROOT / d).rglob("*.py"))]
    assert len(files) > 30
    violations = [v for p in files for v in sql_violations(p.read_text(), str(p.relative_to(REPO_ROOT)))]
    assert violations == []


# --- configuration paths stay inside the home folder ---------------------------------------------


def test_home_inside_refuses_escapes(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (home.root / "link_out").symlink_to(outside, target_is_directory=True)
    (home.root / "link_in").symlink_to(home.models, target_is_directory=True)
    for bad in (
        "../x",
        "runs/../../x",
        str(outside / "y"),
        "/etc/passwd",
        "link_out",
        "link_out/y",
        Path("..") / home.root.name / ".." / "z",
    ):
        with pytest.raises(HomePathError):
            home.inside(bad)
    assert home.inside("runs/2026-11-16") == home.root / "runs" / "2026-11-16"
    assert home.inside(str(home.root / "models" / "base")) == home.models / "base"  # absolute, but inside
    assert home.inside("link_in/base") == home.models / "base"


def test_week_dir_refuses_a_traversing_partition_key(home):
    from assets.weekdata import week_dir

    before = {p for p in home.root.parent.iterdir()}
    for key in ("../../etc", "../../../tmp/evil", "2026-11-16/../../../x"):
        with pytest.raises(HomePathError):
            week_dir(home, key)
    assert {p for p in home.root.parent.iterdir()} == before  # nothing created outside the home
    assert week_dir(home, "2026-11-16") == home.root / "runs" / "2026-11-16"
    assert os.path.isdir(home.root / "runs" / "2026-11-16")
