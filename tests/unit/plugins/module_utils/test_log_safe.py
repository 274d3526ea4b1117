"""log_safe: a NUL in an argument never reaches syslog, so the module's own check refuses it, on every Python (3.12
and later refuse a NUL in syslog.syslog; 3.11 here stands in for that with a syslog that refuses it the same way)."""

from __future__ import annotations

import json
import syslog

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.remote_gpu.trainer.plugins.module_utils.log_safe import LogSafeModule, without_nul


@pytest.fixture
def strict_syslog(monkeypatch):
    """syslog.syslog as Python 3.12 has it: a message with a NUL byte is a ValueError. Returns what it logged."""
    logged = []

    def log(*args):
        if "\x00" in args[-1]:
            raise ValueError("embedded null character")
        logged.append(args[-1])

    monkeypatch.setattr(syslog, "syslog", log)
    monkeypatch.setattr(basic, "has_journal", False)
    return logged


def test_without_nul_writes_each_nul_out_and_leaves_the_rest():
    assert without_nul("a\x00b\x00") == "a\\x00b\\x00"
    assert without_nul(b"a\x00b") == b"a\\x00b"
    assert without_nul(3) == 3 and without_nul("plain") == "plain"


def test_a_nul_argument_reaches_the_module_and_the_log_shows_it_written_out(strict_syslog):
    with patch_module_args({"root": "/tmp/a\x00b"}):
        module = LogSafeModule(argument_spec={"root": {"type": "path"}})
    assert module.params["root"] == "/tmp/a\x00b"
    assert any("root=/tmp/a\\x00b" in line for line in strict_syslog), strict_syslog


def test_plain_ansiblemodule_fails_on_the_same_argument(strict_syslog, capsys):
    # the failure log_safe exists for: without it the task fails on the log line, never in the module's own words
    with patch_module_args({"root": "/tmp/a\x00b"}):
        with pytest.raises(SystemExit):
            basic.AnsibleModule(argument_spec={"root": {"type": "path"}})
    assert "Failed to log to syslog" in json.loads(capsys.readouterr().out)["msg"]
