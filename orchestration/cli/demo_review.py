"""The demo's weekly review, through the product's own review queue.

In production a person opens `retrain review export`'s file, reads each transcript and sets
`task_success`, then `retrain review import --by NAME` stores the verdicts. The demo has no person,
so a simulated reviewer fills the same file: it reads the verifier's verdict that the export wrote
beside each transcript (`verified_success`) and, like a person, gets a share of them wrong. A
conversation logged without gold has no replayed verdict; there the reviewer reads the logged
outcome, which for simulated traffic is the simulator's own verdict (a person would judge the
transcript). A line with neither is deleted (the file's rule for a conversation one cannot judge). Everything else is the product's path: the seeded, stratified
sample recorded in `review_samples`, the file, the import's checks and its provenance (sample id,
rater, OS account).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from orchestration.cli.review import SampleSettings, export_review, import_review

# The name the simulated reviewer's labels are stored under (a rater name: letters, digits, _.@+- only).
DEMO_RATER = "demo-reviewer"


def fill_review_file(path: Path, error_rate: float, seed: int) -> dict[str, int]:
    """Set `task_success` on every line of the export at `path` from its `verified_success` (else its
    logged `outcome`), flipped for `error_rate` of them; delete the lines with neither. Counts of what
    was done."""
    if not 0.0 <= error_rate <= 1.0:
        raise ValueError(f"error_rate must be in [0, 1], got {error_rate}")
    rng = random.Random(seed)
    kept: list[dict[str, Any]] = []
    counts = {"labelled": 0, "mistakes": 0, "from_outcome": 0, "unjudged": 0}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = json.loads(raw)
        verdict = line.get("verified_success")
        if not isinstance(verdict, bool):
            if not isinstance(line.get("outcome"), str):
                counts["unjudged"] += 1
                continue
            verdict = line["outcome"] == "completed"
            counts["from_outcome"] += 1
        wrong = rng.random() < error_rate
        line["task_success"] = verdict != wrong
        counts["labelled"] += 1
        counts["mistakes"] += int(wrong)
        kept.append(line)
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in kept), encoding="utf-8")
    return counts


def review_week(
    week: str, folder: Path, error_rate: float, sample: SampleSettings = SampleSettings()
) -> dict[str, Any]:
    """Export the week's review sample into `folder`, label it as the simulated reviewer, import it.

    The week's interactions must already be in the store (the sample is drawn from it); the sample
    is the product's default review sample (`SampleSettings`: 200, stratified by outcome and intent).
    Returns the export's summary with the reviewer's counts and the import's.
    """
    path = folder / f"review-{week}.jsonl"
    exported = export_review(week, path, n=sample.n, seed=sample.seed, force=True)
    filled = fill_review_file(path, error_rate, sample.seed)
    imported = import_review(path, DEMO_RATER)
    return {
        "week": exported["week"],
        "sample_id": exported["sample_id"],
        "population": exported["population"],
        "sampled": exported["sampled"],
        **filled,
        "stored": imported.inserted,
        "already_stored": imported.unchanged,
        "disagreements": len(imported.disagreements),
    }
