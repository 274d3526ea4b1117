# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The torch build of the interpreter a launched job runs with, read without importing torch.

Importing torch takes seconds and may initialise CUDA. Every torch build carries ``torch/version.py``, written when
it was built: ``__version__`` (``'2.3.0+cu121'``), ``cuda`` (``'12.1'``, ``None`` for a CPU or ROCm build),
``hip`` (ROCm builds), ``xpu`` (newer releases). :func:`probe` runs the job's interpreter with a tiny script that
only *finds* torch (``importlib.util.find_spec``, which does not execute the package, with the code directory as
the working directory, as the job has it) and asks ``importlib.metadata`` for the distribution's version; then it
reads ``version.py`` (bounded) and parses it with :func:`parse_version_py` (pure). A probe that fails gives a
record with the reason, never an exception: the record is a note on the results, never a reason to stop a launch.

The record (``code.json``'s ``torch``, and ``torch`` in each item's ``status.json``)::

    {"version": "2.3.0+cu121", "cuda": "12.1", "hip": null, "build": "cuda", "installed": true,
     "python": "/root/miniconda3/bin/python", "location": "/root/miniconda3/lib/python3.10/site-packages/torch",
     "reason": null}

``installed`` is false when that interpreter finds no torch, null when the probe could not tell. ``build`` is
``cuda``, ``rocm``, ``xpu``, ``cpu``, or null when it is not known; ``reason`` says why a field is null (torch is
not installed for that interpreter, its version.py is missing, the probe failed).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read

MAX_VERSION_PY = 64 * 1024  # a generated version.py has about 300 bytes
MAX_PROBE_OUTPUT = 64 * 1024
PROBE_TIMEOUT = 30
PROBE_MARK = "TRAINER_TORCH_PROBE "

# Run by the job's interpreter: find torch without importing it. Python 3.4 and newer (importlib.metadata: 3.8).
PROBE_SCRIPT = r"""
import json, sys
out = {"location": None, "dist_version": None, "error": None}
try:
    import importlib.util
    spec = importlib.util.find_spec("torch")
    if spec is not None:
        dirs = list(spec.submodule_search_locations or [])
        out["location"] = dirs[0] if dirs else spec.origin
except Exception as exc:
    out["error"] = "%s: %s" % (type(exc).__name__, exc)
try:
    import importlib.metadata
    out["dist_version"] = importlib.metadata.version("torch")
except Exception:
    pass
sys.stdout.write("\n" + MARK + json.dumps(out) + "\n")
""".replace("MARK", repr(PROBE_MARK))

_ASSIGNMENT = re.compile(r"^(__version__|cuda|hip|xpu)[ \t]*(?::[^=\n]*)?=[ \t]*(.+?)[ \t]*$", re.M)


def parse_version_py(text):
    """The literal assignments of ``__version__``, ``cuda``, ``hip`` and ``xpu`` in the text of a generated
    ``torch/version.py`` (both ``cuda = '11.7'`` and ``cuda: Optional[str] = '12.1'``) -> a dict of the names it
    assigns a string or None; a name assigned anything else (an expression) is left out. Never executes the text."""
    found = {}
    for name, value in _ASSIGNMENT.findall(text or ""):
        try:
            literal = ast.literal_eval(value)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        if literal is None or isinstance(literal, str):
            found[name] = literal
    return found


def build_kind(fields):
    """``cuda``, ``rocm``, ``xpu`` or ``cpu`` from parsed version.py fields; None when it names no CUDA build."""
    if "cuda" not in fields:
        return None
    if fields.get("cuda"):
        return "cuda"
    if fields.get("hip"):
        return "rocm"
    if fields.get("xpu"):
        return "xpu"
    return "cpu"


def torch_record(python, location=None, version_py=None, dist_version=None, reason=None):
    """The record from what the probe found: ``location`` (torch's package directory; None: not installed),
    ``version_py`` (the text of its version.py; None: not readable), ``dist_version`` (importlib.metadata's), or
    the ``reason`` the probe failed."""
    record = {"python": python, "installed": None, "location": location, "version": None, "cuda": None, "hip": None,
              "build": None, "reason": reason}
    if reason:
        return record
    record["installed"] = bool(location)
    if not location:
        record["reason"] = "torch is not installed for %s" % python
        return record
    fields = parse_version_py(version_py) if version_py is not None else {}
    record.update(version=fields.get("__version__") or dist_version, cuda=fields.get("cuda"), hip=fields.get("hip"),
                  build=build_kind(fields))
    if version_py is None:
        record["reason"] = "torch at %s has no readable version.py, so its CUDA build is not known" % location
    elif record["build"] is None:
        record["reason"] = "torch's version.py at %s names no CUDA build" % location
    return record


def read_bounded(path, limit=MAX_VERSION_PY):
    """The text of a regular file of at most ``limit`` bytes -> str, or None (absent, not a file, too large). Read
    through safe_read.py (a FIFO must not block the launch)."""
    try:
        data, size, _cut = safe_read.read_bounded(path, limit + 1, follow=True)
    except (OSError, safe_read.ReadRefused):
        return None
    if size > limit or len(data) > limit:
        return None
    return data.decode("utf-8", "replace")


def parse_probe_output(stdout):
    """The probe script's JSON line (the last one that carries PROBE_MARK) -> dict, or None."""
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(PROBE_MARK):
            try:
                value = json.loads(line[len(PROBE_MARK):])
            except ValueError:
                return None
            return value if isinstance(value, dict) else None
    return None


def probe(python, cwd=None, timeout=PROBE_TIMEOUT):
    """The torch record of the interpreter ``python``, run in ``cwd`` (the code directory: the job's working
    directory, first on its ``sys.path``) under the C locale, without the helpers' PYTHONPATH. Never raises for a
    missing or broken interpreter, a timeout or odd output: the record then says why."""
    if not python or not os.path.isabs(python):
        return torch_record(python, reason="no interpreter to ask (got %r)" % (python,))
    if not os.access(python, os.X_OK) or os.path.isdir(python):
        return torch_record(python, reason="%s is not an executable interpreter, so the job's torch is not known"
                                           % python)
    env = dict(os.environ, LC_ALL="C", LANG="C")
    env.pop("PYTHONPATH", None)
    try:
        # not run_command: it has no timeout, and this asks an interpreter that may hang
        proc = subprocess.run([python, "-c", PROBE_SCRIPT], cwd=cwd if cwd and os.path.isdir(cwd) else None,  # pylint: disable=ansible-bad-function
                              env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return torch_record(python, reason="%s did not answer within %d s" % (python, timeout))
    except (OSError, subprocess.SubprocessError) as exc:
        return torch_record(python, reason="%s did not run: %s" % (python, exc))
    found = parse_probe_output(proc.stdout[-MAX_PROBE_OUTPUT:].decode("utf-8", "replace"))
    if found is None:
        err = proc.stderr[-400:].decode("utf-8", "replace").strip().splitlines()
        return torch_record(python, reason="%s exited %d without the probe's answer%s" % (
            python, proc.returncode, (": " + err[-1]) if err else ""))
    location = found.get("location") if isinstance(found.get("location"), str) else None
    if found.get("error") and not location:
        return torch_record(python, reason="finding torch with %s failed: %s" % (python, found["error"]))
    if location and os.path.isfile(location):  # a single-file module named torch
        location = os.path.dirname(location)
    dist = found.get("dist_version") if isinstance(found.get("dist_version"), str) else None
    version_py = read_bounded(os.path.join(location, "version.py")) if location else None
    return torch_record(python, location=location, version_py=version_py, dist_version=dist)


def summary(record):
    """A few words for a report line: ``torch 2.3.0+cu121 CUDA 12.1``, ``torch 2.13.0+cpu CPU-only``,
    ``torch 2.3.0+rocm6.0 ROCm HIP 6.0.32830``, ``no torch``, ``torch unknown`` (the probe failed),
    ``torch ? build unknown``; '' when there is no record."""
    if not isinstance(record, dict):
        return ""
    if record.get("installed") is False:
        return "no torch"
    if not record.get("installed"):
        return "torch unknown"
    text = "torch %s " % (record.get("version") or "?")
    build = record.get("build")
    if build == "cuda":
        return text + "CUDA %s" % record.get("cuda")
    if build == "rocm":
        return text + "ROCm HIP %s" % record.get("hip")
    return text + {"xpu": "XPU", "cpu": "CPU-only"}.get(build, "build unknown")
