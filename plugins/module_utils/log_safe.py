# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""AnsibleModule whose log lines never carry a NUL byte.

AnsibleModule logs every invocation, its arguments included, to syslog (or the journal) before the module's own code
runs. On Python 3.12 and later ``syslog.syslog`` refuses a message with a NUL byte, and AnsibleModule then fails the
task with "Failed to log to syslog (embedded null character)": a NUL in an argument would never reach the module's
own check, which refuses it and says what to give instead. The log line writes each NUL as the four characters
``\\x00`` (and each argument the same way), so the module gets to refuse it in its own words on every Python and
every ansible-core.
"""

from __future__ import annotations

from ansible.module_utils.basic import AnsibleModule


def without_nul(value):
    """``value`` (text or bytes) with each NUL written as ``\\x00``; anything else as it is."""
    if isinstance(value, bytes):
        return value.replace(b"\x00", b"\\x00")
    if isinstance(value, str):
        return value.replace("\x00", "\\x00")
    return value


class LogSafeModule(AnsibleModule):
    """AnsibleModule, with NUL bytes written out in what it logs (see above)."""

    def log(self, msg, log_args=None):
        if log_args is not None:
            log_args = dict((name, without_nul(value)) for name, value in log_args.items())
        super().log(without_nul(msg), log_args=log_args)
