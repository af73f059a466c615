"""The assets' Dagster retry policies, declared once so that steps failing the same way retry alike.

A failure that no retry can change (a bad setting, a refused model folder, a bad tag) raises
`dg.Failure(..., allow_retries=False)` where it is detected, so these policies only ever see
failures that may pass.
"""

# No `from __future__ import annotations`, as in every assets module.
import dagster as dg

# Steps that read or write the DuckDB store or the MLflow registry. What makes them fail and then
# pass is contention: DuckDB lets one process hold the file for writing, and the landing sensor's
# ingest, the live watch, the weekly run or a CLI session may hold it (ingestion opens the store
# without waiting, so it meets a hold at once; other steps wait the store resource's
# `lock_wait_seconds` first); an MLflow server restarting or briefly unreachable fails a registry
# call the same way. Such holds are brief, so three more tries 5, 10 and 20 s apart get past them,
# while a lock that is never let go (a forgotten notebook) still ends the run, with the
# StoreLockedError that names the file, instead of keeping it waiting.
CONTENTION_RETRY = dg.RetryPolicy(max_retries=3, delay=5, backoff=dg.Backoff.EXPONENTIAL)

# Training fails and then passes for another reason: its pod or process died (a lost node, OOM).
# Each retry starts a new one that resumes from the last checkpoint, so a try costs minutes of
# compute, not seconds: fewer tries, and a fixed 10 s that lets the dead one's resources go first.
TRAINING_RETRY = dg.RetryPolicy(max_retries=2, delay=10)
