#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
---
module: env_audit
short_description: Audit the training environment of a rented box (interpreter, torch vs driver, cgroup memory and CPU, proxy hook)
version_added: 0.1.0
author:
  - remote_gpu.trainer maintainers (@remote-gpu)
description:
  - Runs with the profile's interpreter (AutoDL images may have no C(python3) on PATH), so that it runs at all
    proves the interpreter exists.
  - Imports torch in a child process (an import can take seconds or crash) and checks that its CUDA build fits
    the driver's CUDA version, that C(torch.cuda.is_available()), and that the build has kernels for the compute
    capability of each GPU in O(gpu_names).
  - Judges the container by its cgroup, not by host tools that describe the whole node. It reports
    C(memory.max) against C(memory.current) and the C(oom_kill) count. It compares the CPU quota with the
    host's core count, because torch and OpenMP size their thread pools by cores. When they differ it names
    the thread count to set.
  - Checks that the proxy hook the profile expects is present.
  - Read-only.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.probe
options:
  proxy_hook:
    description: File the profile expects jobs to source for network access (AutoDL C(/etc/network_turbo)). Empty for none.
    type: str
    default: ""
  driver_cuda_version:
    description: The CUDA version the driver supports, as M(remote_gpu.trainer.gpu_health) returns it. Omit to skip the comparison.
    type: str
  gpus_expected:
    description: Whether this box should have usable GPUs (a CPU-only torch build or no CUDA is then a failure).
    type: bool
    default: true
  gpu_names:
    description:
      - The product names of the box's GPUs in index order, as M(remote_gpu.trainer.gpu_health) returns them.
      - Each name's compute capability is looked up in NVIDIA's table and compared with the architectures torch was
        built for (C(torch.cuda.get_arch_list())). A GPU the build has no kernels for is the finding
        C(torch_arch_unsupported) (FAIL), which names the torch build to install; a name the table does not know, or a
        build that reports no architectures, is C(torch_arch_unchecked) (INFO). Empty skips the comparison.
    type: list
    elements: str
    default: []
  torch:
    description: Whether to probe torch at all.
    type: bool
    default: true
  torch_timeout:
    description: Seconds to wait for the torch probe. Must be positive.
    type: int
    default: 120
  cgroup_root:
    description:
      - Mount point of the cgroup hierarchy.
      - When no cgroup v1 or v2 hierarchy is found there, the limits are not audited and the finding
        C(cgroup_not_audited) (INFO) says so. A limit file that holds garbage (C(memory.max) of text, C(cpu.max) with
        a period of 0) is the finding C(cgroup_malformed) (WARN), and that limit counts as unknown.
    type: path
    default: /sys/fs/cgroup
"""

EXAMPLES = r"""
- name: Audit the environment with the driver's CUDA version from gpu_health
  remote_gpu.trainer.env_audit:
    proxy_hook: "{{ trainer_proxy_hook }}"
    driver_cuda_version: "{{ gpu.cuda_version }}"
    fail_on: never
  register: env
"""

RETURN = r"""
status:
  description: The worst finding level (C(INFO) counts as C(PASS)).
  type: str
  returned: always
  sample: WARN
findings:
  description: Findings with level, stable code, message and action.
  type: list
  elements: dict
  returned: always
  sample:
    - level: WARN
      code: cpu_quota_below_cores
      message: the container may use 12 CPU(s) but the host shows 64 cores; torch and OpenMP would start 64 threads
      action: Set OMP_NUM_THREADS=12 and MKL_NUM_THREADS=12 in the job environment (torch.set_num_threads(12)).
python:
  description: The interpreter the module ran with.
  type: dict
  returned: always
  sample: {executable: /root/miniconda3/bin/python, version: 3.10.8}
torch:
  description: What the torch probe found, or null when O(torch=false).
  type: dict
  returned: always
  sample:
    torch: 2.5.1+cu124
    cuda_build: "12.4"
    cuda_available: true
    device_count: 1
    arch_list: [sm_50, sm_60, sm_70, sm_75, sm_80, sm_86, sm_90]
    capabilities: [[9, 0]]
    error: null
cgroup:
  description: Memory and CPU limits of the container.
  type: dict
  returned: always
  sample:
    version: 2
    memory_max: 68719476736
    memory_current: 1073741824
    oom_kills: 0
    cpu_quota: 12.0
    host_cpus: 64
    affinity_cpus: 64
    recommended_threads: 12
proxy_hook:
  description: The proxy hook path and whether it is present.
  type: dict
  returned: always
  sample: {path: /etc/network_turbo, present: true}
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.remote_gpu.trainer.plugins.module_utils import env_probe
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import FAIL_ON_OPTION, run_check


def build_module():
    return AnsibleModule(argument_spec=dict(env_probe.ARGUMENT_SPEC, fail_on=FAIL_ON_OPTION), supports_check_mode=True)


def main():
    run_check(build_module(), env_probe.audit, env_probe.EnvAuditError, env_probe.empty_result)


if __name__ == "__main__":
    main()
