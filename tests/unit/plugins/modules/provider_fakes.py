"""The providers' API fakes for the module tests of instance and instance_info, imported by name: tests/lab/
providers/fake_api.py (held to the providers' published documents), the id of each provider's first record, and a
fixture that serves fakes for a test and stops them after it."""

from __future__ import annotations

import importlib.util
import pathlib

import pytest

_FAKE = pathlib.Path(__file__).resolve().parents[3] / "lab" / "providers" / "fake_api.py"
_spec = importlib.util.spec_from_file_location("fake_api", _FAKE)
fake_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fake_api)

FIRST_ID = {"runpod": "fakepod0001", "vastai": "9000001", "lambda": "0920582c7ff041399e34823a0be00001",
            "autodl": "pro-fake0000001"}


def serve_fixture(key):
    """A fixture ``serve``: ``serve(provider, count=1, records=None)`` starts a fake of ``provider`` that takes
    ``key``, with ``records`` or ``count`` instances at 198.51.100.<n>:4000<n>; every fake is stopped after the test.
    A test module takes it as ``serve = serve_fixture(KEY)``."""
    @pytest.fixture
    def serve():
        started = []

        def _serve(provider, count=1, records=None):
            if records is None:
                records = fake_api.records_for(provider, [("198.51.100.%d" % i, 40000 + i) for i in range(1, count + 1)])
            fake = fake_api.FakeAPI(provider, key, records).start()
            started.append(fake)
            return fake

        yield _serve
        for fake in started:
            fake.stop()
    return serve
