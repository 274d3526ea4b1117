# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The split_requirements filter: sort a requirements file's lines into keep, drop and nested (documented in
split_requirements.yml)."""

from __future__ import annotations

import re

from ansible.errors import AnsibleFilterError
from ansible.module_utils.common.text.converters import to_text

# a comment: from a '#' at the start of the line or after whitespace (a URL's '#egg=' is not one)
_COMMENT = re.compile(r"(^|\s)#.*$")
# a wheel or sdist file name or URL: the project name is what comes before '-<digit>'
_ARCHIVE = re.compile(r"([A-Za-z0-9_.]+)-[0-9][^/]*\.(whl|tar\.gz|zip)$")
# a requirement specifier: the project name is its leading run of name characters
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*")
# a nested requirements or constraints file, whose pins cannot be filtered
_NESTED = re.compile(r"^(-[rc]|--requirement|--constraint)")
_SEPARATORS = re.compile(r"[-_.]+")
# where a requirement's own options (--hash=..., --config-settings ...) begin
_OPTIONS = re.compile(r"\s+--?[A-Za-z]")


def canonical_name(name):
    """A project name as pip compares it: lower case, runs of '-', '_' and '.' as one '-'."""
    return _SEPARATORS.sub("-", name.lower())


def requirement_name(spec):
    """The project name a requirement line installs ('' when the line is an option or has none); the line's own
    options (--hash=...) are not part of it."""
    spec = _OPTIONS.split(spec, 1)[0]
    archive = _ARCHIVE.search(spec)
    if archive:
        return archive.group(1)
    name = _NAME.search(spec)
    return name.group(0) if name else ""


# pip's per-requirement hash option (hash-checking mode turns on as soon as one line carries it)
_HASH = re.compile(r"(^|\s)--hash[=\s]")
# a pylock.toml's file name (PEP 751): pylock.toml or pylock.<name>.toml
_PYLOCK_NAME = re.compile(r"^pylock(\.[^./]+)?\.toml$")
# the hash algorithms pip accepts in --hash, strongest first
_PIP_HASHES = ("sha512", "sha384", "sha256")


def _text(value, what):
    if isinstance(value, bytes):
        value = to_text(value)
    if not isinstance(value, str):
        raise AnsibleFilterError("split_requirements: %s must be text, got %r" % (what, value))
    return value


def logical_lines(lines):
    """The requirement lines as pip reads them: a line that ends with a backslash goes on with the next one (the
    hashes of a pip-compile or uv export file), comments and blank lines left out, whitespace runs made one space."""
    joined, pending = [], ""
    for line in lines:
        stripped = line.rstrip()
        if stripped.endswith("\\") and not _COMMENT.match(stripped.lstrip()):
            pending += stripped[:-1] + " "
            continue
        spec = " ".join(_COMMENT.sub("", pending + line).split())
        pending = ""
        if spec:
            joined.append(spec)
    spec = " ".join(_COMMENT.sub("", pending).split())
    if spec:
        joined.append(spec)
    return joined


def is_pylock(path):
    """Whether a file name is a PEP 751 lock file (pylock.toml, pylock.<name>.toml)."""
    return bool(_PYLOCK_NAME.match(path.replace("\\", "/").rsplit("/", 1)[-1])) if path else False


def _hash_options(entry, where):
    hashes = entry.get("hashes") if isinstance(entry, dict) else None
    if hashes is None:
        return []
    if not isinstance(hashes, dict):
        raise AnsibleFilterError("split_requirements: %s: 'hashes' must be a table of algorithm = digest" % where)
    return ["--hash=%s:%s" % (alg, hashes[alg]) for alg in _PIP_HASHES
            if isinstance(hashes.get(alg), str) and re.match(r"^[0-9a-fA-F]+$", hashes[alg])]


def pylock_lines(text, path="pylock.toml"):
    """A PEP 751 lock file -> requirement lines for pip (which cannot install from one): ``name==version[ ; marker]``
    with a --hash for every wheel and sdist of an index package, ``name @ url`` for an archive (its hashes) or a git
    revision (``git+url@commit``, no hash). A local directory or file path cannot be installed on a box, and says
    so."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11 on the controller
        raise AnsibleFilterError("split_requirements: reading %s needs Python 3.11 or newer on the controller "
                                 "(tomllib); export it to a requirements file instead" % path)
    try:
        lock = tomllib.loads(_text(text, "the lock file"))
    except tomllib.TOMLDecodeError as exc:
        raise AnsibleFilterError("split_requirements: %s is not valid TOML (%s): give a pylock.toml that pip or "
                                 "uv wrote" % (path, exc))
    version = str(lock.get("lock-version", ""))
    if not version.startswith("1."):
        raise AnsibleFilterError("split_requirements: %s has lock-version %r; only the PEP 751 version 1.x is read"
                                 % (path, lock.get("lock-version")))
    packages = lock.get("packages", [])
    if not isinstance(packages, list) or not all(isinstance(pkg, dict) for pkg in packages):
        raise AnsibleFilterError("split_requirements: %s: 'packages' must be an array of tables" % path)
    lines = []
    for number, pkg in enumerate(packages):
        name = pkg.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise AnsibleFilterError("split_requirements: %s: package %d has no valid name" % (path, number + 1))
        where = "%s: package %s" % (path, name)
        marker = pkg.get("marker")
        marker = " ; %s" % marker if isinstance(marker, str) and marker.strip() else ""
        vcs, archive = pkg.get("vcs"), pkg.get("archive")
        if pkg.get("directory") is not None or any(isinstance(part, dict) and part.get("path") and not part.get("url")
                                                   for part in [vcs, archive, pkg.get("sdist")]
                                                   + list(pkg.get("wheels") or [])):
            raise AnsibleFilterError("split_requirements: %s is a local path on the machine that locked it, which "
                                     "pip cannot install on the box: publish it to an index or push it with the "
                                     "code and install it there" % where)
        if isinstance(vcs, dict):
            if vcs.get("type") != "git" or not vcs.get("url") or not vcs.get("commit-id"):
                raise AnsibleFilterError("split_requirements: %s: only a git vcs entry with url and commit-id can be "
                                         "installed" % where)
            lines.append("%s @ git+%s@%s%s" % (name, vcs["url"], vcs["commit-id"], marker))
            continue
        if isinstance(archive, dict):
            if not isinstance(archive.get("url"), str):
                raise AnsibleFilterError("split_requirements: %s: its archive has no url" % where)
            lines.append(" ".join(["%s @ %s%s" % (name, archive.get("url"), marker)]
                                  + _hash_options(archive, where)))
            continue
        if not isinstance(pkg.get("version"), str):
            raise AnsibleFilterError("split_requirements: %s has no version: lock it with its version" % where)
        options = []
        for entry in list(pkg.get("wheels") or []) + ([pkg["sdist"]] if isinstance(pkg.get("sdist"), dict) else []):
            options.extend(option for option in _hash_options(entry, where) if option not in options)
        lines.append(" ".join(["%s==%s%s" % (name, pkg["version"], marker)] + options))
    return lines


def split_requirements(lines, frameworks, path=""):
    """Return {keep, drop, nested, hashed, unhashed}: the lines for pip, the framework pins (as written), the -r/-c
    lines, whether pip will run in hash-checking mode (a kept line has --hash, or --require-hashes is given) and the
    kept requirements without a hash (which that mode refuses).

    ``lines`` is a requirements file (pip-compile's and uv export's continued lines with their hashes included) or,
    when ``path`` names a pylock.toml, that lock file. Comments and blank lines are left out of all the lists; each
    kept line is one logical line, stripped of its comment. Dropping a framework's line (with its hashes) leaves
    every other line as it was, so a hashed file stays valid for pip's --require-hashes mode.
    """
    if isinstance(path, bytes):
        path = to_text(path)
    if not isinstance(path, str):
        raise AnsibleFilterError("split_requirements: path must be the file's name or path, got %r" % (path,))
    if isinstance(frameworks, str) or not isinstance(frameworks, (list, tuple)) \
            or not all(isinstance(name, str) for name in frameworks):
        raise AnsibleFilterError("split_requirements: frameworks must be a list of package names, got %r"
                                 % (frameworks,))
    if is_pylock(path):
        if isinstance(lines, (list, tuple)) and all(isinstance(line, str) for line in lines):
            lines = "\n".join(lines)
        specs = pylock_lines(lines, path)
    else:
        if isinstance(lines, (str, bytes)):
            lines = to_text(lines).splitlines()
        if not isinstance(lines, (list, tuple)) or not all(isinstance(line, str) for line in lines):
            raise AnsibleFilterError("split_requirements: the input must be the requirements text or a list of its "
                                     "lines, got %r" % (lines,))
        specs = logical_lines(lines)
    names = {canonical_name(name) for name in frameworks}
    keep, drop, nested = [], [], []
    for spec in specs:
        if _NESTED.match(spec):
            nested.append(spec)
        elif canonical_name(requirement_name(spec)) in names:
            drop.append(spec)
        else:
            keep.append(spec)
    requirements = [spec for spec in keep if not spec.startswith("-")]
    hashed = any(_HASH.search(spec) for spec in requirements) or "--require-hashes" in keep
    unhashed = [spec for spec in requirements if not _HASH.search(spec)] if hashed else []
    return {"keep": keep, "drop": drop, "nested": nested, "hashed": hashed, "unhashed": unhashed}


class FilterModule(object):
    def filters(self):
        return {"split_requirements": split_requirements}
