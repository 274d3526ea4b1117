#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_health
short_description: Decide whether the GPUs of a rented box are fit to train on
version_added: 0.1.0
author:
  - remote_gpu.trainer contributors (@remote-gpu)
description:
  - Read-only pre-flight probe of every NVIDIA GPU on the host. It reads the full state once with
    C(nvidia-smi -q -x), samples clocks, temperature, utilisation, power, PCIe link and clock event reasons a few
    times over O(sample_seconds) with C(nvidia-smi --query-gpu), and scans the kernel log for Xid errors.
  - Returns C(status) C(PASS), C(WARN) or C(FAIL) with one finding per problem. C(FAIL) means the box is unfit
    (hardware throttling, pending row remap, uncorrectable ECC errors, fatal Xid, wrong or missing GPUs, no
    driver) - stop it and rent a different one. The FAIL message names the GPU, the evidence and
    O(platform_stop_hint).
  - Every nvidia-smi call runs under a timeout in the C locale. A hung nvidia-smi yields the finding
    C(nvidia_smi_timeout), a missing or broken driver C(driver_unavailable); the module never hangs or
    tracebacks.
  - The task fails only when C(status) is at or above O(fail_on); the same keys are returned either way.
  - "Finding codes: V(driver_unavailable), V(nvidia_smi_timeout), V(gpu_count_mismatch), V(gpu_model_mismatch),
    V(gpu_memory_below_min), V(throttle_active), V(ecc_uncorrectable_volatile), V(retired_pages_pending),
    V(remapped_rows_pending), V(remapped_rows_failure), V(xid_fatal) (FAIL); V(clock_crushed) (WARN, FAIL when
    also hot), V(running_hot), V(pcie_link_degraded), V(xid_app_fault), V(kernel_log_unreadable) (WARN);
    V(power_capped), V(xid_info), V(mig_enabled), V(persistence_off), V(no_gpu_environment_only) (INFO)."
  - With O(environment_only), a box that has no GPU at all is not a FAIL but environment-only (AutoDL's no-GPU
    mode, 无卡模式); see that option.
extends_documentation_fragment:
  - remote_gpu.trainer.attributes.posix
  - remote_gpu.trainer.probe
options:
  expected_count:
    description:
      - Number of GPUs the box must have. A different count is a C(gpu_count_mismatch) FAIL.
      - Not checked when omitted.
    type: int
  expected_name:
    description:
      - Regular expression (searched, case-insensitive) the name of every GPU must match, for example
        V(H100|H800). A mismatch is a C(gpu_model_mismatch) FAIL.
      - Not checked when omitted.
    type: str
  min_memory_mib:
    description:
      - Minimum total memory of every GPU in MiB. Less is a C(gpu_memory_below_min) FAIL.
      - Not checked when omitted.
    type: int
  temp_hot_c:
    description:
      - GPU temperature in degrees Celsius at or above which C(running_hot) is reported.
    type: int
    default: 83
  sm_clock_floor_pct:
    description:
      - Under load, an SM clock below this percentage of the maximum SM clock is C(clock_crushed).
    type: int
    default: 70
  sample_seconds:
    description:
      - Seconds over which clocks, temperatures and reasons are sampled (5 samples). V(0) takes one sample.
      - At most 600; a negative, infinite or NaN value is refused.
    type: float
    default: 5
  kernel_log:
    description:
      - Where to read kernel messages for Xid errors.
      - V(auto) tries C(journalctl -k -b --no-pager -q -o short-iso), then C(dmesg), both in the C locale.
      - Any other value is the path of a readable file holding kernel log lines (any common format).
      - An unreadable or missing log is a C(kernel_log_unreadable) WARN.
      - The path must name a regular file; a FIFO, a device such as C(/dev/zero), a socket or a directory is refused
        (the file is opened non-blocking, so a FIFO cannot hang the probe). Only the last 16 MiB of a larger file
        are read.
    type: str
    default: auto
  nvidia_smi_path:
    description:
      - Path of the nvidia-smi binary. Found on E(PATH) when omitted.
      - A path that does not exist is C(driver_unavailable) (no driver installed). A path that exists but is not an
        executable regular file (for example C(/etc/passwd)) is a wrong parameter and fails the task with a message
        that says so.
    type: path
  timeout:
    description:
      - Seconds each nvidia-smi, journalctl or dmesg call may run before it is killed.
    type: int
    default: 20
  platform_stop_hint:
    description:
      - How to stop the meter on this platform, quoted in every FAIL message, for example
        V(shutdown (power off in the AutoDL console)). Usually set from the platform profile.
    type: str
    default: stop the instance in the provider's console
  environment_only:
    description:
      - The box is declared GPU-less (AutoDL's no-GPU mode, 无卡模式, to fix the environment or prepare data at a
        fraction of the price; set from the host's C(trainer_gpu_expected=false)).
      - When nvidia-smi then shows that there is no GPU at all (not installed; no driver, C(NVIDIA-SMI has failed
        because it couldn't communicate with the NVIDIA driver); or C(No devices were found)), the result is
        C(status=PASS), RV(environment_only=true) and the one INFO finding C(no_gpu_environment_only) (no GPU,
        environment-only mode) instead of the C(driver_unavailable) FAIL; no GPU check, count or Xid is judged.
      - Anything else stays judged as on any box - GPUs that answer, and a GPU that is there but broken (a
        driver/library mismatch, a lost GPU, a hung nvidia-smi), which still FAIL. The declaration is never
        guessed from the box, because a missing GPU on a box that should have one looks the same there and must
        FAIL.
    type: bool
    default: false
notes:
  - Reading the kernel log may need root (C(become)) or membership of the C(systemd-journal) or C(adm) group.
  - Clock event reasons are queried with the C(clocks_throttle_reasons.active) spelling, accepted by every
    driver from 465 to 610.
"""

EXAMPLES = r"""
- name: Pre-flight check of an 8x H100 box
  remote_gpu.trainer.gpu_health:
    expected_count: 8
    expected_name: "H100"
    min_memory_mib: 80000
    platform_stop_hint: "shutdown (power off in the AutoDL console)"
  become: true
  register: health

- name: Report only, never fail
  remote_gpu.trainer.gpu_health:
    fail_on: never
    sample_seconds: 0
  register: health

- name: Show the worst findings
  ansible.builtin.debug:
    msg: "{{ health.findings | selectattr('level', 'in', ['WARN', 'FAIL']) | map(attribute='message') | list }}"
"""

RETURN = r"""
status:
  description: Host verdict, the worst GPU or host finding level (INFO counts as PASS).
  type: str
  returned: always
  sample: FAIL
gpus:
  description:
    - One entry per GPU in nvidia-smi index order, with the facts read by C(nvidia-smi -q -x) and its C(verdict).
    - Values nvidia-smi does not report are null. C(pci) is the short bus id used to match Xid lines.
  type: list
  elements: dict
  returned: always
  sample:
    - index: 0
      name: NVIDIA H100 80GB HBM3
      uuid: GPU-ee7954ec-da95-fd7a-ddfd-c6b32cc2f8aa
      pci_bus_id: "00000000:19:00.0"
      pci: "0000:19:00"
      memory_total_mib: 81559
      memory_used_mib: 0
      temperature_c: 29
      sm_clock_mhz: 86
      sm_clock_max_mhz: 1980
      power_draw_w: 67.74
      power_limit_w: 700.0
      utilization_gpu_pct: 0
      persistence_mode: true
      mig_mode: false
      throttle_reasons: [hw_power_brake_slowdown, hw_slowdown]
      ecc_uncorrectable_volatile: 0
      ecc_uncorrectable_aggregate: 0
      retired_pages_pending: null
      remapped_rows_pending: false
      remapped_rows_failure: false
      pcie_gen_current: 5
      pcie_gen_max: 5
      pcie_width_current: 16
      pcie_width_max: 16
      verdict: FAIL
findings:
  description:
    - Problems found, worst first. C(gpu) is the GPU index or null for host-wide findings.
    - Match on C(code), never on C(message). C(driver_unavailable) findings carry C(error), the recognised
      nvidia-smi failure (for example V(no_driver), V(driver_library_mismatch), V(gpu_lost), V(inforom_corrupted)).
  type: list
  elements: dict
  returned: always
  sample:
    - level: FAIL
      code: throttle_active
      gpu: 0
      message: >-
        GPU 0 (NVIDIA H100 80GB HBM3, 0000:19:00) is being throttled by hardware/thermal limits: HW slowdown in
        5 of 6 samples. This box is unfit: stop it (shutdown (power off in the AutoDL console)) and rent a
        different one.
      action: "this box is unfit: stop it (shutdown (power off in the AutoDL console)) and rent a different one"
xid_events:
  description:
    - Xid events from the kernel log (the last 200), oldest first. C(severity) is V(fatal), V(app_fault) or V(info).
    - C(recovery_action) is the action announced by Xid 154; C(caused_by) the Xid named by "caused by previous
      Xid". C(synthetic) marks a "fallen off the bus" message without an Xid line, reported as Xid 79.
  type: list
  elements: dict
  returned: always
  sample:
    - xid: 79
      pci: "0000:44:00"
      pid: null
      name: null
      message: GPU has fallen off the bus
      severity: fatal
      recovery_action: null
      caused_by: null
      line: "NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus"
      mnemonic: ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS
      meaning: GPU no longer reachable over PCIe
      action: "hardware fault: stop the box and rent a different one"
      synthetic: false
driver_version:
  description: Driver (KMD) version, null when nvidia-smi did not answer.
  type: str
  returned: always
  sample: "535.161.08"
cuda_version:
  description: Highest CUDA version the driver supports, null when nvidia-smi did not answer.
  type: str
  returned: always
  sample: "12.2"
samples:
  description: Number of C(--query-gpu) samples taken (0 when sampling was impossible).
  type: int
  returned: always
  sample: 5
environment_only:
  description:
    - True when the box is in environment-only mode - declared GPU-less by O(environment_only) and without any GPU
      (see that option); launch then applies the environment roles and starts no training queue.
  type: bool
  returned: always
  sample: false
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.remote_gpu.trainer.plugins.module_utils.findings import FAIL_ON_OPTION, run_check
from ansible_collections.remote_gpu.trainer.plugins.module_utils.gpu_health import (
    ARGUMENT_SPEC, GpuHealthError, check_gpus, empty_result)


def build_module():
    return AnsibleModule(argument_spec=dict(ARGUMENT_SPEC, fail_on=FAIL_ON_OPTION), supports_check_mode=True)


def main():
    module = build_module()
    run_check(module, lambda params: check_gpus(module, params), GpuHealthError, empty_result,
              message=lambda top: top["message"])


if __name__ == "__main__":
    main()
