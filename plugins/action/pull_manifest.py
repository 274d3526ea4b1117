# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""pull_manifest, teardown's manifest of every job on the box, runs without AnsiballZ where it can
(plugin_utils/direct); it writes the manifest on the box, so it never runs twice."""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.direct import DirectAction


class ActionModule(DirectAction):
    MODULE = "pull_manifest"
    READ_ONLY = False
