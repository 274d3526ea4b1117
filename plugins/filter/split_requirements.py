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


def canonical_name(name):
    """A project name as pip compares it: lower case, runs of '-', '_' and '.' as one '-'."""
    return _SEPARATORS.sub("-", name.lower())


def requirement_name(spec):
    """The project name a requirement line installs ('' when the line is an option or has none)."""
    archive = _ARCHIVE.search(spec)
    if archive:
        return archive.group(1)
    name = _NAME.search(spec)
    return name.group(0) if name else ""


def split_requirements(lines, frameworks):
    """Return {keep, drop, nested}: the lines for pip, the framework pins (as written) and the -r/-c lines.

    Comments and blank lines are left out of all three; each kept line is stripped of its comment.
    """
    if isinstance(lines, (str, bytes)):
        lines = to_text(lines).splitlines()
    if not isinstance(lines, (list, tuple)) or not all(isinstance(line, str) for line in lines):
        raise AnsibleFilterError("split_requirements: the input must be the requirements text or a list of its "
                                 "lines, got %r" % (lines,))
    if isinstance(frameworks, str) or not isinstance(frameworks, (list, tuple)) \
            or not all(isinstance(name, str) for name in frameworks):
        raise AnsibleFilterError("split_requirements: frameworks must be a list of package names, got %r"
                                 % (frameworks,))
    names = {canonical_name(name) for name in frameworks}
    keep, drop, nested = [], [], []
    for line in lines:
        spec = _COMMENT.sub("", line).strip()
        if not spec:
            continue
        if _NESTED.match(spec):
            nested.append(spec)
        elif canonical_name(requirement_name(spec)) in names:
            drop.append(spec)
        else:
            keep.append(spec)
    return {"keep": keep, "drop": drop, "nested": nested}


class FilterModule(object):
    def filters(self):
        return {"split_requirements": split_requirements}
