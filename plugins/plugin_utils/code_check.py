# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What push_code checks in the code before it leaves the controller: the uncommitted files of its git work tree
(recorded, shown, and refused with ``require_clean``), scripts with CRLF line endings (always refused: bash on
the box stops at their first line with ``$'\\r': command not found``), and whether the code uses wandb (launch then
warns when wandb would run online without a key).

Pure functions plus one bounded directory walk; the action ``remote_gpu.trainer.push_code`` runs git and calls them.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shlex

from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read

# How many names a message lists before it says "and N more".
SHOWN = 20
# How much of a script is read to find a CRLF: the first line is where bash stops.
CRLF_READ_BYTES = 1 << 20


def porcelain_files(output):
    """The paths of ``git status --porcelain -z`` output (str or bytes), sorted, each once.

    Each entry is ``XY PATH``; a rename or copy (``R``/``C`` in X or Y) is followed by its original path, which is
    not listed (the new path is the one in the tree)."""
    if isinstance(output, bytes):
        output = output.decode("utf-8", "surrogateescape")
    entries = output.split("\0")
    found = set()
    index = 0
    while index < len(entries):
        entry = entries[index]
        index += 1
        if len(entry) < 4 or entry[2] != " ":
            continue
        found.add(entry[3:])
        if "R" in entry[:2] or "C" in entry[:2]:
            index += 1  # the original path of a rename or copy
    return sorted(found)


def pushed_files(paths, prefix="", exclude=()):
    """The paths (relative to the repository root, as porcelain gives them) that lie under ``prefix`` (the pushed
    directory, ``git rev-parse --show-prefix``), relative to it and without those the push leaves out (``exclude``:
    rsync's patterns); what git says of the rest of the repository did not ship."""
    found = []
    for path in paths:
        if prefix and not path.startswith(prefix):
            continue
        rel = path[len(prefix):]
        parts = rel.rstrip("/").split("/")
        if rel and not any(_excluded("/".join(parts[:depth]), exclude) for depth in range(1, len(parts) + 1)):
            found.append(rel)
    return found


def listing(names, shown=SHOWN):
    """``a, b, c`` or ``a, b, ... and N more``."""
    names = list(names)
    text = ", ".join(names[:shown])
    return text + (" and %d more" % (len(names) - shown) if len(names) > shown else "")


def dirty_message(src, files, refused):
    """The line that says the pushed tree has uncommitted changes (refused: what to do instead)."""
    line = "%s has uncommitted changes in %d file(s): %s; a result of this launch would come from code that no " \
           "commit holds" % (src, len(files), listing(files))
    if refused:
        return line + ". Nothing was pushed (launch_require_clean is true): commit or stash them, then launch again"
    return line + " (recorded in code.json as dirty_files). Commit them before a run you will report, or set " \
                  "launch_require_clean: true to refuse such a launch"


def command_files(command):
    """The words of a shell command that may name a file of the code directory: relative paths (``train.sh``,
    ``./scripts/run.sh``, ``src/train.py``), without options, variables or shell operators. A command that shlex
    cannot split names none."""
    try:
        words = shlex.split(command or "", comments=True)
    except ValueError:
        return []
    found = []
    for word in words:
        if not word or word.startswith(("-", "/", "~", "$")) or "=" in word or any(c in word for c in "|&;<>*?`"):
            continue
        rel = os.path.normpath(word)
        if rel.startswith("..") or rel == ".":
            continue
        if rel not in found:
            found.append(rel)
    return found


def _excluded(rel, patterns):
    """Whether a path relative to src matches one of rsync's exclude patterns the simple way (a name or a path)."""
    name = rel.rsplit("/", 1)[-1]
    for pattern in patterns or ():
        anchored = pattern.startswith("/")
        pattern = pattern.strip("/")
        if not pattern:
            continue
        if fnmatch.fnmatchcase(rel, pattern) or (not anchored and fnmatch.fnmatchcase(name, pattern)):
            return True
    return False


def scripts(src, command="", exclude=(), walk=os.walk):
    """The files checked for CRLF line endings, relative to ``src`` and sorted: every ``*.sh`` file of the tree
    (outside ``.git`` and the ``exclude`` patterns), and every file of ``src`` that ``command`` names."""
    found = set(rel for rel in command_files(command) if os.path.isfile(os.path.join(src, rel)))
    for current, dirs, names in walk(src):
        rel_dir = os.path.relpath(current, src).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirs[:] = sorted(d for d in dirs if d != ".git" and not _excluded(rel_dir + d, exclude))
        for name in names:
            rel = rel_dir + name
            if name.endswith(".sh") and not _excluded(rel, exclude):
                found.add(rel)
    return sorted(found)


def has_crlf(data):
    """True when the bytes hold a CRLF line ending."""
    return b"\r\n" in data


def crlf_files(src, rels, read_bytes=CRLF_READ_BYTES):
    """The files among ``rels`` (relative to ``src``) whose first ``read_bytes`` hold a CRLF line ending, read with
    safe_read (bounded, non-blocking, no link followed); a file that is not a readable regular file is not judged."""
    found = []
    for rel in rels:
        try:
            data = safe_read.read_bounded(os.path.join(src, rel), read_bytes)[0]
        except (OSError, safe_read.ReadRefused):
            continue
        if has_crlf(data):
            found.append(rel)
    return found


def crlf_message(src, files):
    """The refusal for scripts with CRLF line endings: which, why it fails on the box, how to fix it."""
    quoted = " ".join(shlex.quote(rel) for rel in files[:SHOWN])
    return ("%s: %s has CRLF (Windows) line endings: on the box bash stops at the first line with "
            "\"$'\\r': command not found\". Nothing was pushed. Convert them (in %s: sed -i 's/\\r$//' %s, or "
            "dos2unix) and keep git from converting them back (git config core.autocrlf input, or a .gitattributes "
            "line '*.sh text eol=lf'), then launch again" % (src, listing(files), src, quoted))


# Where a project names its dependencies (top level of the code directory).
DEPENDENCY_FILES = ("requirements*.txt", "pyproject.toml", "setup.py", "setup.cfg", "environment*.yml",
                    "environment*.yaml", "Pipfile")
WANDB_IMPORT = re.compile(rb"^[ \t]*(?:import[ \t]+wandb\b|from[ \t]+wandb\b)", re.MULTILINE)
WANDB_WORD = re.compile(rb"(?<![A-Za-z0-9_.-])wandb(?![A-Za-z0-9_-])", re.IGNORECASE)
MAX_PY_FILES = 5000
PY_READ_BYTES = 256 * 1024


def uses_wandb(src, exclude=(), walk=os.walk):
    """Whether the code uses Weights & Biases: a dependency file at the top of ``src`` names ``wandb``, or a Python
    file (outside ``.git`` and ``exclude``; at most MAX_PY_FILES, the first PY_READ_BYTES of each) imports it."""
    try:
        top = sorted(os.listdir(src))
    except OSError:
        return False
    for name in top:
        if any(fnmatch.fnmatchcase(name, pattern) for pattern in DEPENDENCY_FILES) and \
                WANDB_WORD.search(_head(os.path.join(src, name), PY_READ_BYTES)):
            return True
    seen = 0
    for current, dirs, names in walk(src):
        rel_dir = os.path.relpath(current, src).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir + "/"
        dirs[:] = sorted(d for d in dirs if d != ".git" and not _excluded(rel_dir + d, exclude))
        for name in sorted(names):
            if not name.endswith(".py") or _excluded(rel_dir + name, exclude):
                continue
            seen += 1
            if seen > MAX_PY_FILES:
                return False
            if WANDB_IMPORT.search(_head(os.path.join(current, name), PY_READ_BYTES)):
                return True
    return False


def _head(path, limit):
    try:
        return safe_read.read_bounded(path, limit)[0]
    except (OSError, safe_read.ReadRefused):
        return b""
