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
    (RV(inode_check), RV(gpu_health), RV(env_audit)), as that module returns it."
  - The GPU check runs in a thread of its own, and the environment's reads (cgroup, the torch import in a child
    process) in another, while the storage is checked. The GPU sampling (O(gpu.sample_seconds)) overlaps the other
    checks instead of adding to them. The environment is judged last, with what the GPU check found.
  - When O(env.driver_cuda_version), O(env.gpus_expected) or O(env.gpu_names) are omitted, they are taken from the GPU
    check (its C(cuda_version), whether it found GPUs, and their names), as C(playbooks/preflight.yml) passed them
    when the checks were three tasks.
  - Every parameter of every check is checked before any check starts; a wrong one fails the task with a message
    that names the check (C(storage:), C(gpu:) or C(env:)). A check that fails while it runs (a filesystem whose
    statistics cannot be read, a kernel log that is not a regular file) fails the task the same way, with the results
    of the other checks.
  - Read-only. It never changes anything on the host. External commands run as argument lists in the C locale, each
    under a timeout.
  - The task fails only when RV(status) is at or above O(fail_on); the same keys are returned either way.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.attributes.read_only
  - remote_gpu.trainer.fail_on
options:
  storage:
    description:
      - The storage check, with the options of M(remote_gpu.trainer.inode_check) but O(remote_gpu.trainer.inode_check#module:fail_on).
    type: dict
    required: true
    suboptions:
      paths:
        description: As O(remote_gpu.trainer.inode_check#module:paths).
        type: list
        elements: path
        required: true
      warn_pct:
        description: As O(remote_gpu.trainer.inode_check#module:warn_pct).
        type: int
        default: 85
      fail_pct:
        description: As O(remote_gpu.trainer.inode_check#module:fail_pct).
        type: int
        default: 95
      top:
        description: As O(remote_gpu.trainer.inode_check#module:top).
        type: int
        default: 5
      budgets:
        description: As O(remote_gpu.trainer.inode_check#module:budgets).
        type: list
        elements: dict
        default: []
        suboptions:
          path:
            description: A path on the filesystem the need applies to.
            type: path
            required: true
          label:
            description: What the need is for, used in messages.
            type: str
            default: projected need
          bytes:
            description: Bytes needed (0 or more).
            type: int
            default: 0
          inodes:
            description: Inodes (files and directories) needed (0 or more).
            type: int
            default: 0
      hf_cache:
        description: As O(remote_gpu.trainer.inode_check#module:hf_cache).
        type: str
        default: ~/.cache/huggingface
      hf_home:
        description: As O(remote_gpu.trainer.inode_check#module:hf_home).
        type: str
        default: ""
      durable_dir:
        description: As O(remote_gpu.trainer.inode_check#module:durable_dir).
        type: path
        default: ""
      storage_tiers:
        description: As O(remote_gpu.trainer.inode_check#module:storage_tiers).
        type: list
        elements: dict
        default: []
        suboptions:
          name:
            description: The tier's name, used in messages.
            type: str
            default: ""
          path:
            description: A path on the tier.
            type: path
            required: true
          lost_on:
            description: The verbs that destroy this tier (C(terminate), C(release), ...).
            type: list
            elements: str
            default: []
          survives:
            description: The verbs this tier survives (not used).
            type: list
            elements: str
            default: []
          shared:
            description: Who shares the tier (not used).
            type: str
          note:
            description: The profile's note, quoted in messages.
            type: str
      hf_cache_warn_gib:
        description: As O(remote_gpu.trainer.inode_check#module:hf_cache_warn_gib).
        type: int
        default: 10
  gpu:
    description:
      - The GPU check, with the options of M(remote_gpu.trainer.gpu_health) but O(remote_gpu.trainer.gpu_health#module:fail_on).
      - Omitted, every option has its default.
    type: dict
    default: {}
    suboptions:
      expected_count:
        description: As O(remote_gpu.trainer.gpu_health#module:expected_count). Not checked when omitted.
        type: int
      expected_name:
        description: As O(remote_gpu.trainer.gpu_health#module:expected_name). Not checked when omitted.
        type: str
      min_memory_mib:
        description: As O(remote_gpu.trainer.gpu_health#module:min_memory_mib). Not checked when omitted.
        type: int
      temp_hot_c:
        description: As O(remote_gpu.trainer.gpu_health#module:temp_hot_c).
        type: int
        default: 83
      sm_clock_floor_pct:
        description: As O(remote_gpu.trainer.gpu_health#module:sm_clock_floor_pct).
        type: int
        default: 70
      sample_seconds:
        description:
          - As O(remote_gpu.trainer.gpu_health#module:sample_seconds). The samples are taken while the storage and
            the environment are checked.
        type: float
        default: 5
      kernel_log:
        description: As O(remote_gpu.trainer.gpu_health#module:kernel_log).
        type: str
        default: auto
      nvidia_smi_path:
        description: As O(remote_gpu.trainer.gpu_health#module:nvidia_smi_path).
        type: path
      timeout:
        description: As O(remote_gpu.trainer.gpu_health#module:timeout).
        type: int
        default: 20
      platform_stop_hint:
        description: As O(remote_gpu.trainer.gpu_health#module:platform_stop_hint).
        type: str
        default: stop the instance in the provider's console
  env:
    description:
      - The environment audit, with the options of M(remote_gpu.trainer.env_audit) but
        O(remote_gpu.trainer.env_audit#module:fail_on).
      - Omitted, every option has its default.
    type: dict
    default: {}
    suboptions:
      proxy_hook:
        description: As O(remote_gpu.trainer.env_audit#module:proxy_hook).
        type: str
        default: ""
      driver_cuda_version:
        description:
          - As O(remote_gpu.trainer.env_audit#module:driver_cuda_version).
          - Omitted, the CUDA version the GPU check read from the driver (none when it read none).
        type: str
      gpus_expected:
        description:
          - As O(remote_gpu.trainer.env_audit#module:gpus_expected).
          - Omitted, whether the GPU check found GPUs.
        type: bool
      gpu_names:
        description:
          - As O(remote_gpu.trainer.env_audit#module:gpu_names).
          - Omitted, the names of the GPUs the GPU check found, in index order.
        type: list
        elements: str
      torch:
        description: As O(remote_gpu.trainer.env_audit#module:torch).
        type: bool
        default: true
      torch_timeout:
        description: As O(remote_gpu.trainer.env_audit#module:torch_timeout).
        type: int
        default: 120
      cgroup_root:
        description: As O(remote_gpu.trainer.env_audit#module:cgroup_root).
        type: path
        default: /sys/fs/cgroup
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
  sample:
    status: PASS
    paths: []
    findings: []
    hf_cache: null
    hf_home: null
gpu_health:
  description:
    - The GPU check's result, the keys M(remote_gpu.trainer.gpu_health) returns (C(status), C(gpus), C(findings),
      C(xid_events), C(driver_version), C(cuda_version), C(samples)).
    - Null when the task failed before the check ran or the check itself failed.
  type: dict
  returned: always
  sample:
    status: PASS
    gpus: []
    findings: []
    xid_events: []
    driver_version: "535.161.08"
    cuda_version: "12.2"
    samples: 5
env_audit:
  description:
    - The environment audit's result, the keys M(remote_gpu.trainer.env_audit) returns (C(status), C(findings),
      C(torch), C(cgroup), C(proxy_hook), C(python)).
    - Null when the task failed before the check ran or the check itself failed.
  type: dict
  returned: always
  sample:
    status: PASS
    findings: []
    torch: null
    cgroup: {}
    proxy_hook: {path: null, present: null}
    python: {executable: /usr/bin/python3, version: 3.11.2}
seconds:
  description:
    - Wall seconds each check took (C(storage), C(gpu), C(env)) and the whole probe (C(total)), rounded to ms.
      Because the checks overlap, C(total) is about the longest of them, not their sum.
  type: dict
  returned: always
  sample: {storage: 0.012, gpu: 5.21, env: 1.35, total: 5.22}
"""

import threading
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils import env_probe, gpu_health, storage_probe
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import (
    at_or_above, finding_message, worst, worst_finding)

# The checks in the order a preflight row lists their findings (GPU, storage, environment): (suboption, result key)
CHECKS = (("gpu", "gpu_health"), ("storage", "inode_check"), ("env", "env_audit"))
# env_audit's options, but the GPU facts default to what the GPU check found
ENV_SPEC = dict(env_probe.ARGUMENT_SPEC, gpus_expected=dict(type="bool"),
                gpu_names=dict(type="list", elements="str"))
ERRORS = (storage_probe.InodeCheckError, gpu_health.GpuHealthError, env_probe.EnvAuditError)


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


def validate(params):
    """Check every check's parameters before any check starts -> None, or the message naming the check."""
    checks = (("storage", storage_probe.validate), ("gpu", gpu_health.validate), ("env", env_probe.validate))
    for name, check in checks:
        try:
            check(params[name])
        except ERRORS as exc:
            return "%s: %s" % (name, exc)
    return None


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


def top_finding(result):
    """The worst finding of the three checks (the first at that level, GPU findings first)."""
    findings = []
    for _name, key in CHECKS:
        findings.extend((result.get(key) or {}).get("findings") or [])
    return worst_finding(findings)


def build_module():
    return AnsibleModule(
        argument_spec=dict(
            storage=dict(type="dict", required=True, options=storage_probe.ARGUMENT_SPEC),
            gpu=dict(type="dict", default={}, apply_defaults=True, options=gpu_health.ARGUMENT_SPEC),
            env=dict(type="dict", default={}, apply_defaults=True, options=ENV_SPEC),
            fail_on=dict(type="str", choices=["FAIL", "WARN", "never"], default="FAIL"),
        ),
        supports_check_mode=True,
    )


def empty_result():
    return dict(changed=False, status="FAIL", inode_check=None, gpu_health=None, env_audit=None, seconds={})


def main():
    module = build_module()
    error = validate(module.params)
    if error:
        module.fail_json(msg=error, **empty_result())
    result, error = run_probe(module, module.params)
    result["changed"] = False
    if error:
        module.fail_json(msg=error, **result)
    if at_or_above(result["status"], module.params["fail_on"]):
        top = top_finding(result)
        module.fail_json(msg=finding_message(top) if top else "status %s" % result["status"], **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
