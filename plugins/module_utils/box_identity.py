# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The instance's own identity, as the box itself knows it (for the module remote_gpu.trainer.box_identity).

Where a platform gives the box an id of its own, and where the box keeps it:

- RunPod sets ``RUNPOD_POD_ID`` in the pod's container environment (RunPod docs, "Pods > References > Environment
  variables"). It is the environment of the container's first process, so ``/proc/1/environ``. RunPod's container
  template ``start.sh`` (runpod/containers, ``export_env_vars``) also writes every ``RUNPOD_*`` variable into
  ``/etc/rp_environment`` as ``export NAME="value"`` lines and has ``~/.bashrc`` source that file, so SSH sessions see
  it too.
- vast.ai sets ``CONTAINER_ID`` (the instance id, the one ``vastai destroy instance`` takes) among its predefined
  variables of the container (vast.ai docs, "Docker Execution Environment"), again in ``/proc/1/environ``. SSH sessions
  see Docker's variables only when the template's onstart copies them into ``/etc/environment`` (vast.ai's advice:
  ``env >> /etc/environment``), so that file is read too.
- Lambda Cloud and AutoDL 容器实例 Pro give the box no id of its own: the controller matches the provider's record
  to the host's address instead (remote_gpu.trainer.instance, ``expect_address``/``expect_port``).

Every source is read bounded (``MAX_BYTES``), without following a symlink, and a source that cannot be read is
reported, never fatal. Sources that disagree are a conflict: no id is returned and the module refuses.
"""

from __future__ import annotations

import re

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read

MAX_BYTES = 256 * 1024

# provider -> the variable that holds the box's own id, and the files that may carry it (besides /proc/1/environ)
PLATFORM_IDS = {
    "runpod": {"variable": "RUNPOD_POD_ID", "files": ("/etc/rp_environment",)},
    "vastai": {"variable": "CONTAINER_ID", "files": ("/etc/environment",)},
    "lambda": None,
    "autodl": None,
}

_ID_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$")
_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")


def read_bounded(path, limit=MAX_BYTES):
    """The first ``limit`` bytes of the regular file ``path``, never through a symlink, never blocking (safe_read:
    /proc files report size 0 and are read to their end). Raises OSError, or safe_read.ReadRefused naming what the
    file is."""
    return safe_read.read_bounded(path, limit)[0]


def environ_value(data, variable):
    """The value of ``variable`` in a NUL-separated environment block (``/proc/PID/environ``), or None."""
    prefix = variable.encode("ascii") + b"="
    for entry in data.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix):].decode("utf-8", "replace")
    return None


def _unquote(value):
    value = value.strip()
    if value[:1] in ("'", '"'):
        end = value.find(value[0], 1)
        return value[1:end] if end > 0 else value[1:]
    return value.split(" #", 1)[0].strip()


def assignment_value(text, variable):
    """The value of ``variable`` in an ``/etc/environment``-style or ``export NAME="value"`` file, or None. The last
    assignment wins, as when the file is sourced (RunPod's start.sh appends to its file at every start)."""
    found = None
    for line in text.splitlines():
        match = _ASSIGN.match(line)
        if match and match.group(1) == variable:
            found = _unquote(match.group(2))
    return found


def valid_id(value):
    """A plausible provider id (letters, digits and ``_.:-``, at most 128 characters)."""
    return bool(value) and bool(_ID_OK.match(value))


def gather(provider, environ, read=read_bounded, proc_environ="/proc/1/environ"):
    """Read every source of ``provider``'s own id -> list of {source, where, value, error}.

    ``environ``: this process's environment (the SSH session's, as sshd passed it). ``read(path)`` returns bytes or
    raises OSError (injected in the tests)."""
    spec = PLATFORM_IDS.get(provider)
    if not spec:
        return []
    variable = spec["variable"]
    rows = [{"source": "session", "where": "the SSH session's environment", "value": environ.get(variable) or None,
             "error": None}]
    try:
        rows.append({"source": "container", "where": proc_environ,
                     "value": environ_value(read(proc_environ), variable), "error": None})
    except (OSError, safe_read.ReadRefused) as err:
        rows.append({"source": "container", "where": proc_environ, "value": None,
                     "error": getattr(err, "strerror", None) or str(err)})
    for path in spec["files"]:
        try:
            value = assignment_value(read(path).decode("utf-8", "replace"), variable)
            rows.append({"source": "file", "where": path, "value": value, "error": None})
        except (OSError, safe_read.ReadRefused) as err:
            rows.append({"source": "file", "where": path, "value": None,
                         "error": getattr(err, "strerror", None) or str(err)})
    for row in rows:
        if row["value"] is not None:
            row["value"] = row["value"].strip() or None
    return rows


def decide(provider, rows):
    """What the sources say -> {id, variable, has_own_id, source, conflict, error, msg}.

    ``id`` is set only when at least one source gives a valid id and every source that gives a value agrees;
    ``error`` is a stable code (``identity_conflict``, ``identity_malformed``) when the box's answer cannot be used."""
    spec = PLATFORM_IDS.get(provider)
    if not spec:
        return {"id": None, "variable": None, "has_own_id": False, "source": None, "conflict": False, "error": None,
                "msg": "%s gives the box no id of its own; the provider's record is matched to the host's address "
                       "and port instead" % provider}
    variable = spec["variable"]
    given = [row for row in rows if row["value"] is not None]
    values = sorted(set(row["value"] for row in given))
    result = {"id": None, "variable": variable, "has_own_id": True, "source": None, "conflict": False,
              "error": None}
    if not given:
        result["msg"] = ("no source on the box sets %s (%s); the provider's record is matched to the host's address "
                         "and port instead" % (variable, ", ".join(row["where"] for row in rows)))
        return result
    bad = [value for value in values if not valid_id(value)]
    if bad:
        result.update(error="identity_malformed", msg="%s on the box is %r, not a provider id; nothing is verified "
                                                      "against it" % (variable, bad[0][:80]))
        return result
    if len(values) > 1:
        result.update(conflict=True, error="identity_conflict", msg="the box's sources disagree on %s: %s; it is not "
                      "known which instance this is" % (variable, "; ".join(
                          "%s says %s" % (row["where"], row["value"]) for row in given)))
        return result
    result.update(id=values[0], source=given[0]["where"],
                  msg="%s=%s (%s)" % (variable, values[0], ", ".join(row["where"] for row in given)))
    return result
