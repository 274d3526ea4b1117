# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""box_identity, the box's own instance id that teardown reads before a provider's API verb, runs without AnsiballZ
where it can (plugin_utils/direct), as rent_probe already runs it."""

from __future__ import annotations

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.direct import DirectAction


class ActionModule(DirectAction):
    MODULE = "box_identity"
