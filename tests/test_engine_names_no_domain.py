"""The engine speaks of tool kinds, never of one domain's tools, tables or intents.

Every string literal and identifier in the engine rooms is checked against the built-in domains'
tool names, table names and intents (the words shared with ordinary prose, `users`, `other`,
`think` and `calculate`, excepted). Comments are prose and may mention them; code may not.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

from domains.registry import load_domain

ROOT = Path(__file__).resolve().parents[1]
ENGINE = ("orchestration", "assets", "monitoring", "tracking", "training", "evaluation", "dataplane")
SHARED_WORDS = {"users", "other", "think", "calculate", "transfer"}


def _domain_words() -> set[str]:
    words: set[str] = set()
    for name in ("retail", "airline"):
        domain = load_domain(name)
        words |= set(domain.tool_names()) | set(domain.tables) | set(domain.intents)
    return words - SHARED_WORDS


def _code_words(path: Path) -> list[tuple[int, str]]:
    """Names and string literals of a module, docstrings excluded (they are prose)."""
    source = path.read_text(encoding="utf-8")
    docstrings = {
        node.body[0].value.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
        and isinstance(node.body[0].value.value, str)
    }
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME:
            found.append((token.start[0], token.string))
        elif token.type == tokenize.STRING and token.start[0] not in docstrings:
            found += [(token.start[0], word) for word in re.findall(r"[A-Za-z_]+", token.string)]
    return found


@pytest.mark.parametrize("room", ENGINE)
def test_no_engine_module_names_a_domain_tool_table_or_intent(room):
    words = _domain_words()
    offences = [
        f"{path.relative_to(ROOT)}:{line}: {word}"
        for path in sorted((ROOT / room).rglob("*.py"))
        for line, word in _code_words(path)
        if word in words
    ]
    assert offences == []


def test_the_check_sees_a_domain_name_in_code(tmp_path):
    module = tmp_path / "leak.py"
    module.write_text('"""Mentions cancel_pending_order in prose only."""\nTOOL = "cancel_pending_order"\n')
    assert (2, "cancel_pending_order") in _code_words(module)
    assert all(line != 1 for line, _ in _code_words(module) if _ == "cancel_pending_order")
