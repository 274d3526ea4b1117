"""job_status reports each job's launch time from its trusted meta (``launched_epoch``), next to the log's
``last_start``: the autopilot ends a park at any job start newer than it (issue 28, item 4)."""

from __future__ import annotations

import json

import pytest

from test_job_status import make_job, report


@pytest.mark.parametrize("meta, expected", [
    ({"launched_epoch": 1783116669.25}, 1783116669.25),
    ({"launched_epoch": True}, None),          # not a time
    ({"launched_epoch": "yesterday"}, None),
    ({}, None),
    (None, None),                              # no meta
])
def test_launched_epoch_comes_from_the_trusted_meta(module_runner, tmp_path, meta, expected):
    run_dir = tmp_path / "jobs"
    make_job(run_dir, "train", meta=meta)
    make_job(run_dir, "exp2", meta={"launched_epoch": 5.0})
    result = report(module_runner, {"run_dir": str(run_dir)})
    jobs = dict((job["name"], job) for job in result["jobs"])
    assert jobs["train"]["launched_epoch"] == expected
    assert jobs["exp2"]["launched_epoch"] == 5.0
    assert jobs["train"]["last_start"] == "2026-07-03T10:00:00Z"
    json.dumps(result)  # serialisable as the module returns it
