"""Fake ``dmesg`` and ``journalctl``: print the scenario's kern.log verbatim, whatever the flags."""
from __future__ import annotations

import os
import sys

from . import runtime

# util-linux dmesg when /dev/kmsg and syslog(2) are refused (kernel.dmesg_restrict=1, unprivileged container)
DMESG_DENIED = "dmesg: read kernel buffer failed: Operation not permitted\n"
# journalctl run by a user outside the systemd-journal/adm groups on a system with only the system journal
JOURNAL_DENIED = "No journal files were opened due to insufficient permissions.\n"


def _serve(denied_text, denied_code):
    sdir = runtime.scenario_dir()
    if sdir and runtime.marker("MARKER-kernel-log-unreadable"):
        sys.stderr.write(denied_text)
        return denied_code
    if not sdir:
        return 0
    try:
        with open(os.path.join(sdir, "kern.log"), "rb") as fh:
            data = fh.read()
    except OSError:
        return 0
    sys.stdout.buffer.write(data)
    sys.stdout.flush()
    return 0


def main_dmesg(_argv=None):
    return _serve(DMESG_DENIED, 1)


def main_journalctl(_argv=None):
    return _serve(JOURNAL_DENIED, 1)
