"""Every `>>>` example in the product's docstrings runs and prints what it says.

The examples are the first thing a reader of a module tries; pytest's default run collects only
`tests/`, so without this file an example can stop parsing (as one in the retail customer's
address reader did) and nothing notices.
"""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
PRODUCT_PACKAGES = (
    "assets",
    "dataplane",
    "domains",
    "evaluation",
    "monitoring",
    "orchestration",
    "tracking",
    "training",
)


def _modules_with_examples() -> list[str]:
    names = []
    for package in PRODUCT_PACKAGES:
        for path in sorted((REPO_ROOT / package).rglob("*.py")):
            if ">>>" in path.read_text(encoding="utf-8"):
                names.append(".".join(path.relative_to(REPO_ROOT).with_suffix("").parts))
    return names


MODULES = _modules_with_examples()


def test_the_product_has_examples_to_check():
    # The scan itself must find something, or every case below would vanish and pass unseen.
    assert len(MODULES) >= 10, MODULES


@pytest.mark.parametrize("module_name", MODULES)
def test_docstring_examples_run(module_name):
    module = importlib.import_module(module_name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE, verbose=False)
    assert result.attempted > 0, f"{module_name} has '>>>' but doctest found no example in it"
    assert result.failed == 0, (
        f"{result.failed} of {result.attempted} docstring examples in {module_name} failed (output above)"
    )
