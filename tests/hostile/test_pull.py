"""Hostile inputs of the pull: pull_manifest (on the box), pull_verify and teardown_gate (on the controller).

Symbolic links in and out of the result root, FIFOs and devices, `..`, NUL and newlines in the roster, empty and
malformed manifests, malicious pickles, zip and safetensors bombs, and a pull directory that is not what it should
be. Every case is built for real in ``tmp_path``; nothing malicious is ever executed or unpickled.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import pathlib
import shutil
import stat
import struct
import subprocess
import sys

import pytest

from hostile import Case

from ansible_collections.remote_gpu.trainer.plugins.action.pull_verify import ActionModule as PullVerify
from ansible_collections.remote_gpu.trainer.plugins.action.teardown_gate import ActionModule as TeardownGate
from ansible_collections.remote_gpu.trainer.plugins.module_utils import manifest as mf
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import teardown
from ansible_collections.remote_gpu.trainer.plugins.modules import pull_manifest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "unit" / "plugins" / "module_utils"))
from checkpoint_files import (  # noqa: E402  pylint: disable=wrong-import-position,import-error
    evil_pickle,
    write_legacy_with,
    write_torch_zip,
    write_zip_bomb,
)

RUN, HOST = "r1", "box1"
SYSTEM = "%s.system" % os.system.__module__  # posix.system on Linux: what pickle writes for os.system


def that(condition, result):
    """The assertion of a case's check (a check's return value is not looked at)."""
    assert condition, result.get("msg")


def tree(root, files):
    for rel, data in files.items():
        path = root.joinpath(*rel.split("/"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def safetensors(count=4):
    header = json.dumps({"w": {"dtype": "U8", "shape": [count], "data_offsets": [0, count]}}).encode()
    return struct.pack("<Q", len(header)) + header + b"S" * count


# --------------------------------------------------------------------------- pull_manifest on the box


def box(tmp, make=None, **args):
    """pull_manifest's arguments over a result root with best.pt and metrics.json (``make`` adds hostile files)."""
    root = tree(tmp / "runs" / RUN, {"best.pt": b"B" * 100, "metrics.json": b"{}\n"})
    outside = tree(tmp / "outside", {"id_rsa": b"PRIVATE KEY"})
    if make:
        make(root, outside)
    full = {"root": str(root), "roster": ["best.pt"], "run_id": RUN}
    full.update(args)
    return dict((key, value) for key, value in full.items() if value is not None)


def manifest_written(tmp):
    return (tmp / "runs" / ("PULL_MANIFEST.%s.json" % RUN)).exists()


def nothing_written(result, tmp):
    assert not manifest_written(tmp) and result["manifest"] == {} and result["sha256"] == ""


def roster(*entries, make=None):
    return lambda tmp: box(tmp, make, roster=list(entries))


def mknod(path, major, minor):
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    os.mknod(str(path), 0o600 | stat.S_IFCHR, os.makedev(major, minor))


def recorded_as_target(result, tmp):
    files = dict((f["path"], f["sha256"]) for f in result["manifest"]["files"])
    assert set(files.values()) == {hashlib.sha256(b"B" * 100).hexdigest()} and len(files) == 2


MANIFEST_CASES = [
    Case("pull_manifest: roster entry ../ out of the root", pull_manifest, roster("../outside/id_rsa"), "error",
         "'..' component", check=nothing_written),
    Case("pull_manifest: roster entry ckpt/../../x", pull_manifest, roster("ckpt/../../outside/id_rsa"), "error",
         "'..' component", check=nothing_written),
    Case("pull_manifest: absolute roster entry", pull_manifest, roster("/etc/passwd"), "error", "is absolute",
         check=nothing_written),
    Case("pull_manifest: NUL in a roster entry", pull_manifest, roster("best.pt\x00.txt"), "error",
         "control character", check=nothing_written),
    Case("pull_manifest: newline in a roster entry", pull_manifest, roster("best.pt\nmetrics.json"), "error",
         "control character", check=nothing_written),
    Case("pull_manifest: link to a credential outside the root", pull_manifest,
         roster("key.pt", make=lambda root, out: (root / "key.pt").symlink_to(out / "id_rsa")), "error",
         "leads outside the root", check=nothing_written),
    Case("pull_manifest: relative link climbing out of the root", pull_manifest,
         roster("key.pt", make=lambda root, out: (root / "key.pt").symlink_to("../../outside/id_rsa")), "error",
         "leads outside the root", check=nothing_written),
    Case("pull_manifest: directory link out of the root", pull_manifest,
         roster("ext/id_rsa", make=lambda root, out: (root / "ext").symlink_to(out, target_is_directory=True)),
         "error", "leads outside the root", check=nothing_written),
    Case("pull_manifest: dangling link", pull_manifest,
         roster("best.pt", "gone.pt", make=lambda root, out: (root / "gone.pt").symlink_to("epoch_99.pt")),
         "error", "to nothing", check=nothing_written),
    Case("pull_manifest: link loop", pull_manifest,
         roster("a.pt", make=lambda root, out: ((root / "a.pt").symlink_to("b.pt"),
                                                (root / "b.pt").symlink_to("a.pt"))),
         "error", "cannot be resolved", check=nothing_written),
    Case("pull_manifest: FIFO on the roster", pull_manifest,
         roster("pipe.pt", make=lambda root, out: os.mkfifo(str(root / "pipe.pt"))), "error", "FIFO", timeout=5,
         check=nothing_written),
    Case("pull_manifest: character device (zero) on the roster", pull_manifest,
         roster("zero.pt", make=lambda root, out: mknod(root / "zero.pt", 1, 5)), "error", "character device",
         timeout=5, check=nothing_written),
    Case("pull_manifest: link to /dev/zero on the roster", pull_manifest,
         roster("zero.pt", make=lambda root, out: (root / "zero.pt").symlink_to("/dev/zero")), "error",
         "leads outside the root", timeout=5, check=nothing_written),
    Case("pull_manifest: directory on the roster", pull_manifest,
         roster("ckpt", make=lambda root, out: (root / "ckpt").mkdir()), "error", "directory",
         check=nothing_written),
    Case("pull_manifest: empty roster", pull_manifest, roster(), "error", "roster is empty", check=nothing_written),
    Case("pull_manifest: roster file of comments only", pull_manifest,
         lambda tmp: box(tmp, lambda root, out: (out / "roster").write_text("# nothing\n\n"), roster=None,
                         roster_file=str(tmp / "outside" / "roster")), "error", "roster is empty"),
    Case("pull_manifest: roster file that is a FIFO", pull_manifest,
         lambda tmp: box(tmp, lambda root, out: os.mkfifo(str(out / "roster")), roster=None,
                         roster_file=str(tmp / "outside" / "roster")), "error", "FIFO", timeout=5),
    Case("pull_manifest: roster file /dev/zero", pull_manifest,
         lambda tmp: box(tmp, roster=None, roster_file="/dev/zero"), "error", "character device", timeout=5),
    Case("pull_manifest: roster file not UTF-8", pull_manifest,
         lambda tmp: box(tmp, lambda root, out: (out / "roster").write_bytes(b"best.pt\n\xff\xfe\n"), roster=None,
                         roster_file=str(tmp / "outside" / "roster")), "error", "cannot read roster file"),
    Case("pull_manifest: manifest_path inside the root", pull_manifest,
         lambda tmp: box(tmp, manifest_path=str(tmp / "runs" / RUN / "PULL_MANIFEST.json")), "error",
         "inside root",
         check=lambda result, tmp: that(not (tmp / "runs" / RUN / "PULL_MANIFEST.json").exists(), result)),
    Case("pull_manifest: manifest_path through a link into the root", pull_manifest,
         lambda tmp: box(tmp, lambda root, out: (out / "into").symlink_to(root, target_is_directory=True),
                         manifest_path=str(tmp / "outside" / "into" / "m.json")), "error", "inside root",
         check=lambda result, tmp: that(not (tmp / "runs" / RUN / "m.json").exists(), result)),
    # a null device of its own: a regression must not replace the machine's /dev/null
    Case("pull_manifest: manifest_path is a null device", pull_manifest,
         lambda tmp: box(tmp, lambda root, out: mknod(out / "null", 1, 3), manifest_path=str(tmp / "outside" / "null")),
         "error", "character device, not a regular file",
         check=lambda result, tmp: that(stat.S_ISCHR(os.lstat(str(tmp / "outside" / "null")).st_mode), result)),
    Case("pull_manifest: manifest_path is a directory", pull_manifest,
         lambda tmp: box(tmp, manifest_path=str(tmp / "outside")), "error", "directory, not a regular file"),
    Case("pull_manifest: root is /", pull_manifest, lambda tmp: box(tmp, root="/", manifest_path=str(tmp / "m.json")),
         "error", "whole filesystem", check=lambda result, tmp: that(not (tmp / "m.json").exists(), result)),
    Case("pull_manifest: NUL in root", pull_manifest, lambda tmp: box(tmp, root=str(tmp / "runs") + "/r\x001"),
         "error", "control character"),
    Case("pull_manifest: root is a file", pull_manifest,
         lambda tmp: box(tmp, root=str(tmp / "outside" / "id_rsa")), "error", "is not a directory"),
    Case("pull_manifest: link inside the root is recorded as its target", pull_manifest,
         roster("best.pt", "last.pt", make=lambda root, out: (root / "last.pt").symlink_to("best.pt")), "ok",
         check=recorded_as_target),
    Case("pull_manifest: FIFO and device in the root, not on the roster, are never opened", pull_manifest,
         roster("best.pt", make=lambda root, out: (os.mkfifo(str(root / "pipe")), mknod(root / "zero", 1, 5))),
         "ok", timeout=5, check=lambda result, tmp: that(manifest_written(tmp) and result["file_count"] == 1, result)),
    Case("pull_manifest: a file named like an rsync option is just a file", pull_manifest,
         roster("--log-file=x", make=lambda root, out: (root / "--log-file=x").write_bytes(b"x")), "ok",
         check=lambda result, tmp: that([f["path"] for f in result["manifest"]["files"]] == ["--log-file=x"], result)),
]


@pytest.mark.parametrize("case", MANIFEST_CASES, ids=str)
def test_pull_manifest(case, hostile):
    hostile(case)


# --------------------------------------------------------------------------- pull_verify on the controller


def pulled(tmp, files=None, roster_=None, box_links=None, damage=None, manifest_bytes=None, **args):
    """pull_verify's arguments (pull=false) over a box root and the copy rsync -a would leave on the controller.

    ``box_links``: links made in the box root before the manifest; ``damage(data_dir, tmp)``: what happens to the
    copy after the pull; ``manifest_bytes``: a hostile manifest instead of pull_manifest's.
    """
    root = tree(tmp / "box" / RUN, files or {"metrics.json": b"{}\n", "weights.safetensors": safetensors()})
    for name, target in (box_links or {}).items():
        (root / name).symlink_to(target)
    data = manifest_bytes
    if data is None:
        names = roster_ or sorted(files or ["metrics.json", "weights.safetensors"])
        data = mf.manifest_bytes(mf.build_manifest(str(root), names))
    manifest_path = tmp / "box" / "PULL_MANIFEST.json"
    manifest_path.write_bytes(data)
    dest = tmp / "pulls" / HOST / RUN
    shutil.copytree(str(root), str(dest / "data"), symlinks=True)
    shutil.copyfile(str(manifest_path), str(dest / "PULL_MANIFEST.json"))
    if damage:
        damage(dest / "data", tmp)
    full = {"src": str(root), "manifest_path": str(manifest_path), "manifest_sha256": hashlib.sha256(data).hexdigest(),
            "run_id": RUN, "pull_root": str(tmp / "pulls"), "pull": False, "use_torch": False}
    full.update(args)
    return full


def not_verified(result, tmp):
    assert result["verified"] is False
    assert not (tmp / "pulls" / HOST / RUN / teardown.VERIFIED_NAME).exists()


def refused_with(code):
    def check(result, tmp):
        not_verified(result, tmp)
        assert code in [p["code"] for p in result["problems"]], result["problems"]
    return check


def real_files(*rels):
    def check(result, tmp):
        data = tmp / "pulls" / HOST / RUN / "data"
        assert result["verified"] is True
        for rel in rels:
            assert mf.link_in_path(str(data), rel) is None and (data / rel).is_file(), rel
    return check


def checkpoint(name, writer):
    """pull_verify's arguments over a box whose one checkpoint ``name`` is written by ``writer(path)``."""
    def args(tmp):
        (tmp / "ck").mkdir()
        data = writer(tmp / "ck" / name).read_bytes()
        return pulled(tmp, files={name: data, "metrics.json": b"{}\n"})
    return args


def relink(rel, target):
    def damage(data, tmp):
        (data / rel).unlink()
        (data / rel).symlink_to(target(tmp) if callable(target) else target)
    return damage


def sparse_safetensors(path):
    with open(str(path), "wb") as handle:      # a header length just under the file size, over the 100 MB cap
        handle.write(struct.pack("<Q", 150 * 1000 * 1000 - 8) + b"{")
        handle.truncate(150 * 1000 * 1000)
    return path


def forged_length(path):
    path.write_bytes(b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19." + b"\x80\x04\x8d"
                     + struct.pack("<Q", 2 ** 60) + b"abc")
    return path


def bad_manifest(data):
    return lambda tmp: pulled(tmp, manifest_bytes=data)


VERIFY_CASES = [
    Case("pull_verify: best -> epoch link inside the root becomes a real file", PullVerify,
         lambda tmp: pulled(tmp, roster_=["best.safetensors", "weights.safetensors"],
                            box_links={"best.safetensors": "weights.safetensors"}, allow_extra=True), "ok",
         check=real_files("best.safetensors", "weights.safetensors")),
    Case("pull_verify: directory link inside the root becomes a real directory", PullVerify,
         lambda tmp: pulled(tmp, roster_=["latest/weights.safetensors"], box_links={"latest": "."},
                            allow_extra=True), "ok", check=real_files("latest/weights.safetensors")),
    Case("pull_verify: roster link retargeted outside the pull", PullVerify,
         lambda tmp: pulled(tmp, damage=relink("metrics.json", lambda tmp: tmp / "box" / RUN / "metrics.json")),
         "refused", check=refused_with("symlink")),
    Case("pull_verify: roster link to the controller's /etc/passwd", PullVerify,
         lambda tmp: pulled(tmp, damage=relink("metrics.json", "/etc/passwd")), "refused",
         check=refused_with("symlink")),
    Case("pull_verify: roster file replaced by a dangling link", PullVerify,
         lambda tmp: pulled(tmp, damage=relink("metrics.json", "nowhere.json")), "refused",
         check=refused_with("symlink")),
    Case("pull_verify: roster file replaced by a link to /dev/zero", PullVerify,
         lambda tmp: pulled(tmp, damage=relink("weights.safetensors", "/dev/zero")), "refused", timeout=5,
         check=refused_with("symlink")),
    Case("pull_verify: roster file replaced by a FIFO", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: ((data / "metrics.json").unlink(),
                                                           os.mkfifo(str(data / "metrics.json")))),
         "refused", timeout=5, check=refused_with("not_a_file")),
    Case("pull_verify: a FIFO not on the roster is extra", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: os.mkfifo(str(data / "pipe"))), "refused", timeout=5,
         check=refused_with("extra")),
    Case("pull_verify: a device node not on the roster is extra", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: mknod(data / "zero", 1, 5)), "refused", timeout=5,
         check=refused_with("extra")),
    Case("pull_verify: manifest with no files", PullVerify,
         bad_manifest(b'{"files": [], "root": "/r", "total_bytes": 0, "version": 1}\n'), "error", "lists no files",
         check=not_verified),
    Case("pull_verify: manifest nested 100000 deep", PullVerify, bad_manifest(b"[" * 100000), "error",
         "nested too deeply", check=not_verified),
    Case("pull_verify: manifest entry climbing out", PullVerify,
         bad_manifest(json.dumps({"version": 1, "files": [{"path": "../../etc/passwd", "bytes": 1,
                                                           "sha256": "0" * 64}]}).encode()),
         "error", "'..' component", check=not_verified),
    Case("pull_verify: manifest entry with a NUL", PullVerify,
         bad_manifest(json.dumps({"version": 1, "files": [{"path": "a\u0000b", "bytes": 1,
                                                           "sha256": "0" * 64}]}).encode()),
         "error", "control character", check=not_verified),
    Case("pull_verify: pulled manifest is a FIFO", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: os.replace(str(fifo(tmp)),
                                                                     str(data.parent / "PULL_MANIFEST.json"))),
         "error", "cannot read the pulled manifest", timeout=5, check=not_verified),
    Case("pull_verify: PULL_VERIFIED.json is a directory", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: (data.parent / teardown.VERIFIED_NAME).mkdir()),
         "error", "is a directory"),
    Case("pull_verify: data is a file", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: (shutil.rmtree(str(data)), data.write_bytes(b"x"))),
         "error", "is not a directory"),
    Case("pull_verify: data is a link to a directory elsewhere", PullVerify,
         lambda tmp: pulled(tmp, damage=lambda data, tmp: (shutil.rmtree(str(data)), (tmp / "else").mkdir(),
                                                           data.symlink_to(tmp / "else"))),
         "error", "is not a directory", check=lambda result, tmp: that(os.listdir(str(tmp / "else")) == [], result)),
    Case("pull_verify: pull_root under a file", PullVerify,
         lambda tmp: dict(pulled(tmp), pull_root=str(tmp / "box" / RUN / "metrics.json")), "error",
         "cannot create the pull directory"),
    Case("pull_verify: checkpoint whose pickle calls os.system", PullVerify,
         checkpoint("best.pt", lambda path: write_torch_zip(path, None, data_pkl=evil_pickle(os.system, ("id",)))),
         "refused", check=lambda result, tmp: (refused_with("not_loadable")(result, tmp),
                                               that(SYSTEM in result["msg"], result))),
    Case("pull_verify: checkpoint whose pickle calls builtins.exec (protocol 4)", PullVerify,
         checkpoint("best.pt", lambda path: write_torch_zip(path, None, data_pkl=evil_pickle(
             builtins.exec, ("import os",), protocol=4))),
         "refused", check=lambda result, tmp: that("builtins.exec" in result["msg"], result)),
    Case("pull_verify: checkpoint whose pickle runs subprocess.Popen", PullVerify,
         checkpoint("best.pt", lambda path: write_torch_zip(path, None, data_pkl=evil_pickle(
             subprocess.Popen, (["id"],)))),
         "refused", check=lambda result, tmp: that("subprocess.Popen" in result["msg"], result)),
    Case("pull_verify: legacy checkpoint whose object pickle calls os.system", PullVerify,
         checkpoint("old.pth", lambda path: write_legacy_with(path, evil_pickle(os.system, ("id",)))),
         "refused",
         check=lambda result, tmp: that(SYSTEM in result["msg"] and "object pickle" in result["msg"], result)),
    Case("pull_verify: legacy checkpoint with a forged 2**60 string length", PullVerify,
         checkpoint("old.pth", forged_length), "refused", check=refused_with("not_loadable")),
    Case("pull_verify: zip member inflating to 2 GiB", PullVerify,
         checkpoint("bomb.pt", write_zip_bomb), "refused", timeout=15,
         check=lambda result, tmp: that("inflates to 2147483648 bytes" in result["msg"], result)),
    Case("pull_verify: safetensors header length near the file size", PullVerify,
         checkpoint("big.safetensors", sparse_safetensors), "refused", timeout=10,
         check=lambda result, tmp: that("100000000-byte cap" in result["msg"], result)),
]


def fifo(tmp):
    path = tmp / "fifo"
    os.mkfifo(str(path))
    return path


@pytest.mark.parametrize("case", VERIFY_CASES, ids=str)
def test_pull_verify(case, hostile):
    hostile(case)


def test_pull_verify_read_only_pull_root(hostile, tmp_path):
    """A pull_root on which nothing can be created (immutable, which binds root too) fails with a message."""
    if shutil.which("chattr") is None or os.geteuid() != 0:
        pytest.skip("needs chattr and root")
    locked = tmp_path / "locked"
    locked.mkdir()
    if subprocess.run(["chattr", "+i", str(locked)], check=False).returncode != 0:
        pytest.skip("this filesystem has no immutable attribute")
    try:
        hostile(Case("pull_verify: read-only pull_root", PullVerify,
                     lambda tmp: dict(pulled(tmp), pull_root=str(locked)), "error", "choose a writable pull_root",
                     check=lambda result, tmp: that(os.listdir(str(locked)) == [], result)))
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=False)


# --------------------------------------------------------------------------- teardown_gate on the controller


def gate(record=None, write=None, **args):
    """teardown_gate's arguments with a PULL_VERIFIED.json holding ``record`` (or made by ``write(path)``)."""
    def build(tmp):
        directory = tmp / "pulls" / HOST / RUN
        directory.mkdir(parents=True)
        path = directory / teardown.VERIFIED_NAME
        if write:
            write(path)
        elif record is not None:
            path.write_text(json.dumps(record))
        full = {"run_id": RUN, "pull_root": str(tmp / "pulls"), "manifest_sha256": "a" * 64, "approve": HOST,
                "command": ["shutdown", "-h", "now"]}
        full.update(args)
        return full
    return build


def good(**changes):
    record = {"host": HOST, "run_id": RUN, "manifest_sha256": "a" * 64, "problems": [], "total_bytes": 1,
              "files": [{"path": "best.pt", "bytes": 1, "sha256": "b" * 64}]}
    record.update(changes)
    return record


def closed(*codes):
    def check(result, tmp):
        assert result["open"] is False
        assert set(codes) <= set(r["code"] for r in result["refusals"]), result["refusals"]
    return check


GATE_CASES = [
    Case("teardown_gate: PULL_VERIFIED.json with no files", TeardownGate, gate(good(files=[], total_bytes=0)),
         "refused", check=closed("pull_verified_empty")),
    Case("teardown_gate: PULL_VERIFIED.json without a files key", TeardownGate,
         gate(dict((k, v) for k, v in good().items() if k != "files")), "refused",
         check=closed("pull_verified_empty")),
    Case("teardown_gate: files is a string", TeardownGate, gate(good(files="best.pt")), "refused",
         check=closed("pull_verified_empty")),
    Case("teardown_gate: PULL_VERIFIED.json is a directory", TeardownGate, gate(write=lambda p: p.mkdir()),
         "refused", check=closed("no_pull_verified")),
    Case("teardown_gate: PULL_VERIFIED.json is a FIFO", TeardownGate, gate(write=lambda p: os.mkfifo(str(p))),
         "refused", timeout=5, check=closed("no_pull_verified")),
    Case("teardown_gate: PULL_VERIFIED.json links to /dev/zero", TeardownGate,
         gate(write=lambda p: p.symlink_to("/dev/zero")), "refused", timeout=5, check=closed("no_pull_verified")),
    Case("teardown_gate: PULL_VERIFIED.json nested 100000 deep", TeardownGate,
         gate(write=lambda p: p.write_text("[" * 100000)), "refused", check=closed("no_pull_verified")),
    Case("teardown_gate: PULL_VERIFIED.json is a list", TeardownGate, gate(write=lambda p: p.write_text("[1]")),
         "refused", check=closed("no_pull_verified")),
    Case("teardown_gate: verification recorded problems", TeardownGate,
         gate(good(problems=[{"code": "missing"}])), "refused", check=closed("pull_not_verified")),
    Case("teardown_gate: verified for another host", TeardownGate, gate(good(host="box2")), "refused",
         check=closed("pull_verified_mismatch")),
    Case("teardown_gate: blanket approval", TeardownGate, gate(good(), approve="box1,ALL"), "refused",
         check=closed("approval_refused")),
    Case("teardown_gate: run_id climbing out", TeardownGate, gate(good(), run_id=".."), "error",
         "cannot name a directory"),
    Case("teardown_gate: unknown box manifest", TeardownGate, gate(good(), manifest_sha256=""), "refused",
         check=closed("manifest_unknown")),
]


@pytest.mark.parametrize("case", GATE_CASES, ids=str)
def test_teardown_gate(case, hostile):
    hostile(case)


def test_the_table_is_large_enough():
    assert len(MANIFEST_CASES) + len(VERIFY_CASES) + len(GATE_CASES) + 1 >= 40
