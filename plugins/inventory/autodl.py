# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
name: autodl
short_description: AutoDL 容器实例 Pro instances as inventory hosts, through AutoDL's developer API
version_added: 0.1.0
description:
  - Lists the account's 容器实例 Pro (Pro container instance) instances with AutoDL's developer API
    (C(POST /api/v1/dev/instance/pro/list), C(page_index) 1 to C(max_page)), then reads each running instance's
    snapshot (C(GET /api/v1/dev/instance/pro/snapshot?instance_uuid=)) for its SSH address C(proxy_host:ssh_port),
    and makes it a host of the group C(autodl).
  - Only Pro instances have this API. Standard AutoDL instances (the console's ordinary 容器实例) have no public API
    - list them by hand in a static inventory, with the host and port of the SSH command that the console shows
    (C(ssh -p <port> root@<host>)); see the README.
  - AutoDL answers HTTP 200 with an error code in the body; any C(code) other than C(Success) fails the whole source,
    with the code shown.
  - A running instance whose snapshot has no C(proxy_host)/C(ssh_port) yet, or one that is starting, is
    C(starting); C(shutdown) and C(stopped) are C(stopped). Only running instances are listed by default (see
    O(include_states)).
  - C(price_per_hour) is the snapshot's C(payg_price) / 1000 (CNY per hour); AutoDL Pro has no spot instances, so
    C(interruptible) is always false. The snapshot's C(root_password) and C(ssh_command) never reach hostvars.
  - The developer token (console, 设置 / 开发者Token) comes from O(api_key) or the environment variable
    E(AUTODL_TOKEN), and is sent as AutoDL wants it, the bare token in the C(Authorization) header.
extends_documentation_fragment:
  - constructed
  - inventory_cache
  - remote_gpu.trainer.provider_inventory
  - remote_gpu.trainer.provider_inventory.paged
options:
  plugin:
    choices:
      - remote_gpu.trainer.autodl
  api_url:
    description:
      - Base URL of AutoDL's developer API (the plugin calls C(<api_url>/api/v1/dev/instance/pro/list) and
        C(.../snapshot)). Change it for a proxy or the test fake.
    default: https://api.autodl.com
  page_size:
    description: Instances asked for per page of C(pro/list).
    type: int
    default: 50
"""

EXAMPLES = r"""
# The smallest autodl.yml (the token comes from AUTODL_TOKEN) is one line:
#   plugin: remote_gpu.trainer.autodl
#
# autodl.yml: grouped by AutoDL region
plugin: remote_gpu.trainer.autodl
keyed_groups:
  - key: region
    prefix: autodl
"""

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import (
    AUTODL_SNAPSHOT_KEEP, autodl_host, curated)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import ProviderAPIError, autodl_data
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.provider_inventory import ProviderInventory

LIST = "/api/v1/dev/instance/pro/list"
SNAPSHOT = "/api/v1/dev/instance/pro/snapshot"


class InventoryModule(ProviderInventory):
    NAME = "remote_gpu.trainer.autodl"
    PROVIDER = "autodl"
    to_host = staticmethod(autodl_host)

    def fetch(self, client):
        rows = []
        size = max(1, self.get_option("page_size"))
        for page in self.pages():
            data = autodl_data(client.request_json("POST", LIST, body={"page_index": page, "page_size": size}),
                               "POST %s (page %d)" % (LIST, page))
            if not isinstance(data, dict) or not isinstance(data.get("list"), list):
                raise ProviderAPIError("autodl: page %d of %s has no list 'data.list'; nothing from this source is "
                                       "used." % (page, LIST), kind="malformed")
            rows.extend(data["list"])
            try:
                max_page = int(data.get("max_page") or 1)
            except (TypeError, ValueError):
                raise ProviderAPIError("autodl: page %d of %s has a garbled max_page; nothing from this source is "
                                       "used." % (page, LIST), kind="malformed") from None
            if page >= max_page or not data["list"]:
                break
        for row in rows:
            if isinstance(row, dict) and str(row.get("status") or "").lower() == "running" and row.get("uuid"):
                snapshot = autodl_data(client.get_json(SNAPSHOT, {"instance_uuid": str(row["uuid"])}),
                                       "GET %s for %s" % (SNAPSHOT, row["uuid"]))
                # only the address and price fields: the root password never reaches hostvars or the cache
                row["snapshot"] = curated(snapshot, AUTODL_SNAPSHOT_KEEP) if isinstance(snapshot, dict) else {}
        return rows
