"""vram_reaper against real processes holding a fake device file, and a fake nvidia-smi printing real-format CSV."""

from __future__ import annotations

import os
import stat
import subprocess
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import gpu_query, procfs
from ansible_collections.remote_gpu.trainer.plugins.module_utils import vram_reaper as reaper
from ansible_collections.remote_gpu.trainer.plugins.modules import vram_reaper

COMPUTE_APPS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia", "compute-apps")
H200_LOAD = "query-compute-apps__nvidia-h200__590.48.01__linux-x86_64.load.csv"
QUERY_GPU = os.path.join(os.path.dirname(__file__), "..", "..", "..", "fixtures", "nvidia", "query-gpu")
H200_ALL_FIELDS = "query-gpu-all-fields__nvidia-h200__590.48.01__linux-x86_64.%s.csv"


def real_rows():
    """(pid, used MiB, process name) of a real capture (H200 under gpu-burn + memhog)."""
    rows = gpu_query.parse_compute_apps(open(os.path.join(COMPUTE_APPS, H200_LOAD)).read())
    return [(row["pid"], row["used_memory_mib"], row["process_name"]) for row in rows]


def host_pid(pid):
    """A PID of the capture, as a container sees its host's PIDs: ``pid`` itself, unless a process of this machine
    has it (on a busy machine one may be this test's own ancestor, pytest or its lane's shell, whose whole tree
    the listing would then protect), then the next PID that no process has."""
    while os.path.exists("/proc/%d" % pid):
        pid += 1
    return pid


def smi_lines(pids):
    """Our query's format (``pid, used_memory, process_name``, noheader, nounits), DERIVED from the real H200
    capture: its memory and process names, with the PIDs replaced by ``pids`` (None keeps the captured PID, as
    host_pid gives it)."""
    lines = []
    for pid, (real_pid, memory, name) in zip(pids, real_rows()):
        lines.append("%d, %d, %s" % (host_pid(real_pid) if pid is None else pid, memory, name))
    return "\n".join(lines) + ("\n" if lines else "")


def utilization_lines(state):
    """The idle gate's query (``index,pci.bus_id,utilization.gpu``, noheader, nounits), DERIVED from the real H200
    all-fields capture ``state`` (``idle``: 0 %, ``load``: 100 %): its values, in the order asked, units dropped."""
    with open(os.path.join(QUERY_GPU, H200_ALL_FIELDS % state)) as handle:
        header, *rows = [[cell.strip() for cell in line.split(", ")] for line in handle if line.strip()]
    names = [cell.split(" [")[0] for cell in header]
    wanted = [names.index(field) for field in ("index", "pci.bus_id", "utilization.gpu")]
    return "".join(", ".join(row[i].split(" ")[0] for i in wanted) + "\n" for row in rows)


def make_char_device(path, major=1, minor=3):
    """A character device node (a clone of /dev/null by default), as the lab makes its fake /dev/nvidia*."""
    os.mknod(str(path), 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def fake_proc_devices(tmp_path, monkeypatch, text):
    path = tmp_path / "proc-devices"
    path.write_text(text)
    monkeypatch.setattr(reaper, "PROC_DEVICES", str(path))


# /proc/devices of a box whose NVIDIA driver registered major 1 (the major of the fake nodes below)
DRIVER_ON_MAJOR_1 = "Character devices:\n  1 nvidia\n  5 /dev/tty\n\nBlock devices:\n  8 sd\n"


class Box:
    """A fake /dev/nvidia0 in tmp (a character device whose major /proc/devices gives to NVIDIA's driver), a fake
    nvidia-smi on PATH, and real holder processes killed afterwards."""

    def __init__(self, tmp_path, monkeypatch):
        self.dev = tmp_path / "dev"
        self.dev.mkdir()
        make_char_device(self.dev / "nvidia0")
        make_char_device(self.dev / "nvidiactl")
        fake_proc_devices(tmp_path, monkeypatch, DRIVER_ON_MAJOR_1)
        self.bin = tmp_path / "bin"
        self.bin.mkdir()
        self.procs = []
        self.strays = []  # (pid, starttime) of orphans, no longer below a started process
        monkeypatch.setenv("PATH", "%s:%s" % (self.bin, os.environ["PATH"]))
        self.smi("")
        self.gpu("idle")

    def smi(self, output):
        """What --query-compute-apps prints; --query-gpu (the idle gate's) prints gpu.csv."""
        (self.bin / "out.csv").write_text(output)
        script = self.bin / "nvidia-smi"
        script.write_text('#!/bin/bash\ncase "$1" in --query-gpu=*) cat %s ;; *) cat %s ;; esac\n'
                          % (self.bin / "gpu.csv", self.bin / "out.csv"))
        script.chmod(0o755)

    def gpu(self, state):
        (self.bin / "gpu.csv").write_text(utilization_lines(state) if state else "")

    def holder(self, parent=False):
        """A real process holding the fake devices open (under a bash parent with ``parent``)."""
        hold = 'exec 3<"$0" 4<"$1"; exec sleep 600'
        if parent:
            argv = ["bash", "-c", 'bash -c \'%s\' "$0" "$1" & wait' % hold, str(self.dev / "nvidia0"),
                    str(self.dev / "nvidiactl")]
        else:
            argv = ["bash", "-c", hold, str(self.dev / "nvidia0"), str(self.dev / "nvidiactl")]
        proc = subprocess.Popen(argv)
        self.procs.append(proc)
        deadline = time.time() + 10
        while time.time() < deadline:
            found, _unreadable = procfs.holders(str(self.dev / "nvidia*"))
            pids = [pid for pid in found if pid == proc.pid or procfs.read_stat(pid)["ppid"] == proc.pid]
            if pids:
                return proc, pids[0]
            time.sleep(0.05)
        raise AssertionError("holder did not open the device")

    def family(self, workers=2):
        """A main process holding the fake devices whose forked ``workers`` inherit its descriptors, as DataLoader
        workers do -> (main Popen, worker PIDs)."""
        argv = ["bash", "-c", 'exec 3<"$0" 4<"$1"; %s wait' % ("sleep 600 & " * workers), str(self.dev / "nvidia0"),
                str(self.dev / "nvidiactl")]
        proc = subprocess.Popen(argv)
        self.procs.append(proc)
        deadline = time.time() + 10
        while time.time() < deadline:
            found, _unreadable = procfs.holders(str(self.dev / "nvidia*"))
            below = [pid for pid in found if procfs.read_stat(pid) and procfs.read_stat(pid)["ppid"] == proc.pid]
            if len(below) == workers and proc.pid in found:
                return proc, sorted(below)
            time.sleep(0.05)
        raise AssertionError("the workers did not start")

    def orphans(self, workers=2):
        """The workers of a parent that held the devices and died: re-parented, they still hold them -> PIDs."""
        script = 'exec 3<"$0" 4<"$1"; %s' % ("sleep 600 >/dev/null & echo $!; " * workers)
        out = subprocess.run(["bash", "-c", script, str(self.dev / "nvidia0"), str(self.dev / "nvidiactl")],
                             stdout=subprocess.PIPE, check=True, text=True, timeout=10).stdout
        pids = sorted(int(word) for word in out.split())
        self.strays.extend((pid, procfs.read_stat(pid)["starttime"]) for pid in pids)
        return pids

    def args(self, **extra):
        args = {"device_glob": str(self.dev / "nvidia*"), "min_age": 0, "kill_grace": 2, "idle_sample": 0,
                "run_dir": str(self.dev / "no-run-dir")}
        args.update(extra)
        return args

    def cleanup(self):
        """Kill every started process and its children, by PID (children first collected, then killed)."""
        stats = procfs.all_stats()
        below = [pid for proc in self.procs for pid in procfs.descendants(proc.pid, stats) if pid != proc.pid]
        for pid in below:
            if procfs.pid_exists(pid):
                os.kill(pid, 9)
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        for pid, starttime in self.strays:
            if procfs.is_same_process(pid, starttime):
                os.kill(pid, 9)


@pytest.fixture
def box(tmp_path, monkeypatch):
    if os.geteuid() != 0:
        pytest.skip("making a character device node (the fake /dev/nvidia0) needs root")
    fake = Box(tmp_path, monkeypatch)
    yield fake
    fake.cleanup()


def by_pid(rows):
    return {row["pid"]: row for row in rows}


def test_orphan_is_killed_only_with_force(module_runner, box):
    live, live_pid = box.holder()
    orphan, orphan_pid = box.holder()
    box.smi(smi_lines([live_pid]))  # nvidia-smi lists the live job, not the orphan

    failed, result = module_runner(vram_reaper, box.args())
    assert not failed and result["changed"] is False and result["killed"] == []
    assert result["unverified"] is False and result["visible_pids"] == [live_pid]
    assert [c["pid"] for c in result["candidates"]] == [orphan_pid]
    candidate = result["candidates"][0]
    assert candidate["reason"] == "invisible_to_nvidia_smi" and candidate["user"]
    assert candidate["devices"] == sorted([str(box.dev / "nvidia0"), str(box.dev / "nvidiactl")])
    assert "sleep 600" in candidate["cmdline"]
    assert by_pid(result["passed_over"])[live_pid]["reason"] == "visible"
    assert orphan.poll() is None

    failed, result = module_runner(vram_reaper, box.args(force=True, _ansible_check_mode=True))
    # check mode kills nothing, and says it would (issue 16: changed is true when force would kill)
    assert not failed and result["killed"] == [] and result["changed"] is True and orphan.poll() is None
    assert "would kill %d" % orphan_pid in result["msg"]

    failed, result = module_runner(vram_reaper, box.args(force=True))
    assert not failed and result["killed"] == [orphan_pid] and result["changed"] is True
    assert orphan.wait(timeout=10) is not None
    assert live.poll() is None  # the listed process is never touched


def test_young_and_excluded_holders_are_not_candidates(module_runner, box):
    live, live_pid = box.holder()
    _orphan, orphan_pid = box.holder()
    box.smi(smi_lines([live_pid]))
    failed, result = module_runner(vram_reaper, box.args(min_age=3600, force=True))
    assert not failed and result["candidates"] == [] and by_pid(result["passed_over"])[orphan_pid]["reason"] == "young"
    failed, result = module_runner(vram_reaper, box.args(exclude_pids=[orphan_pid], force=True))
    assert not failed and result["killed"] == [] and by_pid(result["passed_over"])[orphan_pid]["reason"] == "excluded_pid"
    me = procfs.user_name(os.geteuid())  # the holders run as whoever runs the tests: exclude that user, root or not
    failed, result = module_runner(vram_reaper, box.args(exclude_users=[me], force=True))
    assert not failed and result["killed"] == []
    assert by_pid(result["passed_over"])[orphan_pid]["reason"] == "excluded_user"
    failed, result = module_runner(vram_reaper, box.args(exclude_commands=["sleep"], force=True))
    assert not failed and result["killed"] == [] and by_pid(result["passed_over"])[orphan_pid]["reason"] == "excluded_command"
    assert live.poll() is None


def test_protected_tree_is_never_killed(module_runner, box, tmp_path):
    live, live_pid = box.holder()
    job, job_child = box.holder(parent=True)  # the job's wrapper is a bash; its child holds the device
    assert job_child != job.pid
    box.smi(smi_lines([live_pid]))
    pid_file = tmp_path / "job.pid"
    pid_file.write_text("%d\n" % job.pid)
    for protect in ({"protect_pids": [job.pid]}, {"protect_pid_files": [str(pid_file)]}):
        failed, result = module_runner(vram_reaper, box.args(force=True, **protect))
        assert not failed and result["killed"] == [], result
        assert by_pid(result["passed_over"])[job_child]["reason"] == "protected"
    assert procfs.pid_exists(job_child) and job.poll() is None
    failed, result = module_runner(vram_reaper, box.args(protect_pid_files=[str(tmp_path / "gone.pid")]))
    assert failed and "gone.pid" in result["msg"]


def test_container_view_is_unverified_and_nothing_is_killed_even_with_force(module_runner, box):
    orphan, orphan_pid = box.holder()
    listing = smi_lines([None, None, None])  # the real capture's host PIDs: none holds a device here
    box.smi(listing)
    failed, result = module_runner(vram_reaper, box.args(force=True))
    first = listing.split(",", maxsplit=1)[0]  # 10291, the capture's, where no process of this machine has it
    assert not failed and result["unverified"] is True and first in result["unverified_reason"], result
    assert [c["pid"] for c in result["candidates"]] == [orphan_pid]
    assert result["killed"] == [] and result["changed"] is False and orphan.poll() is None
    failed, result = module_runner(vram_reaper, box.args(force=True, allow_unverified=True))
    assert not failed and result["killed"] == [orphan_pid]


def test_nothing_listed_inside_a_container_is_unverified(module_runner, box, monkeypatch):
    # The seed's bug: in a container nvidia-smi lists no process, so the live job looked like a zombie.
    job, job_pid = box.holder()
    box.smi("")
    monkeypatch.setattr(reaper, "container_hints", lambda: ["/.dockerenv"])
    failed, result = module_runner(vram_reaper, box.args(force=True))
    assert not failed and result["unverified"] is True and "container" in result["unverified_reason"]
    assert [c["pid"] for c in result["candidates"]] == [job_pid]
    assert result["killed"] == [] and job.poll() is None


def test_nothing_listed_on_bare_metal_is_the_zombie_case(module_runner, box, monkeypatch):
    zombie, zombie_pid = box.holder()
    box.smi("")
    monkeypatch.setattr(reaper, "container_hints", lambda: [])
    failed, result = module_runner(vram_reaper, box.args(force=True, signal="KILL"))
    assert not failed and result["unverified"] is False and result["killed"] == [zombie_pid]
    assert zombie.wait(timeout=10) is not None


def test_nvidia_smi_missing_means_unverified(module_runner, box, monkeypatch):
    orphan, _orphan_pid = box.holder()
    (box.bin / "nvidia-smi").unlink()
    monkeypatch.setenv("PATH", str(box.bin))
    failed, result = module_runner(vram_reaper, box.args(force=True))
    assert not failed and result["unverified"] is True and "not installed" in result["unverified_reason"]
    assert result["killed"] == [] and orphan.poll() is None


def test_self_and_parents_are_guarded(module_runner, box):
    box.smi("")
    handle = open(str(box.dev / "nvidia0"))  # this very process (the module runs in it) holds the device
    try:
        failed, result = module_runner(vram_reaper, box.args(force=True, allow_unverified=True))
        assert not failed and result["killed"] == []
        assert by_pid(result["passed_over"])[os.getpid()]["reason"] == "self"
    finally:
        handle.close()


def test_bad_numbers_fail_cleanly(module_runner, box):
    failed, result = module_runner(vram_reaper, box.args(min_age=-1))
    assert failed and "min_age" in result["msg"] and result["killed"] == []


def write_job(run_dir, name, pid, starttime):
    """A job directory as detached_job leaves it (job_layout's layout): job.pid and job.starttime."""
    job_dir = run_dir / name
    job_dir.mkdir(parents=True)
    (job_dir / "job.pid").write_text("%d\n" % pid)
    (job_dir / "job.starttime").write_text("%d\n" % starttime)


def test_workers_of_a_listed_process_are_never_killed_but_orphans_of_a_dead_parent_are(module_runner, box):
    """Issue 16: nvidia-smi lists the main process only; its forked workers hold the devices through inherited
    descriptors. No protect_pids, no protect_pid_files, no run directory: the listed process's tree is enough."""
    main, workers = box.family(2)
    orphans = box.orphans(2)
    assert not set(orphans) & procfs.descendants(main.pid, procfs.all_stats())
    box.smi(smi_lines([main.pid]))
    failed, result = module_runner(vram_reaper, box.args(force=True, kill_grace=1))
    assert not failed and result["unverified"] is False, result
    assert sorted(result["killed"]) == orphans and result["changed"] is True
    passed = by_pid(result["passed_over"])
    assert passed[main.pid]["reason"] == "visible"
    assert [passed[pid]["reason"] for pid in workers] == ["visible_tree", "visible_tree"]
    assert main.poll() is None and all(procfs.pid_exists(pid) for pid in workers)
    assert not any(procfs.pid_exists(pid) for pid in orphans)


def test_a_job_of_the_run_directory_is_protected_without_protect_pid_files(module_runner, box, tmp_path, monkeypatch):
    job, workers = box.family(2)  # the job's wrapper holds the devices, nvidia-smi lists nobody (the U11 case)
    run_dir = tmp_path / "jobs"
    write_job(run_dir, "train", job.pid, procfs.read_stat(job.pid)["starttime"])
    monkeypatch.setattr(reaper, "container_hints", lambda: [])
    failed, result = module_runner(vram_reaper, box.args(force=True, run_dir=str(run_dir)))
    assert not failed and result["killed"] == [] and result["changed"] is False, result
    assert result["job_pids"] == [job.pid] and result["candidates"] == []
    assert {row["pid"]: row["reason"] for row in result["passed_over"]} == dict.fromkeys([job.pid] + workers,
                                                                                         "job_tree")
    # a container's view (host PIDs) with allow_unverified: the job is still safe, the orphans are reaped
    orphans = box.orphans(1)
    box.smi(smi_lines([None]))
    failed, result = module_runner(vram_reaper, box.args(force=True, allow_unverified=True, run_dir=str(run_dir),
                                                         signal="KILL"))
    assert not failed and result["unverified"] is True and result["killed"] == orphans, result
    assert job.poll() is None and all(procfs.pid_exists(pid) for pid in workers)
    # the protection comes from the job's files: a stale job.pid (another start time) protects nothing
    (run_dir / "train" / "job.starttime").write_text("1\n")
    failed, result = module_runner(vram_reaper, box.args(run_dir=str(run_dir)))
    assert not failed and result["job_pids"] == [] and sorted(by_pid(result["candidates"])) == sorted(
        [job.pid] + workers)


def test_the_idle_gate_holds_back_a_candidate_on_a_busy_gpu(module_runner, box):
    _live, live_pid = box.holder()
    orphan, orphan_pid = box.holder()
    box.smi(smi_lines([live_pid]))
    box.gpu("load")  # the real H200 capture under gpu-burn: 100 %
    failed, result = module_runner(vram_reaper, box.args(force=True, idle_sample=1))
    assert not failed and result["killed"] == [] and result["candidates"] == [] and result["changed"] is False
    row = by_pid(result["passed_over"])[orphan_pid]
    assert row["reason"] == "gpu_busy" and row["gpu_peak_pct"] == 100
    assert result["gpu_utilization"] == [{"index": 0, "bus_id": "0000:83:00.0", "peak_pct": 100}]
    assert "idle gate" in result["msg"] and "above 5%" in result["msg"]
    failed, result = module_runner(vram_reaper, box.args(force=True, _ansible_check_mode=True))
    assert not failed and result["changed"] is False  # check mode: nothing would be killed
    failed, result = module_runner(vram_reaper, box.args(force=True, idle_util_max=99))
    assert not failed and result["killed"] == [] and orphan.poll() is None
    box.gpu("")  # nvidia-smi gives no utilisation: not provably idle
    failed, result = module_runner(vram_reaper, box.args(force=True))
    assert not failed and result["killed"] == [] and by_pid(result["passed_over"])[orphan_pid]["reason"] == \
        "gpu_util_unknown" and "idle_util_max=100" in result["msg"]
    failed, result = module_runner(vram_reaper, box.args(force=True, idle_util_max=100))  # the gate off
    assert not failed and result["killed"] == [orphan_pid] and result["gpu_utilization"] == []
    assert orphan.wait(timeout=10) is not None


def test_an_idle_gpu_lets_the_candidate_through(module_runner, box):
    _live, live_pid = box.holder()
    orphan, orphan_pid = box.holder()
    box.smi(smi_lines([live_pid]))
    failed, result = module_runner(vram_reaper, box.args(force=True, signal="KILL"))  # the idle capture: 0 %
    assert not failed and result["killed"] == [orphan_pid] and result["candidates"][0]["gpu_peak_pct"] == 0
    assert orphan.wait(timeout=10) is not None


@pytest.mark.parametrize("extra,fragment", [({"idle_util_max": 101}, "idle_util_max must be a percentage"),
                                            ({"idle_util_max": -1}, "idle_util_max must be a percentage"),
                                            ({"idle_sample": -1}, "idle_sample must be 0 or more"),
                                            ({"run_dir": "jobs"}, "run_dir 'jobs' is relative")])
def test_bad_gate_and_run_dir_values_fail_cleanly(module_runner, box, extra, fragment):
    failed, result = module_runner(vram_reaper, box.args(force=True, **extra))
    assert failed and fragment in result["msg"] and result["killed"] == []


def hold(box, *paths):
    """A real process holding ``paths`` open (read-only), tracked by ``box`` for clean-up."""
    redirects = " ".join('%d<"${%d}"' % (3 + i, i + 1) for i in range(len(paths)))
    proc = subprocess.Popen(["bash", "-c", "exec %s; exec sleep 600" % redirects, "hold"] + [str(p) for p in paths])
    box.procs.append(proc)
    deadline = time.time() + 10
    while time.time() < deadline and len(procfs.fd_entries(proc.pid)) < 3 + len(paths):
        time.sleep(0.05)
    return proc


def test_a_regular_file_held_open_never_makes_a_holder(module_runner, box):
    regular = box.dev / "nvidia7"
    regular.write_text("")
    proc = hold(box, regular)
    failed, result = module_runner(vram_reaper, box.args(force=True, signal="KILL"))
    assert not failed and proc.pid not in by_pid(result["candidates"] + result["passed_over"])
    assert result["killed"] == [] and proc.poll() is None


@pytest.mark.parametrize("devices", ["Character devices:\n  1 mem\n195 nvidia\n", "Character devices:\n  1 mem\n"])
def test_dev_null_as_the_glob_lists_nobody(module_runner, box, tmp_path, monkeypatch, devices):
    """The shells holding /dev/null are never holders, with or without a driver. (A dry run: on a code that
    counted them, force would kill every process of this machine that holds /dev/null.)"""
    proc = hold(box, "/dev/null")
    fake_proc_devices(tmp_path, monkeypatch, devices)
    failed, result = module_runner(vram_reaper, box.args(device_glob="/dev/null"))
    assert not failed and result["candidates"] == [] and result["passed_over"] == [] and proc.poll() is None


def test_a_device_of_another_driver_is_not_counted(module_runner, box, tmp_path, monkeypatch):
    """With NVIDIA's driver on major 195, the clones of /dev/null (major 1) are not GPU devices."""
    proc = hold(box, box.dev / "nvidia0")
    fake_proc_devices(tmp_path, monkeypatch, "Character devices:\n  1 mem\n195 nvidia-frontend\n508 nvidia-uvm\n")
    failed, result = module_runner(vram_reaper, box.args())
    assert not failed and proc.pid not in by_pid(result["candidates"] + result["passed_over"])
    assert result["device_rule"].startswith("character devices of the NVIDIA driver (major 195, 508)")


def test_without_a_driver_only_nodes_named_like_the_drivers_count(module_runner, box, tmp_path, monkeypatch):
    """No NVIDIA driver in /proc/devices (the lab): a character device counts only as /dev/nvidia*."""
    proc = hold(box, box.dev / "nvidia0")
    fake_proc_devices(tmp_path, monkeypatch, "Character devices:\n  1 mem\n  5 /dev/tty\n")
    failed, result = module_runner(vram_reaper, box.args())
    assert not failed and proc.pid not in by_pid(result["candidates"] + result["passed_over"])
    assert "no NVIDIA driver" in result["device_rule"]


@pytest.mark.parametrize("glob,fragment", [("", "device_glob is empty"), ("   ", "device_glob is empty"),
                                           ("nvidia*", "not absolute")])
def test_unusable_globs_are_refused(module_runner, box, glob, fragment):
    failed, result = module_runner(vram_reaper, box.args(device_glob=glob, force=True))
    assert failed and fragment in result["msg"] and result["killed"] == []
