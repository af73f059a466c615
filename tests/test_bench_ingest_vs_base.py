"""bench/ingest_vs_base.py measures both trees in one run and reports their ratio.

Against HEAD (always in the history) on a tiny log: the mechanics only (export of the base tree,
one log for both, a fresh store per run, the figures parsed from bench/window.py's JSON line).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bench(base: str, pairs: int, work: Path) -> subprocess.CompletedProcess:
    command = ["bench/ingest_vs_base.py", "--base", base, "--rows", "3000", "--pairs", str(pairs)]
    return subprocess.run(
        [sys.executable, *command, "--workdir", str(work)], cwd=ROOT, capture_output=True, text=True, timeout=600
    )


def test_both_trees_run_on_the_same_log_and_the_ratio_is_of_their_means(tmp_path):
    done = _bench("HEAD", 2, tmp_path / "work")
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    this, base = result["this_rows_per_cpu_s"], result["base_rows_per_cpu_s"]
    assert len(this) == len(base) == 2 and min(this + base) > 0
    assert abs(result["ratio_of_means"] - sum(this) / sum(base)) < 1e-3
    # The base tree was exported and run from the scratch folder, which keeps the log it built.
    assert (tmp_path / "work" / "base" / "bench" / "window.py").is_file()
    assert sorted(p.name for p in (tmp_path / "work" / "log" / "landing").iterdir())[:1] == ["day=2024-01-01"]


def test_an_unknown_base_is_refused_with_gits_error(tmp_path):
    done = _bench("no-such-ref-0", 1, tmp_path / "work")
    assert done.returncode == 1
    assert "cannot export the base tree 'no-such-ref-0'" in done.stderr and "Traceback" not in done.stderr
