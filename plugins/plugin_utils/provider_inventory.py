# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""What the providers' inventory plugins share: config, cache, errors, groups, Constructable, filters.

A plugin subclasses ``ProviderInventory`` and sets ``NAME``, ``PROVIDER`` (also the group and the profile name),
optionally ``FILE_SUFFIX``, ``to_host`` (a pure function from provider_hosts) and ``fetch(client)`` (the raw records,
every page, or ProviderAPIError; a paged list loops over ``self.pages()``). ``ENV_VAR``, ``DEFAULT_URL`` and
``AUTH_SCHEME`` (None: the bare key) come from the provider's row of ``provider_lifecycle.PROVIDERS``, the one table
that the module remote_gpu.trainer.instance reads too.
"""

from __future__ import annotations

import os

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin, Cacheable, Constructable

from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_hosts import cache_record, unique_names
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import (
    ProviderAPIError, ProviderHTTP, resolve_api_key, scrub)
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_identity import CONSOLES
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_lifecycle import PROVIDERS
from ansible_collections.remote_gpu.trainer.plugins.module_utils.redact import without_secrets

# states that a person should hear about when the instance is left out (a stopped or terminated one is expected)
NOT_LISTED_WARN = ("starting", "stopping", "preempted", "unhealthy", "unreachable_direct", "unknown")

# the host variable that carries each provider's instance id (runpod_pod_id, vastai_instance_id, ...)
ID_VARS = {provider: row[0] for provider, row in CONSOLES.items()}


def clash(existing_vars, provider, pid):
    """Whether a host already in the inventory (its variables ``existing_vars``) is another instance than
    ``provider``'s ``pid``: a description of it ("runpod instance fakepod0001") or None when merging is safe.

    Safe: a host that carries no provider's id and no ``provider`` (a static inventory's entry that this source fills
    in), or one that already is this very instance (the same account listed by two sources)."""
    existing_vars = existing_vars or {}
    ids = sorted((other, str(existing_vars[var])) for other, var in ID_VARS.items()
                 if existing_vars.get(var) not in (None, ""))
    other_provider = existing_vars.get("provider")
    if not ids and other_provider in (None, ""):
        return None
    if ids == [(provider, str(pid))] and other_provider in (None, "", provider):
        return None
    if ids:
        return "; ".join("%s instance %s (%s)" % (other, oid, ID_VARS[other]) for other, oid in ids)
    return "a %s host (provider=%s)" % (other_provider, other_provider)


def free_name(name, provider, pid, taken):
    """A name for ``provider``'s instance ``pid`` that ``taken(name)`` does not hold: ``<name>-<provider>``, then
    ``<name>-<provider>-<id>``, then numbered."""
    candidates = ["%s-%s" % (name, provider), "%s-%s-%s" % (name, provider, pid)]
    candidates += ["%s-%s-%s-%d" % (name, provider, pid, n) for n in range(2, 100)]
    for candidate in candidates:
        if not taken(candidate):
            return candidate
    raise AnsibleParserError("%s: no free inventory name for instance %s (%s)" % (provider, pid, name))


class ProviderInventory(BaseInventoryPlugin, Constructable, Cacheable):
    NAME = ""
    PROVIDER = ""
    ENV_VAR = ""
    DEFAULT_URL = ""
    AUTH_SCHEME = "Bearer"
    FILE_SUFFIX = None  # the config file's name ends in <FILE_SUFFIX>.yml (default: PROVIDER)
    to_host = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.PROVIDER:
            row = PROVIDERS[cls.PROVIDER]
            cls.ENV_VAR, cls.DEFAULT_URL, cls.AUTH_SCHEME = row["env_var"], row["url"], row["auth_scheme"]

    def verify_file(self, path):
        if not super().verify_file(path):
            return False
        suffix = self.FILE_SUFFIX or self.PROVIDER
        return path.endswith(("%s.yml" % suffix, "%s.yaml" % suffix))

    def fetch(self, client):
        raise NotImplementedError

    def pages(self):
        """Page numbers 1 to max_pages for a paged fetch (break when done); one more fails the source."""
        most = self.get_option("max_pages")
        yield from range(1, most + 1)
        raise ProviderAPIError("%s: more than max_pages=%d pages; nothing from this source is used." % (self.PROVIDER, most),
                               kind="too_many_pages")

    def _client(self):
        key = resolve_api_key(self.get_option("api_key"), self.ENV_VAR, os.environ, self.PROVIDER)
        return ProviderHTTP(self.PROVIDER, self.get_option("api_url") or self.DEFAULT_URL, key, self.ENV_VAR,
                            timeout=self.get_option("timeout"), retry_budget=self.get_option("retry_budget"),
                            max_bytes=self.get_option("max_response_bytes"), auth_scheme=self.AUTH_SCHEME)

    def parse(self, inventory, loader, path, cache=True):
        super().parse(inventory, loader, path, cache)
        self._read_config_data(path)
        cache_key = self.get_cache_key(path)
        use_cache = self.get_option("cache")
        records = None
        if use_cache and cache:
            try:
                records = self._cache[cache_key]
            except KeyError:
                records = None
        if records is None:
            client = None
            try:
                client = self._client()
                records = self.fetch(client)
            except ProviderAPIError as err:
                # the API's own words (AutoDL's msg) may echo the key: scrubbed like everything else
                raise AnsibleParserError(scrub(str(err), client.api_key if client else None)) from None
            except Exception as err:  # pylint: disable=broad-except
                # Never a traceback, never the key: the message of anything unexpected is scrubbed.
                secret = client.api_key if client else (self.get_option("api_key") or os.environ.get(self.ENV_VAR))
                raise AnsibleParserError(scrub("%s: unexpected failure while listing instances: %s: %s"
                                               % (self.PROVIDER, type(err).__name__, err), secret)) from None
            # the cache and everything after it hold only what reaches hostvars (provider_hosts.cache_record: never
            # an instance's environment, start command or credentials), and no secret-named field at any depth
            records = [cache_record(self.PROVIDER, record) for record in without_secrets(records)]
            if use_cache:
                self._cache[cache_key] = records
        self._populate(records)

    def _populate(self, records):
        hosts = []
        skipped = []
        for index, record in enumerate(records):
            try:
                hosts.append(type(self).to_host(record))
            except (ValueError, TypeError, AttributeError) as err:
                skipped.append("record %d (%s)" % (index, err))
        if skipped:
            self.display.warning(scrub("%s: skipped %d malformed instance record(s): %s"
                                       % (self.PROVIDER, len(skipped), "; ".join(skipped[:10])), None))
        strict = self.get_option("strict")
        filters = self.get_option("filters") or []
        listed = set(self.get_option("include_states") or [])
        if self.get_option("include_stopped"):
            listed.add("stopped")
        for host in unique_names(hosts):
            state = host["state"]
            if host.get("warning"):
                self.display.warning(scrub(host["warning"], None))
            if state != "running" and state not in listed:
                if state in NOT_LISTED_WARN:
                    self.display.warning(
                        "%s: instance %s (%s) is %s (%s), so it is not in the inventory: only running instances "
                        "are, in the group '%s'. %s(include_states: [%s] lists it in the group '%s', with no "
                        "address.)" % (self.PROVIDER, host["id"], host["name"], state,
                                       host["hostvars"].get("provider_status") or "no status",
                                       self.PROVIDER, (host.get("message") + " ") if host.get("message") else "",
                                       state, state))
                continue
            hostvars = dict(host["hostvars"])
            # the API this host came from, so that teardown's instance module talks to the same one (a proxy, the fake)
            hostvars["provider_api_url"] = self.get_option("api_url") or self.DEFAULT_URL
            if not self._keep(host["name"], hostvars, filters):
                continue
            name = self._unclashed(host["name"], host["id"])
            if state == "running":
                groups = (self.PROVIDER, "running")
                hostvars["ansible_host"] = host["address"]
                hostvars["ansible_port"] = host["port"]
            else:  # listed on demand (include_states), with no address: the provider's group (its profile's
                # group_vars apply) and the group of its state, never the group running
                groups = (self.PROVIDER, state)
            for group in groups:
                self.inventory.add_group(group)
                self.inventory.add_host(name, group=group)
            for key, value in hostvars.items():
                self.inventory.set_variable(name, key, value)
            self._set_composite_vars(self.get_option("compose"), hostvars, name, strict=strict)
            self._add_host_to_composed_groups(self.get_option("groups"), hostvars, name, strict=strict)
            self._add_host_to_keyed_groups(self.get_option("keyed_groups"), hostvars, name, strict=strict)

    def _unclashed(self, name, pid):
        """``name``, or a new one when another source already made a host of that name for another instance: the
        inventory object is shared by every source of one run (-i runpod.yml -i vastai.yml), and a silent merge would
        give one host two providers' ids, so that a verb could stop the wrong instance."""
        existing = self.inventory.hosts.get(name)
        other = clash(existing.vars if existing is not None else None, self.PROVIDER, pid)
        if other is None:
            return name
        new = free_name(name, self.PROVIDER, pid, lambda candidate: candidate in self.inventory.hosts)
        self.display.warning(
            "%s: instance %s is named '%s', but the inventory already has a host '%s' from another source: %s. Two "
            "instances never merge into one host: this %s instance is the host '%s'. Give the instances distinct names "
            "(a label), or use compose/keyed_groups to tell them apart." % (
                self.PROVIDER, pid, name, name, other, self.PROVIDER, new))
        return new

    def _keep(self, name, hostvars, filters):
        for conditional in filters:
            self.templar.available_variables = hostvars
            try:
                if not self.templar.evaluate_conditional(conditional):
                    return False
            except Exception as err:  # pylint: disable=broad-except
                raise AnsibleParserError("%s: filter %r failed for host %s: %s"
                                         % (self.PROVIDER, conditional, name, err)) from None
        return True
