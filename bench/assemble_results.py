"""Refresh bench/RESULTS.md from the per-area files under bench/results/.

RESULTS.md keeps its own preamble, headline table and any section with no per-area file (the
demo); every section whose title matches a `bench/results/*.md` file's title is replaced by that
file, headings demoted one level. Run after a benchmark updates its file:

    .venv/bin/python bench/assemble_results.py
"""

from __future__ import annotations

import re
from pathlib import Path

BENCH = Path(__file__).resolve().parent


def demote(text: str) -> str:
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.M)


def assemble(results: Path = BENCH / "RESULTS.md", folder: Path = BENCH / "results") -> str:
    areas = {}
    for path in sorted(folder.glob("*.md")):
        text = path.read_text()
        title = text.splitlines()[0].lstrip("# ").strip()
        areas[title] = demote(text).rstrip() + "\n"
    parts = re.split(r"(?m)^(?=## )", results.read_text())
    out = []
    for part in parts:
        title = part.splitlines()[0][3:].strip() if part.startswith("## ") else None
        out.append(areas.pop(title) + "\n" if title in areas else part)
    for text in areas.values():  # a new area file: appended
        out.append(text + "\n")
    return "".join(out).rstrip() + "\n"


if __name__ == "__main__":
    target = BENCH / "RESULTS.md"
    target.write_text(assemble(target))
    print(f"wrote {target}")
