"""Every host's variables for a controller action (plugin_utils/host_vars.py), with Ansible's real templar: each host
read once, a value templated with that host's variables only when it holds Jinja syntax, as hostvars[host][name]."""

from __future__ import annotations

import pytest

from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.host_vars import HostVariables


class CountingTemplar:
    """Ansible's templar, counting the templates it renders."""

    def __init__(self):
        self.real = Templar(loader=DataLoader())
        self.rendered = []

    def copy_with_new_env(self, available_variables):
        copy = self.real.copy_with_new_env(available_variables=available_variables)
        counter = self

        class Counted:
            @staticmethod
            def template(value):
                counter.rendered.append(value)
                return copy.template(value)
        return Counted()


class FakeHostVars:
    """hostvars as Ansible's HostVars answers: raw_get gives a host's variables, an Undefined-like for others."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.asked = []

    def __contains__(self, host):
        return host in self.hosts

    def raw_get(self, host):
        self.asked.append(host)
        return self.hosts.get(host, "undefined")


def fleet():
    registered = {"jobs": [{"log_tail": ["epoch {{ 3 }} of {{ n }}"]}], "failed": False}  # a job's own text
    return FakeHostVars({
        "lab-01": {"trainer_home_dir": "/root", "trainer_data_dir": trust_as_template("{{ trainer_home_dir }}/data"),
                   "trainer_meter_stop": {"verb": "shutdown", "argv": ["shutdown", trust_as_template("{{ when }}")]},
                   "when": "now", "patrol_probe": registered, "trainer_price_per_hour": 1.5},
        "lab-02": {"trainer_data_dir": trust_as_template("{{ nosuchvar }}/data")},
    })


def test_plain_values_are_returned_untouched_and_templates_resolved_with_the_hosts_own_variables():
    templar = CountingTemplar()
    hosts = HostVariables(fleet(), templar)
    box = hosts.get("lab-01")
    assert box.get("trainer_price_per_hour") == 1.5
    assert box.get("trainer_home_dir") == "/root"
    assert templar.rendered == []  # plain values never reach the templar
    assert box.get("trainer_data_dir") == "/root/data"
    assert box.get("trainer_meter_stop") == {"verb": "shutdown", "argv": ["shutdown", "now"]}
    assert box.get("missing") is None and box.get("missing", "x") == "x"


def test_each_host_is_read_once_and_each_template_rendered_once():
    templar, hostvars = CountingTemplar(), fleet()
    hosts = HostVariables(hostvars, templar)
    for _round in range(3):
        assert hosts.get("lab-01").get("trainer_data_dir") == "/root/data"
    assert hostvars.asked == ["lab-01"]
    assert len(templar.rendered) == 1


def test_a_registered_result_is_data_even_when_its_text_looks_like_jinja():
    box = HostVariables(fleet(), CountingTemplar()).get("lab-01")
    assert box.get("patrol_probe")["jobs"][0]["log_tail"] == ["epoch {{ 3 }} of {{ n }}"]


def test_a_template_that_fails_raises_ansibles_error_and_an_unknown_host_is_none():
    hosts = HostVariables(fleet(), CountingTemplar())
    with pytest.raises(AnsibleError, match="nosuchvar"):
        hosts.get("lab-02").get("trainer_data_dir")
    assert hosts.get("lab-03") is None
    assert "lab-01" in hosts and "lab-03" not in hosts


def test_a_plain_mapping_of_hosts_works_as_hostvars():
    hosts = HostVariables({"a": {"trainer_profile": "autodl"}}, CountingTemplar())
    assert hosts.get("a").get("trainer_profile") == "autodl"
    assert hosts.get("b") is None
    assert HostVariables(None, CountingTemplar()).get("a") is None
