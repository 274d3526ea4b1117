"""Fixtures for the playbook tests."""

from __future__ import annotations

import shutil

import pytest

from pbhelpers import LOCAL_INVENTORY, REPO, fake_api


@pytest.fixture
def playbook_copy(tmp_path):
    """A copy of playbooks/ and group_vars/ that a test may break without touching the repo."""
    shutil.copytree(REPO / "group_vars", tmp_path / "group_vars")
    shutil.copytree(REPO / "playbooks", tmp_path / "playbooks", symlinks=True)
    return tmp_path


@pytest.fixture
def local_inventory():
    return LOCAL_INVENTORY


@pytest.fixture
def fake_apis():
    """start(provider, key, records) -> a started fake of that provider's API (tests/lab/providers/fake_api.py);
    every fake started is stopped after the test."""
    started = []

    def start(provider, key, records):
        fake = fake_api.FakeAPI(provider, key, records).start()
        started.append(fake)
        return fake

    yield start
    for fake in started:
        fake.stop()
