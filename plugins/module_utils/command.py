# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Run external commands the way every module of the collection must: argv lists, C locale, a timeout."""

from __future__ import annotations

import os
import subprocess
import threading

C_LOCALE = {"LANG": "C", "LC_ALL": "C", "LANGUAGE": "C"}


def run_with_timeout(argv, timeout, grace=2):
    """Run ``argv`` (a list) in the C locale -> ``(rc, stdout, stderr)``; ``rc`` is None when it ran past ``timeout``.

    ``module.run_command`` has no timeout, so this uses ``subprocess.run(timeout=...)``, which kills the command
    when it runs too long. A process stuck in the kernel (nvidia-smi after some Xids) can survive SIGKILL and would
    then block the wait forever, so the call runs in a daemon thread that is abandoned after ``grace`` seconds.
    A missing binary gives rc 127, like a shell.
    """
    env = dict(os.environ)
    env.update(C_LOCALE)
    box = {}

    def target():
        try:
            # not run_command: this call must be abandonable in its thread, with a timeout (see above)
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                  env=env, timeout=timeout, check=False)
            box["result"] = (proc.returncode, proc.stdout.decode("utf-8", "replace"),
                             proc.stderr.decode("utf-8", "replace"))
        except subprocess.TimeoutExpired:
            box["result"] = (None, "", "timed out after %ss" % timeout)
        except OSError as exc:
            box["result"] = (127, "", "%s: %s" % (argv[0], exc.strerror or exc))

    worker = threading.Thread(target=target)
    worker.daemon = True
    worker.start()
    worker.join(timeout + grace)
    return box.get("result", (None, "", "timed out after %ss" % timeout))
