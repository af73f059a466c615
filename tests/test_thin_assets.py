"""Assets stay thin: resources in, one plain call, metadata out; the assembly lives in plain code."""

from __future__ import annotations

import ast
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
ASSET_DECORATORS = {"asset", "multi_asset", "graph_asset", "graph_multi_asset"}
MOST_LINES = 45  # the docstring counts: what an asset does belongs in a few words, the how below it


def _decorator_name(node: ast.expr) -> str:
    target = node.func if isinstance(node, ast.Call) else node
    return ast.unparse(target).rsplit(".", 1)[-1]


def asset_body_lengths(source: str) -> dict[str, int]:
    """The number of lines of each asset function's body (its docstring included), by name."""
    lengths = {}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and any(
            _decorator_name(d) in ASSET_DECORATORS for d in node.decorator_list
        ):
            lengths[node.name] = node.end_lineno - node.body[0].lineno + 1
    return lengths


def test_the_scan_sees_every_asset_decorator_spelling():
    source = "\n".join(
        [
            "@dg.asset\ndef a():\n    return 1",
            "@dg.asset(group_name='x')\ndef b():\n    x = 1\n    return x",
            "@multi_asset(specs=[])\ndef c():\n    pass",
            "@dg.asset_check(asset='a')\ndef not_an_asset():\n    pass",
        ]
    )
    assert asset_body_lengths(source) == {"a": 1, "b": 2, "c": 1}


def test_every_asset_body_is_at_most_45_lines():
    scanned, thick = 0, {}
    for path in sorted(ASSETS.glob("*.py")):
        for name, lines in asset_body_lengths(path.read_text()).items():
            scanned += 1
            if lines > MOST_LINES:
                thick[f"{path.name}:{name}"] = lines
    assert scanned >= 10, "the scan found too few assets: has the decorator spelling changed?"
    assert thick == {}, f"asset bodies over {MOST_LINES} lines (move the assembly into plain code): {thick}"
