"""detached_job's checks, called directly: argument validation and the log check (module_utils/detached_job.py)."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import detached_job, job_layout


def module(**params):
    """A stand-in for the AnsibleModule: validate() only reads ``params``."""
    base = {"name": "j", "command": "true", "chdir": None, "run_dir": "/tmp/jobs", "log_path": None, "env_files": [],
            "env": {}, "detach": "auto", "state": "started", "stop_timeout": 30}
    base.update(params)
    return SimpleNamespace(params=base)


def test_validate_accepts_a_plain_start_and_a_stop_without_command():
    detached_job.validate(module())
    detached_job.validate(module(command=None, state="stopped"))  # stopping needs no command


@pytest.mark.parametrize("params, message", [
    ({"command": None}, "command is required with state=started"),
    ({"command": ["", "x"]}, "the first element of the command list"),
    ({"command": "echo \x00"}, "command holds a NUL byte"),
    ({"stop_timeout": detached_job.MAX_STOP_TIMEOUT + 1}, "stop_timeout must be 0 to 86400 seconds"),
    ({"log_path": "logs/j.log"}, "must be an absolute path"),
    ({"log_path": "  "}, "log_path is empty"),
    ({"env": {"1BAD": "x"}}, "is not a valid shell variable name"),
    ({"env": {"OK": None}}, "env value of OK must be a string or a number, got null"),
    ({"env_files": ["hook.sh"]}, "env file 'hook.sh' must be an absolute path"),
])
def test_validate_raises_job_error_saying_what_is_wrong(params, message):
    with pytest.raises(detached_job.JobError, match=message.replace("(", r"\(")):
        detached_job.validate(module(**params))


def test_check_log_in_check_mode_creates_nothing(tmp_path):
    paths = job_layout.job_paths(str(tmp_path / "jobs"), "j", str(tmp_path / "logs" / "j.log"))
    detached_job.check_log(paths, True)
    assert not os.path.exists(tmp_path / "logs")
    detached_job.check_log(paths, False)
    assert os.path.isfile(tmp_path / "logs" / "j.log")


def test_check_log_refuses_the_jobs_own_files_and_directories(tmp_path):
    run_dir = str(tmp_path / "jobs")
    own = job_layout.job_paths(run_dir, "j", None)
    for log in (own["status_file"], own["pid_file"], own["job_dir"], os.path.join(own["job_dir"], "wrapper-x.sh")):
        with pytest.raises(detached_job.JobError, match="is one of the job's own files"):
            detached_job.check_log(job_layout.job_paths(run_dir, "j", log), True)
    (tmp_path / "adir").mkdir()
    with pytest.raises(detached_job.JobError, match="is a directory"):
        detached_job.check_log(job_layout.job_paths(run_dir, "j", str(tmp_path / "adir")), True)
