# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The controller's side of redaction: which secrets the run knows, and the redaction of whatever a controller
action returns or writes. The redaction itself is module_utils/redact.py's (the one owner, shared with modules).

The known secrets of a run: the values of the controller's secret-named environment variables (the providers' keys,
the AutoDL token, ``HF_TOKEN``, ``WANDB_API_KEY``, any ``*_KEY``/``*_TOKEN``/``*_PASSWORD``/``*_SECRET``) and of the
task's variables named ``*_key``/``*_token``/``*_password``/``*_secret``/``*_webhook`` (plain strings), and the
values of a mapping named ``*_secrets`` (the role credentials' ``credentials_secrets``: ``HF_TOKEN``, ``WANDB_API_KEY``).
"""

from __future__ import annotations

import os

from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import (
    MIN_HARVESTED, SECRET_NAME, environ_secrets, redact, redact_data)


def run_secrets(task_vars=None, environ=None, extra=()):
    """The known secrets of the run (see the module's docstring), plus ``extra``."""
    found = environ_secrets(os.environ if environ is None else environ)
    try:
        items = list((task_vars or {}).items())
    except Exception:  # pylint: disable=broad-except
        items = []  # a variable store that cannot be listed has nothing to add
    for name, value in items:
        if not (isinstance(name, str) and SECRET_NAME.search(name)):
            continue
        try:
            values = list(value.values()) if isinstance(value, dict) else [value]
        except Exception:  # pylint: disable=broad-except
            values = []
        for text in values:
            if isinstance(text, str) and len(text.strip()) >= MIN_HARVESTED and "{{" not in text and "{%" not in text:
                found.append(str(text).strip())
    found.extend(secret for secret in extra if secret)
    return found


def redact_text(text, task_vars=None, extra=()):
    """``text`` redacted against the run's secrets and the known shapes."""
    return redact(text, run_secrets(task_vars, extra=extra))


def redact_result(result, task_vars=None, extra=()):
    """A copy of a result (or any data a controller writes) with every string redacted."""
    return redact_data(result, run_secrets(task_vars, extra=extra))
