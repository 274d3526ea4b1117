"""The box's own id: where each platform keeps it, bounded reads without symlinks, and sources that disagree."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import box_identity as bi
from ansible_collections.remote_gpu.trainer.plugins.module_utils import safe_read


def reader(files):
    """read(path) over a dict {path: bytes}; a missing path is ENOENT, a value that is an OSError is raised."""
    def read(path):
        value = files.get(path)
        if value is None:
            raise FileNotFoundError(2, "No such file or directory", path)
        if isinstance(value, OSError):
            raise value
        return value
    return read


def test_runpod_reads_the_container_environment_and_rp_environment():
    files = {"/proc/1/environ": b"PATH=/usr/bin\0RUNPOD_POD_ID=abc123xyz\0RUNPOD_GPU_COUNT=1\0",
             "/etc/rp_environment": b'export RUNPOD_POD_ID="abc123xyz"\nexport PATH="/usr/bin"\n'}
    rows = bi.gather("runpod", {}, read=reader(files))
    assert [(r["source"], r["value"]) for r in rows] == [("session", None), ("container", "abc123xyz"),
                                                         ("file", "abc123xyz")]
    result = bi.decide("runpod", rows)
    assert (result["id"], result["variable"], result["source"], result["error"]) == (
        "abc123xyz", "RUNPOD_POD_ID", "/proc/1/environ", None)


def test_vastai_reads_container_id_from_the_session_and_etc_environment():
    rows = bi.gather("vastai", {"CONTAINER_ID": "9000003"},
                     read=reader({"/etc/environment": b"CONTAINER_ID=9000003\nPUBLIC_IPADDR=1.2.3.4\n"}))
    assert rows[1]["error"] == "No such file or directory"  # no /proc/1/environ: reported, not fatal
    assert bi.decide("vastai", rows)["id"] == "9000003"


def test_the_last_assignment_wins_as_when_the_file_is_sourced():
    text = 'export RUNPOD_POD_ID="old"\nexport RUNPOD_POD_ID="new" # appended at the next start\n'
    assert bi.assignment_value(text, "RUNPOD_POD_ID") == "new"
    assert bi.assignment_value("RUNPOD_POD_IDX=1\n", "RUNPOD_POD_ID") is None
    assert bi.assignment_value("CONTAINER_ID='42'\n", "CONTAINER_ID") == "42"


def test_sources_that_disagree_are_a_conflict_and_give_no_id():
    rows = bi.gather("runpod", {"RUNPOD_POD_ID": "podA"},
                     read=reader({"/proc/1/environ": b"RUNPOD_POD_ID=podB\0"}))
    result = bi.decide("runpod", rows)
    assert result["id"] is None and result["conflict"] and result["error"] == "identity_conflict"
    assert "podA" in result["msg"] and "podB" in result["msg"]


def test_a_value_that_is_no_id_is_refused():
    rows = bi.gather("runpod", {"RUNPOD_POD_ID": "$(rm -rf /)"}, read=reader({}))
    result = bi.decide("runpod", rows)
    assert result["id"] is None and result["error"] == "identity_malformed"


def test_no_source_sets_it_then_no_id_and_no_error():
    rows = bi.gather("runpod", {}, read=reader({"/proc/1/environ": PermissionError(13, "Permission denied")}))
    result = bi.decide("runpod", rows)
    assert result["id"] is None and result["error"] is None and result["has_own_id"]
    assert rows[1]["error"] == "Permission denied"


@pytest.mark.parametrize("provider", ["lambda", "autodl"])
def test_platforms_without_an_id_of_their_own(provider):
    assert bi.gather(provider, {"RUNPOD_POD_ID": "x"}) == []
    result = bi.decide(provider, [])
    assert result["has_own_id"] is False and result["id"] is None and result["error"] is None


def test_reads_are_bounded_and_follow_no_symlink(tmp_path):
    big = tmp_path / "big"
    big.write_bytes(b"x" * 1000)
    assert len(bi.read_bounded(str(big), limit=100)) == 100
    link = tmp_path / "link"
    link.symlink_to(big)
    with pytest.raises(safe_read.ReadRefused, match="symlink"):
        bi.read_bounded(str(link))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(safe_read.ReadRefused, match="FIFO"):
        bi.read_bounded(str(fifo))


def test_a_real_process_environ_is_read_like_the_containers_first_process():
    """/proc/<pid>/environ of a process started with RUNPOD_POD_ID, as the platform starts the container's PID 1."""
    # the child says "ready" once it runs: its environ is then the one it was started with
    child = subprocess.Popen([sys.executable, "-c", "import sys; print('ready', flush=True); sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "RUNPOD_POD_ID": "realproc01"})
    try:
        assert child.stdout.readline() == b"ready\n"
        rows = bi.gather("runpod", {}, proc_environ="/proc/%d/environ" % child.pid)
    finally:
        child.stdin.close()
        child.wait(timeout=30)
        child.stdout.close()
    assert rows[1] == {"source": "container", "where": "/proc/%d/environ" % child.pid, "value": "realproc01",
                       "error": None}
    assert bi.decide("runpod", rows)["id"] == "realproc01"
