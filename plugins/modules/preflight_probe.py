#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: preflight_probe
short_description: Check the storage, the GPUs and the environment of a rented box in one run
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - "Runs the checks of M(remote_gpu.trainer.inode_check) (O(storage)), M(remote_gpu.trainer.gpu_health) (O(gpu)) and
    M(remote_gpu.trainer.env_audit) (O(env)) in one Python process on the box: one SSH execution per host instead of
    three. The checks are the same code as those modules' (C(module_utils/storage_probe.py), C(gpu_health.py),
    C(env_probe.py)), so they give the same findings, and each one's result is returned under the module's name
    (RV(inode_check), RV(gpu_health), RV(env_audit)), as that module returns it. The same run looks at the paths
    of O(stat), as M(ansible.builtin.stat) would, and asks a Python whether it has the modules of
    O(python_modules), without a run of its own."
  - The GPU check runs in a thread of its own, and the environment's reads (cgroup, the torch import in a child
    process) in another, while the storage is checked. The GPU sampling (C(sample_seconds) of O(gpu)) overlaps the other
    checks instead of adding to them. The environment is judged last, with what the GPU check found.
  - When the O(env) keys C(driver_cuda_version), C(gpus_expected) or C(gpu_names) are omitted, they are taken from the
    GPU check (its C(cuda_version), whether it found GPUs, and their names).
  - Every parameter of every check is checked before any check starts; a wrong one fails the task with a message
    that names the check (C(storage:), C(gpu:) or C(env:)). A check that fails while it runs (a filesystem whose
    statistics cannot be read, a kernel log that is not a regular file) fails the task the same way, with the results
    of the other checks.
  - Read-only. It never changes anything on the host. External commands run as argument lists in the C locale, each
    under a timeout.
  - The task fails only when RV(status) is at or above O(fail_on); the same keys are returned either way.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.probe
  - remote_gpu.trainer.probe.direct
options:
  storage:
    description:
      - The storage check - the options of M(remote_gpu.trainer.inode_check), all but its C(fail_on), as a dictionary.
        They are checked against that module's own argument specification (C(module_utils/storage_probe.py)), so
        their types, defaults and checks are that module's; see its documentation.
    type: dict
    required: true
  gpu:
    description:
      - The GPU check - the options of M(remote_gpu.trainer.gpu_health), all but its C(fail_on), as a dictionary,
        checked against that module's argument specification (C(module_utils/gpu_health.py)).
      - Its sampling (C(sample_seconds), 5 by default) runs while the storage and the environment are checked.
    type: dict
    default: {}
  env:
    description:
      - The environment check - the options of M(remote_gpu.trainer.env_audit), all but its C(fail_on), as a
        dictionary, checked against that module's argument specification (C(module_utils/env_probe.py)).
      - Two more keys, C(gpus_expected) (bool) and C(gpu_names) (list of str), say whether GPUs are expected and
        which; torch's kernels are judged against those names. They, and C(driver_cuda_version), default to what
        the GPU check found.
    type: dict
    default: {}
  stat:
    description:
      - Paths to look at without following a link (C(lstat)), as M(ansible.builtin.stat) with C(follow=false) looks
        at them, in the same run; for example a proxy hook that must be a regular file, or the place of a link that
        is to be made. Each one's answer is in RV(stat).
      - At most 64, each an absolute path (C(~) is the remote user's home). A path that is absent, or under
        something that is not a directory, does not exist; one that cannot be looked at for another reason (a
        directory on its way that this user cannot search) fails the task, naming it.
    type: list
    elements: str
    default: []
  python_modules:
    description:
      - Python modules to look for in the same run, as C(importlib.util.find_spec) finds them in the Python of
        O(python_modules_interpreter); for example C(hf_transfer), which the hf_mirror role turns on only where the
        jobs' Python has it. Each one's answer is in RV(python_modules).
      - At most 16, each a dotted name (letters, digits and C(_)). That Python runs once for all of them, under a
        timeout of 30 seconds; one that cannot run fails the task, naming it.
    type: list
    elements: str
    default: []
  python_modules_interpreter:
    description:
      - The Python that O(python_modules) are looked for in, an absolute path or a name on the remote user's
        C(PATH); empty, the Python this module runs in.
    type: str
    default: ""
notes:
  - The findings, their codes and levels are those of the three modules; see their documentation.
  - Reading the kernel log may need root (C(become)) or membership of the C(systemd-journal) or C(adm) group.
seealso:
  - module: remote_gpu.trainer.inode_check
  - module: remote_gpu.trainer.gpu_health
  - module: remote_gpu.trainer.env_audit
"""

EXAMPLES = r"""
- name: Check an AutoDL box in one SSH execution
  remote_gpu.trainer.preflight_probe:
    storage:
      paths: [/root/autodl-tmp, /root/autodl-fs, /root]
      budgets:
        - path: /root/autodl-tmp
          label: 10 checkpoints x 4 GiB
          bytes: "{{ 10 * 4 * 1024 ** 3 }}"
    gpu:
      expected_count: 8
      expected_name: H100
      platform_stop_hint: "shutdown (power off in the AutoDL console)"
    env:
      proxy_hook: /etc/network_turbo
    stat: [/etc/network_turbo, /root/tf-logs/exp42]
    fail_on: never
  register: probe

- name: Show the GPU findings, as gpu_health returns them
  ansible.builtin.debug:
    msg: "{{ probe.gpu_health.findings | map(attribute='code') | list }}"
"""

RETURN = r"""
status:
  description: The worst of the three checks' C(status) (C(INFO) counts as C(PASS)); C(FAIL) when a check could not run.
  type: str
  returned: always
  sample: WARN
inode_check:
  description:
    - The storage check's result, the keys M(remote_gpu.trainer.inode_check) returns (C(status), C(paths),
      C(findings), C(hf_cache), C(hf_home)).
    - Null when the task failed before the check ran or the check itself failed.
  type: dict
  returned: always
  sample: {status: PASS, paths: [], findings: [], hf_cache: null, hf_home: null}
gpu_health:
  description:
    - The GPU check's result, the keys M(remote_gpu.trainer.gpu_health) returns (C(status), C(gpus), C(findings),
      C(xid_events), C(driver_version), C(cuda_version), C(samples)).
    - Null when the task failed before the check ran or the check itself failed.
  type: dict
  returned: always
  sample:
    {status: PASS, gpus: [], findings: [], xid_events: [], driver_version: "535.161.08", cuda_version: "12.2",
     samples: 5}
env_audit:
  description:
    - The environment audit's result, the keys M(remote_gpu.trainer.env_audit) returns (C(status), C(findings),
      C(torch), C(cgroup), C(proxy_hook), C(python)).
    - Null when the task failed before the check ran or the check itself failed.
  type: dict
  returned: always
  sample:
    {status: PASS, findings: [], torch: null, cgroup: {}, proxy_hook: {path: null, present: null},
     python: {executable: /usr/bin/python3, version: 3.11.2}}
stat:
  description:
    - For each path of O(stat), as given (before C(~) is expanded), the keys M(ansible.builtin.stat) returns under
      C(stat) for it with C(follow=false) that say what it is - C(exists), C(isreg), C(isdir), C(islnk) and
      C(lnk_target) (what the link reads, null when it is no link). Every key but C(exists) is false (or null) for
      a path that does not exist.
    - Empty when the task failed before the paths were looked at.
  type: dict
  returned: always
  sample:
    {/etc/network_turbo: {exists: true, isreg: true, isdir: false, islnk: false, lnk_target: null},
     /root/tf-logs/exp42: {exists: false, isreg: false, isdir: false, islnk: false, lnk_target: null}}
python_modules:
  description:
    - For each name of O(python_modules), whether O(python_modules_interpreter) finds it (C(importlib.util.find_spec)).
    - Empty when the task failed before that Python ran, or when O(python_modules) is empty.
  type: dict
  returned: always
  sample: {hf_transfer: false}
seconds:
  description:
    - Wall seconds each check took (C(storage), C(gpu), C(env)) and the whole probe (C(total)), rounded to ms.
      Because the checks overlap, C(total) is about the longest of them, not their sum.
  type: dict
  returned: always
  sample: {storage: 0.012, gpu: 5.21, env: 1.35, total: 5.22}
"""

import errno
import json
import os
import re
import stat
import sys
import threading
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.errors import UnsupportedError

from ansible_collections.remote_gpu.trainer.plugins.module_utils import command, env_probe, gpu_health, storage_probe
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import (
    FAIL_ON_OPTION, exit_by_fail_on, worst)

# The checks in the order a preflight row lists their findings (GPU, storage, environment): (suboption, result key)
CHECKS = (("gpu", "gpu_health"), ("storage", "inode_check"), ("env", "env_audit"))
# env_audit's options, but the GPU facts default to what the GPU check found
ENV_SPEC = dict(env_probe.ARGUMENT_SPEC, gpus_expected=dict(type="bool"),
                gpu_names=dict(type="list", elements="str"))
MAX_STAT_PATHS = 64
MAX_PYTHON_MODULES = 16
PYTHON_MODULE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
# run by the Python of python_modules_interpreter, with the names as its arguments: one JSON line
FIND_MODULES = ("import importlib.util, json, sys\n"
                "found = {}\n"
                "for name in sys.argv[1:]:\n"
                "    try:\n"
                "        found[name] = importlib.util.find_spec(name) is not None\n"
                "    except (ImportError, ValueError):\n"
                "        found[name] = False\n"
                "print(json.dumps(found))\n")
PYTHON_MODULES_TIMEOUT = 30
ERRORS = (storage_probe.InodeCheckError, gpu_health.GpuHealthError, env_probe.EnvAuditError)
# each check's suboptions: (name, its module's argument spec, its own checks)
SECTIONS = (("storage", storage_probe.ARGUMENT_SPEC, storage_probe.validate),
            ("gpu", gpu_health.ARGUMENT_SPEC, gpu_health.validate),
            ("env", ENV_SPEC, env_probe.validate))


class Background:
    """Run ``func(*args)`` in a daemon thread; ``result()`` waits and returns its value or raises its exception."""

    def __init__(self, func, *args):
        self._box = {}
        self._thread = threading.Thread(target=self._run, args=(func,) + args)
        self._thread.daemon = True
        self._thread.start()

    def _run(self, func, *args):
        start = time.monotonic()
        try:
            self._box["value"] = func(*args)
        except Exception as exc:  # pylint: disable=broad-except
            self._box["error"] = exc  # re-raised in the caller's thread by result()
        self._box["seconds"] = time.monotonic() - start

    def result(self):
        self._thread.join()
        if "error" in self._box:
            raise self._box["error"]
        return self._box["value"]

    @property
    def seconds(self):
        return self._box.get("seconds")


def section_params(spec, value):
    """One check's suboptions, typed and defaulted by that check's own argument spec -> dict; raises ValueError
    with the messages of every wrong one."""
    validated = ArgumentSpecValidator(spec).validate(dict(value or {}))
    messages = [("unsupported parameters: " if isinstance(error, UnsupportedError) else "") + error.msg
                for error in validated.errors.errors]
    if messages:
        raise ValueError("; ".join(messages))
    return validated.validated_parameters


def validate(params):
    """Type and check every check's parameters before any check starts -> (params with each check's parameters
    validated, None), or (None, the message naming the check)."""
    checked = dict(params)
    for name, spec, check in SECTIONS:
        try:
            checked[name] = section_params(spec, params[name])
            check(checked[name])
        except (ValueError,) + ERRORS as exc:
            return None, "%s: %s" % (name, exc)
    problem = (validate_stat(params["stat"])
               or validate_python_modules(params["python_modules"], params["python_modules_interpreter"]))
    return (None, problem) if problem else (checked, None)


def validate_stat(paths):
    """The paths of the option stat -> None, or the message that says what is wrong with them."""
    if len(paths) > MAX_STAT_PATHS:
        return "stat: at most %d paths, got %d: look at the others in a task of their own" % (
            MAX_STAT_PATHS, len(paths))
    for path in paths:
        if "\x00" in path or not os.path.isabs(os.path.expanduser(path)):
            return "stat: %r is not an absolute path: give the full path (or start it with ~)" % path
    return None


def validate_python_modules(names, interpreter):
    """The options python_modules and python_modules_interpreter -> None, or the message that says what is wrong."""
    if len(names) > MAX_PYTHON_MODULES:
        return "python_modules: at most %d names, got %d" % (MAX_PYTHON_MODULES, len(names))
    for name in names:
        if not PYTHON_MODULE.match(name):
            return "python_modules: %r is not a Python module's dotted name (letters, digits, _ and dots)" % name
    if "\x00" in interpreter or interpreter.startswith("-"):
        return "python_modules_interpreter: %r is not a Python's path or name" % interpreter
    return None


def find_modules(module, names, interpreter):
    """{name: whether ``interpreter`` (its path, a name on PATH, or '' for this Python) finds it}; ValueError that
    names the Python when it cannot run or answer."""
    if not names:
        return {}
    python = interpreter or sys.executable
    if "/" not in python:
        python = module.get_bin_path(python) or python
    rc, out, err = command.run_with_timeout([python, "-c", FIND_MODULES] + list(names), PYTHON_MODULES_TIMEOUT)
    if rc is None:
        raise ValueError("%s did not answer within %d s" % (python, PYTHON_MODULES_TIMEOUT))
    try:
        found = json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else None
    except ValueError:
        found = None
    if not isinstance(found, dict) or set(found) != set(names):
        raise ValueError("%s could not be asked (rc %s): %s" % (python, rc, (err.strip() or out.strip())[-300:]))
    return dict((name, found[name] is True) for name in names)


def look_at(paths):
    """{path as given: what it is, without following a link} for each of ``paths`` (``~`` expanded), as
    ansible.builtin.stat's ``stat`` keys (exists, isreg, isdir, islnk, lnk_target). An absent path, or one under a
    non-directory, does not exist; any other OSError is raised."""
    answers = {}
    for given in paths:
        path = os.path.expanduser(given)
        answer = dict(exists=False, isreg=False, isdir=False, islnk=False, lnk_target=None)
        try:
            mode = os.lstat(path).st_mode
        except OSError as exc:
            if exc.errno not in (errno.ENOENT, errno.ENOTDIR):
                raise
        else:
            answer.update(exists=True, isreg=stat.S_ISREG(mode), isdir=stat.S_ISDIR(mode), islnk=stat.S_ISLNK(mode))
            if answer["islnk"]:
                answer["lnk_target"] = os.readlink(path)
        answers[given] = answer
    return answers


def timed(func, *args):
    start = time.monotonic()
    return func(*args), time.monotonic() - start


def run_probe(module, params):
    """The three checks, overlapped -> (result without ``changed``, error message or None)."""
    start = time.monotonic()
    results = dict.fromkeys(key for _name, key in CHECKS)
    seconds = {}
    errors = []
    gpu = Background(gpu_health.check_gpus, module, params["gpu"])
    env = Background(env_probe.gather, params["env"])
    try:
        results["inode_check"], seconds["storage"] = timed(storage_probe.run, params["storage"])
    except storage_probe.InodeCheckError as exc:
        errors.append("storage: %s" % exc)
    try:
        results["stat"] = look_at(params["stat"])
    except OSError as exc:
        results["stat"] = {}
        errors.append("stat: cannot look at %s: %s" % (exc.filename, exc.strerror))
    try:
        results["python_modules"] = find_modules(module, params["python_modules"], params["python_modules_interpreter"])
    except ValueError as exc:
        results["python_modules"] = {}
        errors.append("python_modules: %s" % exc)
    try:
        results["gpu_health"] = gpu.result()
    except gpu_health.GpuHealthError as exc:
        errors.append("gpu: %s" % exc)
    seconds["gpu"] = gpu.seconds
    try:
        gathered = env.result()
        env_params = env_probe.gpu_facts(results["gpu_health"], params["env"])
        results["env_audit"], judged = timed(env_probe.judge, gathered, env_params)
        seconds["env"] = env.seconds + judged
    except env_probe.EnvAuditError as exc:
        errors.append("env: %s" % exc)
    seconds["total"] = time.monotonic() - start
    results["seconds"] = dict((key, round(value, 3)) for key, value in seconds.items() if value is not None)
    parts = [results[key] for _name, key in CHECKS if results[key] is not None]
    results["status"] = "FAIL" if errors else worst({"level": part["status"]} for part in parts)
    return results, "; ".join(errors) or None


def all_findings(result):
    """The three checks' findings, in the order of CHECKS (GPU first, so a GPU finding wins a tie)."""
    findings = []
    for _name, key in CHECKS:
        findings.extend((result.get(key) or {}).get("findings") or [])
    return findings


# AnsibleModule's keyword arguments, and the argument spec of each check's suboptions (typed in validate()): the
# preflight_probe action checks a task's arguments against both on the controller when it runs this module without
# AnsiballZ (plugin_utils/direct)
MODULE_OPTIONS = dict(
    argument_spec=dict(
        storage=dict(type="dict", required=True),
        gpu=dict(type="dict", default={}),
        env=dict(type="dict", default={}),
        stat=dict(type="list", elements="str", default=[]),
        python_modules=dict(type="list", elements="str", default=[]),
        python_modules_interpreter=dict(type="str", default=""),
        fail_on=FAIL_ON_OPTION,
    ),
    supports_check_mode=True,
)
SUBSPECS = dict((name, spec) for name, spec, _check in SECTIONS)


def build_module():
    return AnsibleModule(**MODULE_OPTIONS)


def empty_result():
    return dict(changed=False, status="FAIL", inode_check=None, gpu_health=None, env_audit=None, stat={},
                python_modules={}, seconds={})


def main():
    module = build_module()
    params, error = validate(module.params)
    if error:
        module.fail_json(msg=error, **empty_result())
    result, error = run_probe(module, params)
    result["changed"] = False
    if error:
        module.fail_json(msg=error, **result)
    exit_by_fail_on(module, result, module.params["fail_on"], findings=all_findings(result))


if __name__ == "__main__":
    main()
