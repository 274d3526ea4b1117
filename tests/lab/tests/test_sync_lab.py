"""remote_gpu.trainer.checked_sync through Ansible against a lab AutoDL box's inode-capped durable FS.

One fleet for the module: lab-01 (AutoDL) with a small durable FS (/root/autodl-fs: 64 MiB, 64 inodes), so the
caps are hit for real (ENOSPC from the kernel's tmpfs, not a mock). Sources are written on the data disk
(/root/autodl-tmp) over SSH. The durable FS is also mounted in the host namespace (<state>/regions/autodl-A), which
is how the tests watch the destination during a copy and fill it up midway: when the module's temporary file
appears, the module's process (found by its open file, in the instance's PID namespace) is stopped with SIGSTOP,
the FS is filled (bytes or inodes), and the process continues with SIGCONT. No timing luck is involved.

LAB_NET and LAB_STATE_DIR are honoured when set; otherwise the default net and a pytest tmp dir.
"""
from __future__ import annotations

import errno
import os
import signal
import time

import pytest

from labhelpers import lab_busy
from lab_teardown_support import LabFleet, fill_inodes, module_result, safetensors_bytes, started, torch_zip_bytes

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="the lab fleet needs root (namespaces, tmpfs mounts)"),
              pytest.mark.root, pytest.mark.lab]

HOST = "lab-01"
MODULE = "remote_gpu.trainer.checked_sync"
DURABLE_INODES = 64
DURABLE_SIZE_MIB = 64
BIG_MIB = 40
MIDWAY = 4 << 20
SRC = "/root/autodl-tmp/out"
DEST = "/root/autodl-fs/runs"


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    lab = LabFleet("sync", tmp_path_factory.mktemp("lab-sync"), 1, "--durable-inodes", str(DURABLE_INODES),
                   "--durable-size", "%dm" % DURABLE_SIZE_MIB, "--data-size", "192m")
    busy = lab.busy()
    if busy:
        lab_busy("something already listens on %s:22; set LAB_NET (and LAB_STATE_DIR) to run beside it"
                 % ", ".join(busy))
    with started(lab) as up:
        assert up.hosts[HOST]["lab_platform"] == "autodl"
        yield up


@pytest.fixture
def mount(fleet):
    """The durable FS as the host sees it; emptied after each test (results, fillers, sources)."""
    path = fleet.region_mount(HOST)
    st = os.statvfs(path)
    assert (st.f_files, st.f_blocks * st.f_frsize) == (DURABLE_INODES, DURABLE_SIZE_MIB << 20)
    yield path
    fleet.ssh(HOST, "rm -rf %s/* %s/.[!.]* %s" % ("/root/autodl-fs", "/root/autodl-fs", SRC), check=False)


def sync(fleet, src, dest, **options):
    """(rc, result, output) of checked_sync run on the box through `ansible -m`."""
    return module_result(fleet.module_popen(HOST, MODULE, dict(options, src=src, dest=dest)), HOST)


def temp_files(mount):
    found = []
    for current, _dirs, names in os.walk(mount):
        found += [os.path.join(current, n) for n in names if ".checked_sync." in n]
    return found


def hashes(fleet, root):
    return {rel: value[:2] for rel, value in fleet.snapshot(HOST, root).items()}


def make_source(fleet, name, files):
    """files: {relative path: bytes}, written under SRC/name on the data disk; returns the source dir."""
    root = "%s/%s" % (SRC, name)
    for rel, data in files.items():
        fleet.put(HOST, "%s/%s" % (root, rel), data)
    return root


def make_big(fleet, path, mib):
    fleet.ssh(HOST, "mkdir -p \"$(dirname %s)\" && head -c %dM /dev/urandom > %s" % (path, mib, path))


# ---------------------------------------------------------------------------------------- stop, fill, continue


def instance_pids(fleet):
    ns = os.readlink("/proc/%d/ns/pid" % fleet.init_pid(HOST))
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink("/proc/%s/ns/pid" % entry) == ns:
                    pids.append(int(entry))
            except OSError:
                pass
    return pids


def writer_of(fleet, name):
    """The PID (host namespace) of the instance process that has a file called ``name`` open."""
    for pid in instance_pids(fleet):
        try:
            fds = os.listdir("/proc/%d/fd" % pid)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink("/proc/%d/fd/%s" % (pid, fd)).endswith("/" + name):
                    return pid
            except OSError:
                pass
    return None


def fill_bytes(mount):
    """Write a filler file until the FS has no free byte left (ENOSPC)."""
    path = os.path.join(mount, "filler.bin")
    with open(path, "wb", buffering=0) as handle:
        for chunk in (1 << 20, 1 << 16, 1 << 12):
            block = b"\0" * chunk
            while True:
                try:
                    handle.write(block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    assert os.statvfs(mount).f_bavail == 0
    return path


def sync_filled_midway(fleet, mount, src, dest, watch_name, fill, planned_bytes, reset, attempts=3):
    """Run the sync; when ``watch_name``'s temp file appears in the destination, SIGSTOP the module, ``fill`` the
    FS, SIGCONT. Retried after ``reset()`` if the stop came after the temp file was fully written."""
    host_dest = os.path.join(mount, os.path.relpath(dest, "/root/autodl-fs"))
    prefix = ".%s.checked_sync." % watch_name
    for _attempt in range(attempts):
        proc = fleet.module_popen(HOST, MODULE, {"src": src, "dest": dest})
        deadline, stopped_at = time.monotonic() + 120, None
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                tmp = [n for n in os.listdir(host_dest) if n.startswith(prefix)]
            except FileNotFoundError:
                tmp = []
            if not tmp:
                continue
            pid = writer_of(fleet, tmp[0])
            if pid is None:
                continue
            path = os.path.join(host_dest, tmp[0])
            try:  # let it write a few MiB first, so that the FS fills up in the middle of the file
                while os.path.getsize(path) < MIDWAY and proc.poll() is None:
                    pass
            except FileNotFoundError:
                break  # already renamed: inconclusive
            if proc.poll() is not None or writer_of(fleet, tmp[0]) != pid:
                break  # the module is gone: never signal a PID that may have been reused
            os.kill(pid, signal.SIGSTOP)
            try:
                stopped_at = os.path.getsize(path) if os.path.exists(path) else planned_bytes
                if stopped_at < planned_bytes:
                    filler = fill(mount)
            finally:
                os.kill(pid, signal.SIGCONT)
            break
        rc, result, out = module_result(proc, HOST)
        if stopped_at is not None and stopped_at < planned_bytes:
            return rc, result, out, stopped_at, filler
        # inconclusive: the copy was already written when it was caught; undo and try again
        reset()
    raise AssertionError("could not stop the module while it was writing %s (%d attempts)" % (watch_name, attempts))


# ----------------------------------------------------------------------------------------------------- tests


def test_sync_lands_whole_and_a_rerun_is_unchanged(fleet, mount):
    files = {"best.pt": torch_zip_bytes(), "model.safetensors": safetensors_bytes(),
             "metrics.json": b'{"val_loss": 0.31}\n', "logs/train.log": b"step 1\nstep 2\n"}
    src = make_source(fleet, "exp1", files)
    dest = DEST + "/exp1"
    rc, result, out = sync(fleet, src, dest)
    assert rc == 0 and not result.get("failed"), out
    assert result["changed"] is True and sorted(c["path"] for c in result["copied"]) == sorted(files)
    assert hashes(fleet, dest) == hashes(fleet, src)
    assert temp_files(mount) == []
    rc, again, out = sync(fleet, src, dest)
    assert rc == 0 and again["changed"] is False and sorted(again["unchanged"]) == sorted(files), out


def test_sync_over_the_inode_cap_fails_before_writing_and_keeps_the_old_copy(fleet, mount):
    dest = DEST + "/exp2"
    old = make_source(fleet, "exp2-v1", {"best.pt": torch_zip_bytes(epoch=1), "metrics.json": b'{"epoch": 1}\n'})
    rc, result, out = sync(fleet, old, dest)
    assert rc == 0 and result["changed"], out
    before = fleet.snapshot(HOST, dest)
    st = os.statvfs(mount)
    # the new version: a new best.pt and one small file per eval sample, more than the free inodes
    samples = st.f_ffree + 5
    new = make_source(fleet, "exp2-v2", {"best.pt": torch_zip_bytes(epoch=2), "metrics.json": b'{"epoch": 2}\n'})
    fleet.ssh(HOST, "mkdir -p %s/samples && cd %s/samples && for i in $(seq 1 %d); do echo $i > s$i.json; done"
              % (new, new, samples))
    rc, result, out = sync(fleet, new, dest)
    assert rc != 0 and result["failed"] is True, out
    assert "not enough room" in result["msg"] and "inodes" in result["msg"] and "nothing was written" in result["msg"]
    assert result["copied"] == [] and result["changed"] is False
    assert fleet.snapshot(HOST, dest) == before  # the old copy: same files, bytes, hashes and mtimes
    after = os.statvfs(mount)
    assert (after.f_ffree, after.f_bfree) == (st.f_ffree, st.f_bfree)
    assert temp_files(mount) == []


def test_destination_full_midway_leaves_no_partial_file_and_fails(fleet, mount):
    dest = DEST + "/exp3"
    old = make_source(fleet, "exp3-v1", {"best.bin": b"old checkpoint\n"})
    assert sync(fleet, old, dest)[0] == 0
    before = fleet.snapshot(HOST, dest)
    src = "%s/exp3-v2" % SRC
    make_big(fleet, src + "/best.bin", BIG_MIB)
    assert os.statvfs(mount).f_bavail * os.statvfs(mount).f_frsize > (BIG_MIB << 20)  # the budget check passes
    rc, result, out, stopped_at, filler = sync_filled_midway(
        fleet, mount, src, dest, "best.bin", fill_bytes, BIG_MIB << 20, reset=lambda: sync(fleet, old, dest))
    assert MIDWAY <= stopped_at < BIG_MIB << 20
    assert rc != 0 and result["failed"] is True, out
    assert "No space left on device" in result["msg"] and "not enough room" not in result["msg"], result["msg"]
    assert result["copied"] == [] and result["changed"] is False
    assert temp_files(mount) == []  # no partial file
    os.unlink(filler)
    assert fleet.snapshot(HOST, dest) == before  # the old copy is intact


def test_inode_exhaustion_midway_reports_failure_and_only_whole_files(fleet, mount):
    dest = DEST + "/exp4"
    src = "%s/exp4" % SRC
    make_big(fleet, src + "/a-best.bin", BIG_MIB)
    make_source(fleet, "exp4", {"b-metrics.json": b'{"epoch": 3}\n', "c-config.json": b"{}\n"})
    rc, result, out, _stopped_at, _filler = sync_filled_midway(
        fleet, mount, src, dest, "a-best.bin", lambda mount: fill_inodes(mount, DURABLE_INODES), BIG_MIB << 20,
        reset=lambda: fleet.ssh(HOST, "rm -rf %s" % dest))
    assert rc != 0 and result["failed"] is True, out
    assert "No space left on device" in result["msg"], result["msg"]
    # the file in flight when the inodes ran out still landed whole (a rename needs no inode); the next did not
    assert [c["path"] for c in result["copied"]] == ["a-best.bin"]
    assert "1 file(s) were copied and verified before the failure" in result["msg"]
    landed = hashes(fleet, dest)
    assert sorted(landed) == ["a-best.bin"] and landed["a-best.bin"] == hashes(fleet, src)["a-best.bin"]
    assert temp_files(mount) == []
