"""Shared helpers for unit tests: run a module's main() with arguments and read its JSON result."""

from __future__ import annotations

import json
import os
import pathlib

import pytest

from ansible.module_utils.testing import patch_module_args

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "fixtures" / "nvidia"


def run_module(module, args, capsys):
    """Call ``module.main()`` with ``args``; return (failed, result dict). Never lets SystemExit escape."""
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    out = capsys.readouterr().out
    result = json.loads(out)
    return bool(result.get("failed")), result


@pytest.fixture
def module_runner(capsys):
    return lambda module, args: run_module(module, args, capsys)


def is_root():
    return os.geteuid() == 0


@pytest.fixture
def fixtures_dir():
    return FIXTURES
