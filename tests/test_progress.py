"""The terse progress logger: one line per step, failed checks and root causes, never a crash."""

from __future__ import annotations

import dagster as dg

from orchestration.progress import progress_logger


def _run(assets):
    job = dg.define_asset_job("j", selection=dg.AssetSelection.all())
    defs = dg.Definitions(assets=assets, jobs=[job], loggers={"progress": progress_logger})
    return defs.resolve_job_def("j").execute_in_process(run_config={"loggers": {"progress": {}}}, raise_on_error=False)


def test_steps_checks_and_root_causes_are_shown(capsys):
    @dg.asset(check_specs=[dg.AssetCheckSpec("ok", asset="first")])
    def first(context):
        context.log.info("halfway there")
        yield dg.AssetCheckResult(check_name="ok", passed=False)
        yield dg.MaterializeResult(value=1)

    @dg.asset
    def second(first):
        raise ValueError("the store is unreachable")

    result = _run([first, second])
    assert not result.success
    out = capsys.readouterr().out
    assert "first started" in out and "first done in" in out
    assert "first: halfway there" in out
    assert "check ok on first: failed" in out
    assert "second FAILED: ValueError: the store is unreachable" in out
    assert "LOADED_INPUT" not in out and "Loading file" not in out  # no event firehose
