# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """The on-box job layout shared by detached_job (which writes it) and job_status (which reads it)."""

    DOCUMENTATION = r"""
options:
  run_dir:
    description:
      - Where the job directories C(<run_dir>/<name>) live (PID file, status, wrapper, log). C(~) is the remote
        user's home.
      - M(remote_gpu.trainer.job_status) must be given the run directory the job was started in.
      - It must be an absolute path or start with C(~); an empty or relative O(run_dir) is refused (it would mean
        whatever directory the module happens to run in).
    type: str
    default: ~/.trainer/jobs
notes:
  - On-box layout, shared by M(remote_gpu.trainer.detached_job) and M(remote_gpu.trainer.job_status)
    C(<run_dir>/<name>/{wrapper-<sha>.sh, job.pid, job.starttime, job.meta.json, job.log, lib/, status.json,
    items/<item>/status.json}).
  - Job identity. A job is its name, and each name maps to one directory C(<run_dir>/<name>) and one tmux session
    C(trainer-<name>) in which every C(.) is written as C(+). tmux itself turns C(.) into C(_), which would give
    C(a.b) and C(a_b) one session; C(+) never occurs in a job name, so the mapping is one-to-one. Names are letters,
    digits, C(_), C(.) and C(-), not C(.) or C(..), and never start with C(-).
"""
