# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The launch role's filters: the assignment table, the generated scripts, the queue record, the onstart hook's
block, whether a host's items were all done before, and the per-host report line.

Documented in queue_table.yml, launch_scripts.yml, launch_record.yml, launch_onstart.yml, launch_done.yml and
launch_report.yml;
the work is done by plugin_utils/launch_plan.py, plugin_utils/launch_scripts.py and module_utils/job_layout.py, which
are unit-tested. Ansible loads every filter file of the collection, compiled anew, in each worker that templates any
of its filters (most of launch's tasks do, through its plan): this file imports at its top only the small
launch_plan, and each of the others inside the filter that needs it.
"""

from __future__ import annotations

import json

from ansible.errors import AnsibleFilterError

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.launch_plan import assignment_table, queue_record


def queue_table(plan):
    """The printed assignment of a queue_assign plan: ITEM, HOST, ARGUMENT, one line per item."""
    try:
        return "\n".join(assignment_table(list(plan)))
    except (KeyError, TypeError) as exc:
        raise AnsibleFilterError("queue_table: the input must be the output of queue_assign (%s)" % exc)


def launch_scripts(items, cpu=None, **settings):
    """The run wrapper and queue runner of one host -> [{kind, path, text}]. ``cpu`` is env_audit's ``cgroup``
    result, from which the thread count for OMP_NUM_THREADS and MKL_NUM_THREADS is taken."""
    from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_scripts as scripts_core

    try:
        if cpu is not None and not isinstance(cpu, dict):
            raise TypeError("cpu must be the cgroup dict that env_audit returns, got %s" % type(cpu).__name__)
        return scripts_core.scripts(list(items), threads=scripts_core.thread_count(cpu), **settings)
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("launch_scripts: %s" % exc)


def launch_record(items, **settings):
    """The queue record of one host (``<job dir>/queue.json``) as JSON text: its share of the queue."""
    try:
        return json.dumps(queue_record(list(items), **settings), indent=1, sort_keys=True) + "\n"
    except (KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("launch_record: %s" % exc)


def launch_onstart(items, job=None, name=None, job_dir=None, python=None, lib_dir=None):
    """The block launch writes into the onstart hook: resume the job that ``job`` (detached_job's result) started."""
    from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import launch_scripts as scripts_core

    job = job or {}
    try:
        if not job.get("wrapper"):
            raise ValueError("the detached_job result names no wrapper (was the job started?)")
        return scripts_core.onstart_block(name, job_dir, job["wrapper"], job.get("detach"), python, lib_dir,
                                          [row["item"] for row in items])
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("launch_onstart: %s" % exc)


def launch_done(items, probe=None, record=None):
    """Whether this host has nothing left to run and nothing to change: job_status (``probe``, its registered result)
    found the job not running, its queue record on the box (``queue.json``) is the one this launch would write
    (``record``, launch_record's text: the same run, share of the queue and settings, compared by digest), and every
    one of ``items`` finished with exit code 0 (job_layout.queue_done, the test job_status makes itself when given
    the record). False when anything is unknown or different: a probe that was skipped, another record, an item that
    failed or never ran."""
    from ansible_collections.remote_gpu.trainer.plugins.module_utils.job_layout import queue_done, record_digest

    jobs = (probe or {}).get("jobs") or ()
    if not items or len(jobs) != 1 or not isinstance(record, str):
        return False
    try:
        wanted = record_digest(json.loads(record))
    except ValueError:
        return False
    return queue_done(jobs[0], wanted, [row["item"] for row in items])


def probed_job(probe):
    """The one job entry of a job_status result given one name, or {} (a skipped probe, or anything else)."""
    jobs = (probe or {}).get("jobs") or ()
    return jobs[0] if len(jobs) == 1 and isinstance(jobs[0], dict) else {}


def done_run(items, probe=None, record=None):
    """The run whose every item this host finished before, under the same queue record, or None: the probe's own
    ``queue_done`` (job_status given the record), else launch_done with ``record``."""
    job = probed_job(probe)
    if job.get("queue_done") is True:
        return job.get("run_id")
    if launch_done(items, probe, record):
        return json.loads(record).get("run_id")
    return None


def launch_report(items, host, probe=None, pending=(), job=None, code=None, environment_only=False, name=None,
                  record=None):
    """One line per host: what launch did there. ``probe`` and ``job`` are the registered results of job_status and
    detached_job (skipped or absent ones are fine), ``code`` the code.json record push_code wrote (its ``code``;
    None where it wrote none); ``environment_only``: the host is in environment-only mode (declared GPU-less,
    without a GPU) and its queue was not started (no launch_no_gpu_ok);
    ``name``: the job's name, said of a job that runs; ``record``: the queue record this launch would write, whose
    run is said of a host whose items were all done before this launch under that record (launch_done), where
    nothing was pushed or changed. A probe given the record itself (job_status's queue_record) says so in its
    ``queue_done``, and ``record`` is then not needed."""
    ids = [row["item"] for row in items or ()]
    if not ids:
        return "%s: no items" % host
    running = [job_ for job_ in (probe or {}).get("jobs") or () if job_.get("alive")]
    if running and name:
        return "%s: %s is running (pid %s): nothing pushed or changed (items %s)" % (
            host, name, running[0].get("pid"), " ".join(ids))
    if running:
        return "%s: running (pid %s), left alone (items %s)" % (host, running[0].get("pid"), " ".join(ids))
    run_id = done_run(items, probe, record)
    if run_id is not None:
        return ("%s: all %d item(s) of run %s were done: nothing pushed or changed (items %s; a new launch_name "
                "runs the queue again)" % (host, len(ids), run_id, " ".join(ids)))
    if environment_only is True:
        return ("%s: no GPU: environment-only mode: the environment is applied, the queue is not started (items %s; "
                "launch_no_gpu_ok=true runs launch_command without a GPU)" % (host, " ".join(ids)))
    if not pending:
        return "%s: all %d item(s) done, not started" % (host, len(ids))
    line = "%s: %s; pending items %s" % (host, (job or {}).get("msg") or "not started", " ".join(pending))
    if isinstance(code, dict) and code.get("tree_sha256"):
        from ansible_collections.remote_gpu.trainer.plugins.module_utils.torch_build import summary as torch_summary

        torch = torch_summary(code.get("torch"))
        dirty = code.get("dirty_files") if isinstance(code.get("dirty_files"), list) else []
        line += " (code %s, commit %s%s%s)" % (
            code["tree_sha256"][:12], code.get("commit") or "none",
            " with %d uncommitted file(s)" % len(dirty) if code.get("dirty") is True else "",
            ", " + torch if torch else "")
    return line


def launch_left_alone(plan, hosts, probes):
    """The report lines of the hosts that launch leaves alone, in the order of ``hosts``: each with no items in
    ``plan`` (queue_assign's), or whose probe (``probes``, job_status's registered results, in the order of ``hosts``)
    found its job running or every item done under this launch's queue record. A host with items whose probe did not
    run (its variables break a rule) is not left alone: it goes on to prepare, and stops there."""
    try:
        plan, hosts, probes = list(plan), list(hosts), list(probes)
        if len(probes) != len(hosts):
            raise ValueError("%d probes for %d hosts" % (len(probes), len(hosts)))
        lines = []
        for host, probe in zip(hosts, probes):
            items = [row for row in plan if row["host"] == host]
            job = probed_job(probe)
            if not items or job.get("alive") is True or job.get("queue_done") is True:
                lines.append(launch_report(items, host, probe=probe, name=job.get("name")))
        return lines
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise AnsibleFilterError("launch_left_alone: the input must be queue_assign's plan, the play's hosts and their "
                                 "job_status results (%s)" % exc)


class FilterModule(object):
    def filters(self):
        return {"queue_table": queue_table, "launch_scripts": launch_scripts, "launch_onstart": launch_onstart,
                "launch_record": launch_record, "launch_done": launch_done,
                "launch_report": launch_report, "launch_left_alone": launch_left_alone}
