# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The collection's version, recorded in PULL_VERIFIED.json and receipts (a test keeps it equal to galaxy.yml)."""

from __future__ import annotations

COLLECTION_VERSION = "0.1.0"
TOOL = "remote_gpu.trainer %s" % COLLECTION_VERSION
