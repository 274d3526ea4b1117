# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations


class ModuleDocFragment:
    """Shared descriptions of the module attributes.

    DOCUMENTATION and PLATFORM only describe them (the module states each support level); POSIX and READ_ONLY are
    whole attribute sets: a module extends one of those alone.
    """

    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
"""

    PLATFORM = r"""
options: {}
attributes:
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
"""

    # The attributes of every module of this collection in one fragment: POSIX targets, no diff mode. The module
    # states its own check_mode support (and details).
    POSIX = r"""
options: {}
attributes:
  diff_mode:
    description: Will return details on what has changed (or possibly needs changing in check_mode), when in diff mode.
    support: none
  platform:
    description: Target OS/families that can be operated against.
    support: N/A
    platforms: posix
  check_mode:
    description: Can run in check_mode and return changed status prediction without modifying target.
"""

    # Added after POSIX for a module that only reads (the fragments' check_mode entries merge): check mode runs it
    # as usual.
    READ_ONLY = r"""
options: {}
attributes:
  check_mode:
    support: full
    details: The module only reads, so check mode runs it as usual.
"""
