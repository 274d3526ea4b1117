"""A stand-in CUDA build of torch for a box whose GPUs are the emulator's: it sees no GPU (torch.cuda cannot talk
to a fake driver) but knows the architectures it was compiled for, which is what env_audit's torch arch check reads.
Shared by the unit tests of preflight_probe and the playbook tests of preflight.yml.

    from fake_torch import NO_HOPPER, write_fake_torch
    site = write_fake_torch(tmp_path / "site", NO_HOPPER)   # then PYTHONPATH=site
"""
from __future__ import annotations


# A torch 2.x CUDA 11.x build's architectures: nothing for Hopper (sm_90)
NO_HOPPER = "sm_50 sm_60 sm_70 sm_75 sm_80 sm_86"

_SLEEP = """
import time
time.sleep(%r)"""

_TORCH = """
__version__ = "2.0.1+cu118"
class version:
    cuda = "11.8"
class cuda:
    is_available = staticmethod(lambda: False)
    device_count = staticmethod(lambda: 0)
    get_arch_list = staticmethod(lambda: [])
class _C:
    _cuda_getArchFlags = staticmethod(lambda: %r)
def get_num_threads():
    return 4
"""


def write_fake_torch(site, arch_flags, import_seconds=None):
    """Write the package ``torch`` under the directory ``site`` (created if need be) and return ``site``.
    ``arch_flags``: what ``torch._C._cuda_getArchFlags()`` answers. ``import_seconds``: when given, the import
    sleeps that long first (a real torch takes seconds to import)."""
    pkg = site / "torch"
    pkg.mkdir(parents=True, exist_ok=True)
    head = "" if import_seconds is None else _SLEEP % import_seconds
    (pkg / "__init__.py").write_text(head + _TORCH % arch_flags)
    return site
