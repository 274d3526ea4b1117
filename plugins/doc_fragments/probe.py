# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """What every read-only probe that ends by its findings shares (extended after remote_gpu.trainer.attributes.posix):
    full check mode, and the O(fail_on) option (module_utils/findings.py FAIL_ON_OPTION, run_check)."""

    DOCUMENTATION = r"""
options:
  fail_on:
    description: The level at which the task fails. V(never) only reports.
    type: str
    choices: [FAIL, WARN, never]
    default: FAIL
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode runs it as usual.
"""

    # A probe whose action runs it without AnsiballZ where it can (plugin_utils/direct.py, module_utils/direct_run.py)
    DIRECT = r"""
options: {}
notes:
  - >-
    Its action runs this module's code on the host without AnsiballZ, and so without compiling
    C(ansible.module_utils.basic) there on every run (about 0.25 s of the host's CPU, all of what a ping costs): the
    arguments are checked on the controller against the module's own argument specification, and the host's Python
    reads the module's code and the arguments from stdin, as Ansible pipelines a module. Nothing is written on the
    host. It runs through AnsiballZ, with the same result, when Ansible would not pipeline it (pipelining off,
    C(async), a shell that is not sh-like), when the task is delegated, when the host's Python must be discovered
    first (set C(ansible_python_interpreter); every profile does), and when the arguments do not validate, so that
    the module names what is wrong. C(-vvv) says which way each host ran, and why.
"""
