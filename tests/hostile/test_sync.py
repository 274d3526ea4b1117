"""Hostile inputs for checked_sync, push_code and the rsync argv of pull_verify (issue 14, items 2, 5 and 9).

Policies under test (documented in the modules):
- checked_sync copies a selected link only when its resolved target is a regular file inside src; a link that leaves
  src, dangles or loops fails the task before anything is written; links to directories are never followed and
  special files never opened (both listed in ``left_out``).
- checked_sync fails when a source changes while it is copied, even when the writer restores its mtime.
- Every path handed to rsync is checked first (rsync.check_path): not empty, not ``/``, no newline or NUL, no ``..``,
  absolute on the box; a timeout must be positive; push_code never pushes (with --delete-after) into a top-level
  directory, nor, on the controller itself, into or over its own source.

rsync never reaches outside the test's directory here: ``guarded_rsync`` records every rsync argv and turns one whose
operands leave ``tmp_path`` (or name the whole filesystem) into an error before it runs.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import posixpath
import subprocess
from concurrent.futures import Future

import pytest

from hostile import Case

from ansible_collections.remote_gpu.trainer.plugins.action.pull_verify import ActionModule as PullVerify
from ansible_collections.remote_gpu.trainer.plugins.action.push_code import MODULE_UTILS
from ansible_collections.remote_gpu.trainer.plugins.action.push_code import ActionModule as PushCode
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import rsync
from ansible_collections.remote_gpu.trainer.plugins.module_utils import sync
from ansible_collections.remote_gpu.trainer.plugins.modules import checked_sync

SECRET = b"root:x:0:0:root:/root:/bin/bash\n"
CALLS = []


@pytest.fixture(autouse=True)
def guarded_rsync(monkeypatch, tmp_path):
    """Record every rsync argv; refuse (AssertionError, so the case fails) one that reaches outside ``tmp_path``."""
    del CALLS[:]
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # checked_sync's record of verified copies
    real = rsync.run_with_timeout
    allowed = (str(tmp_path), MODULE_UTILS)

    def guarded(argv, timeout, *args, **kwargs):
        CALLS.append(list(argv))
        operands = argv[argv.index("--") + 1:] if "--" in argv else argv[1:]
        for operand in operands:
            path = posixpath.normpath(operand) if operand else "/"
            if not any(path == root or path.startswith(root + "/") for root in allowed):
                raise AssertionError("rsync would reach outside the test directory: %s" % argv)
        return real(argv, timeout, *args, **kwargs)

    monkeypatch.setattr(rsync, "run_with_timeout", guarded)


# --------------------------------------------------------------------------- builders and checks


def tree(directory):
    """{relative path: bytes} of the regular files under ``directory`` (links are not followed)."""
    out = {}
    for current, _dirs, names in os.walk(str(directory)):
        for name in names:
            full = os.path.join(current, name)
            if os.path.isfile(full) and not os.path.islink(full):
                with open(full, "rb") as handle:
                    out[os.path.relpath(full, str(directory))] = handle.read()
    return out


def run_tree(tmp):
    """A run directory with two checkpoints, and a secret outside it."""
    src = tmp / "scratch" / "run"
    (src / "ckpt").mkdir(parents=True)
    (src / "ckpt" / "epoch_10.pt").write_bytes(b"E" * 3000)
    (src / "metrics.json").write_bytes(b'{"acc": 0.9}\n')
    (tmp / "secret").write_bytes(SECRET)
    return src


def sync_args(build, **extra):
    """Case args: ``build(tmp, src)`` plants the hostile part in run_tree's files; ``extra`` overrides the args."""
    def args(tmp):
        src = run_tree(tmp)
        build(tmp, src)
        result = {"src": str(src), "dest": str(tmp / "durable")}
        result.update(extra)
        return result
    return args


def nothing_written(result, tmp):
    assert tree(tmp / "durable") == {}, tree(tmp / "durable")
    assert result["copied"] == [] and result["changed"] is False


def no_secret(result, tmp):
    for content in tree(tmp / "durable").values():
        assert SECRET not in content
    nothing_written(result, tmp)


def link(path, target):
    os.symlink(str(target), str(path))


def fifo(path):
    os.mkfifo(str(path))


def copied_tree(expected):
    def check(result, tmp):
        assert tree(tmp / "durable") == expected, tree(tmp / "durable")
        for current, _dirs, names in os.walk(str(tmp / "durable")):
            assert not any(os.path.islink(os.path.join(current, name)) for name in names)
    return check


BASE = {"ckpt/epoch_10.pt": b"E" * 3000, "metrics.json": b'{"acc": 0.9}\n'}


def left_out(*paths):
    def check(result, tmp):
        assert sorted(item["path"] for item in result["left_out"]) == sorted(paths), result["left_out"]
        assert tree(tmp / "durable") == BASE
    return check


# --------------------------------------------------------------------------- checked_sync: symbolic links (item 2)

LINKS = [
    Case("checked_sync: a link to a secret outside src (absolute) is refused, its content never copied", checked_sync,
         sync_args(lambda tmp, src: link(src / "passwd.pt", tmp / "secret")), "error", "outside src", check=no_secret),
    Case("checked_sync: a relative link that climbs out of src (../../secret) is refused", checked_sync,
         sync_args(lambda tmp, src: link(src / "ckpt" / "x.pt", "../../../secret")), "error", "outside src",
         check=no_secret),
    Case("checked_sync: a chain of links inside src that ends outside it is refused", checked_sync,
         sync_args(lambda tmp, src: (link(src / "hop2", tmp / "secret"), link(src / "hop1.pt", "hop2"))),
         "error", "outside src", check=no_secret),
    Case("checked_sync: a link to /etc/passwd is refused even when include selects only it", checked_sync,
         sync_args(lambda tmp, src: link(src / "best.pt", "/etc/passwd"), include=["best.pt"]), "error",
         "/etc/passwd, outside src", check=nothing_written),
    Case("checked_sync: a link to /dev/zero is refused without reading (no hang)", checked_sync,
         sync_args(lambda tmp, src: link(src / "zero.pt", "/dev/zero")), "error", "outside src",
         check=nothing_written, timeout=10),
    Case("checked_sync: best.pt -> epoch_10.pt inside src lands as a real file with the target's bytes", checked_sync,
         sync_args(lambda tmp, src: link(src / "ckpt" / "best.pt", "epoch_10.pt")), "ok",
         check=copied_tree(dict(BASE, **{"ckpt/best.pt": b"E" * 3000}))),
    Case("checked_sync: a link inside src that goes up and back in (../ckpt/epoch_10.pt) is inside", checked_sync,
         sync_args(lambda tmp, src: ((src / "sub").mkdir(), link(src / "sub" / "l.pt", "../ckpt/epoch_10.pt"))), "ok",
         check=copied_tree(dict(BASE, **{"sub/l.pt": b"E" * 3000}))),
    Case("checked_sync: a dangling link is refused with its name", checked_sync,
         sync_args(lambda tmp, src: link(src / "ckpt" / "best.pt", "epoch_99.pt")), "error", "dangling symbolic link",
         check=nothing_written),
    Case("checked_sync: a dangling link that include does not select is not an error", checked_sync,
         sync_args(lambda tmp, src: link(src / "gone.pt", "nothing"), include=["ckpt/*", "*.json"]), "ok",
         check=copied_tree(BASE)),
    Case("checked_sync: a link that leaves src but is not selected is never resolved", checked_sync,
         sync_args(lambda tmp, src: link(src / "passwd", tmp / "secret"), include=["*.pt", "*.json"]), "ok",
         check=copied_tree(BASE)),
    Case("checked_sync: a link loop (a -> b -> a) is refused, no hang", checked_sync,
         sync_args(lambda tmp, src: (link(src / "a.pt", "b.pt"), link(src / "b.pt", "a.pt"))), "error",
         "symbolic link loop", check=nothing_written, timeout=10),
    Case("checked_sync: a link to itself is refused", checked_sync,
         sync_args(lambda tmp, src: link(src / "self.pt", "self.pt")), "error", "loop", check=nothing_written),
    Case("checked_sync: a link to a directory outside src is not followed, and reported", checked_sync,
         sync_args(lambda tmp, src: ((tmp / "elsewhere").mkdir(), (tmp / "elsewhere" / "id_rsa").write_bytes(SECRET),
                                     link(src / "data", tmp / "elsewhere"))), "ok", check=left_out("data")),
    Case("checked_sync: a directory link loop inside src (again -> .) is not followed, no hang", checked_sync,
         sync_args(lambda tmp, src: link(src / "ckpt" / "again", ".")), "ok", check=left_out("ckpt/again"),
         timeout=10),
    Case("checked_sync: a FIFO inside src is never opened (no hang) and is reported", checked_sync,
         sync_args(lambda tmp, src: fifo(src / "pipe.pt")), "ok", check=left_out("pipe.pt"), timeout=10),
    Case("checked_sync: a link inside src to a FIFO inside src is never opened", checked_sync,
         sync_args(lambda tmp, src: (fifo(src / "pipe"), link(src / "ckpt" / "p.pt", "../pipe"))), "ok",
         check=left_out("pipe", "ckpt/p.pt"), timeout=10),
    Case("checked_sync: src given as a link to the run directory is resolved once", checked_sync,
         lambda tmp: {"src": (link(tmp / "alias", run_tree(tmp)), str(tmp / "alias"))[1],
                      "dest": str(tmp / "durable")}, "ok", check=copied_tree(BASE)),
    Case("checked_sync: a link at a file's place in dest is replaced, never written through", checked_sync,
         sync_args(lambda tmp, src: ((tmp / "durable").mkdir(), (tmp / "victim").write_bytes(b'{"acc": 0.9}\n'),
                                     link(tmp / "durable" / "metrics.json", tmp / "victim"))), "ok",
         check=lambda result, tmp: (copied_tree(BASE)(result, tmp),
                                    (tmp / "victim").read_bytes() == b'{"acc": 0.9}\n' or pytest.fail("victim"))),
    Case("checked_sync: a FIFO at a file's place in dest is refused, never opened (no hang)", checked_sync,
         sync_args(lambda tmp, src: ((src / "empty.log").write_bytes(b""), (tmp / "durable").mkdir(),
                                     fifo(tmp / "durable" / "empty.log"))), "error", "FIFO, not a regular file",
         timeout=10),
]


# --------------------------------------------------------------------------- checked_sync: paths and numbers

PATHS = [
    Case("checked_sync: src on a FIFO fails at once (no hang)", checked_sync,
         lambda tmp: (fifo(tmp / "p"), {"src": str(tmp / "p"), "dest": str(tmp / "durable")})[1], "error",
         "is a FIFO, not a regular file or directory", timeout=10),
    Case("checked_sync: src a dangling link says it does not exist", checked_sync,
         lambda tmp: (link(tmp / "l", tmp / "nothing"), {"src": str(tmp / "l"), "dest": str(tmp / "durable")})[1],
         "error", "does not exist"),
    Case("checked_sync: empty src is refused, not the working directory", checked_sync,
         lambda tmp: {"src": "", "dest": str(tmp / "durable")}, "error", "src is empty"),
    Case("checked_sync: src / (the whole filesystem) is refused", checked_sync,
         lambda tmp: {"src": "/", "dest": str(tmp / "durable")}, "error", "root of the filesystem"),
    Case("checked_sync: src /./ is the whole filesystem too", checked_sync,
         lambda tmp: {"src": "/./", "dest": str(tmp / "durable")}, "error", "root of the filesystem"),
    Case("checked_sync: a relative src is refused", checked_sync,
         lambda tmp: {"src": "scratch/run", "dest": str(tmp / "durable")}, "error", "relative path"),
    Case("checked_sync: a src that looks like an option is a relative path, refused", checked_sync,
         lambda tmp: {"src": "--delete", "dest": str(tmp / "durable")}, "error", "relative path"),
    Case("checked_sync: a relative dest is refused", checked_sync,
         sync_args(lambda tmp, src: None, dest="durable"), "error", "dest durable is a relative path"),
    Case("checked_sync: dest / is refused", checked_sync,
         sync_args(lambda tmp, src: None, dest="/"), "error", "root of the filesystem"),
    Case("checked_sync: a NUL byte in src is refused", checked_sync,
         lambda tmp: {"src": str(tmp) + "/a\0b", "dest": str(tmp / "durable")}, "error", "NUL"),
    Case("checked_sync: dest inside src is refused", checked_sync,
         lambda tmp: {"src": str(run_tree(tmp)), "dest": str(tmp / "scratch" / "run" / "backup")}, "error",
         "lies inside", check=lambda result, tmp: not (tmp / "scratch" / "run" / "backup").exists() or pytest.fail()),
    Case("checked_sync: dest equal to src is refused", checked_sync,
         lambda tmp: {"src": str(run_tree(tmp)), "dest": str(tmp / "scratch" / "run")}, "error", "is src"),
    Case("checked_sync: dest a link into src is refused", checked_sync,
         lambda tmp: (run_tree(tmp), link(tmp / "durable", tmp / "scratch" / "run" / "ckpt"),
                      {"src": str(tmp / "scratch" / "run"), "dest": str(tmp / "durable")})[2], "error",
         "lies inside"),
    Case("checked_sync: dest an existing file is refused (file and directory confused)", checked_sync,
         sync_args(lambda tmp, src: (tmp / "durable").write_bytes(b"a file")), "error",
         "exists and is not a directory",
         check=lambda result, tmp: (tmp / "durable").read_bytes() == b"a file" or pytest.fail()),
    Case("checked_sync: a file src into the directory that holds it is refused", checked_sync,
         lambda tmp: {"src": str(run_tree(tmp) / "metrics.json"), "dest": str(tmp / "scratch" / "run")}, "error",
         "already holds"),
    Case("checked_sync: a file where dest needs a directory (dest/ckpt is a file) fails clearly", checked_sync,
         sync_args(lambda tmp, src: ((tmp / "durable").mkdir(), (tmp / "durable" / "ckpt").write_bytes(b"f"))),
         "error", "is not a directory"),
    Case("checked_sync: include with a .. part can never match", checked_sync,
         sync_args(lambda tmp, src: None, include=["../*"]), "error", "can never match"),
    Case("checked_sync: an absolute include pattern can never match", checked_sync,
         sync_args(lambda tmp, src: None, include=["/etc/*"]), "error", "can never match"),
    Case("checked_sync: an empty include pattern can never match", checked_sync,
         sync_args(lambda tmp, src: None, include=[""]), "error", "can never match"),
    Case("checked_sync: negative reserve_bytes", checked_sync,
         sync_args(lambda tmp, src: None, reserve_bytes=-1), "error", "reserve_bytes must be 0 or more",
         check=nothing_written),
    Case("checked_sync: negative min_free_inodes", checked_sync,
         sync_args(lambda tmp, src: None, min_free_inodes=-5), "error", "min_free_inodes must be 0 or more",
         check=nothing_written),
    Case("checked_sync: an absurd reserve_bytes (1 EB) fails the budget, nothing written", checked_sync,
         sync_args(lambda tmp, src: None, reserve_bytes=10 ** 18), "error", "not enough room",
         check=nothing_written),
    Case("checked_sync: a non-numeric reserve_bytes", checked_sync,
         sync_args(lambda tmp, src: None, reserve_bytes="lots"), "error", "reserve_bytes"),
    Case("checked_sync: an unknown unchanged_check", checked_sync,
         sync_args(lambda tmp, src: None, unchanged_check="trust-me"), "error", "unchanged_check"),
    Case("checked_sync: names with a newline, a leading dash and spaces are copied as they are", checked_sync,
         sync_args(lambda tmp, src: ((src / "-rf").write_bytes(b"dash"), (src / "a\nb c.pt").write_bytes(b"nl"))),
         "ok", check=copied_tree(dict(BASE, **{"-rf": b"dash", "a\nb c.pt": b"nl"}))),
]


# --------------------------------------------------------------------------- push_code (action, local transport)


def code_dir(tmp):
    src = tmp / "work" / "code"
    src.mkdir(parents=True)
    (src / "train.py").write_text("print(1)\n")
    (tmp / "box" / "code").mkdir(parents=True)
    return src


def push_args(**extra):
    def args(tmp):
        result = {"src": str(code_dir(tmp)), "dest": str(tmp / "box" / "code")}
        result.update({key: (value(tmp) if callable(value) else value) for key, value in extra.items()})
        return result
    return args


def no_rsync(result, tmp):
    assert CALLS == [], CALLS
    assert (tmp / "work" / "code" / "train.py").exists()


# --------------------------------------------------------------------------- pull_verify: its rsync argv only


def pull_args(**extra):
    def args(tmp):
        root = tmp / "box" / "runs" / "exp42"
        root.mkdir(parents=True)
        result = {"src": str(root), "manifest_path": str(tmp / "box" / "runs" / "PULL_MANIFEST.exp42.json"),
                  "manifest_sha256": "0" * 64, "run_id": "exp42", "pull_root": str(tmp / "pulls")}
        result.update({key: (value(tmp) if callable(value) else value) for key, value in extra.items()})
        return result
    return args


def nothing_pulled(result, tmp):
    assert CALLS == [], CALLS
    assert not (tmp / "pulls").exists() or not any((tmp / "pulls").rglob("*.pt"))


# --------------------------------------------------------------------------- what push_code and pull_verify both refuse


def log_file_option(tmp):
    return "--log-file=%s" % (tmp / "pwned.log")


def no_log_written(nothing_ran):
    """``nothing_ran``, and the --log-file that the hostile value asked for was never written."""
    return lambda result, tmp: (nothing_ran(result, tmp), not (tmp / "pwned.log").exists() or pytest.fail())


def refused_alike(fragment, push, pull):
    """One refusal that push_code and pull_verify share (of the box's end of their rsync, dest or src, or of the
    timeout), as a case of each, both failing before rsync runs: ``push`` and ``pull`` are (the case's name, its
    args); ``{end}`` in ``fragment`` names the module's field."""
    (push_name, push_given), (pull_name, pull_given) = push, pull
    logs = log_file_option in push_given.values()
    return (Case("push_code: " + push_name, PushCode, push_args(**push_given), "error", fragment.format(end="dest"),
                 check=no_log_written(no_rsync) if logs else no_rsync),
            Case("pull_verify: " + pull_name, PullVerify, pull_args(**pull_given), "error", fragment.format(end="src"),
                 check=no_log_written(nothing_pulled) if logs else nothing_pulled))


ALIKE = [refused_alike(*row) for row in (
    ("{end} is empty", ("empty dest (would be / after the trailing slash) is refused", {"dest": ""}),
     ("empty src (was rsync of /) is refused before rsync", {"src": ""})),
    ("root of the filesystem", ("dest / is refused", {"dest": "/"}), ("src / is refused", {"src": "/"})),
    ("root of the filesystem", ("dest // is refused", {"dest": "//"}), ("src //. is refused", {"src": "//."})),
    ("not an absolute path",
     ("dest that is an rsync option (--log-file=...) is refused, no log written", {"dest": log_file_option}),
     ("src that is an rsync option (--log-file=...) is refused, no log written", {"src": log_file_option})),
    ("newline", ("a newline in dest is refused", {"dest": "/srv/code\n/etc"}),
     ("a newline in src is refused", {"src": "/root/runs\n/etc"})),
    (".. part", ("a dest that climbs to / with .. is refused", {"dest": "/srv/code/../.."}),
     ("a .. part in src is refused", {"src": "/root/runs/../../etc"})),
    ("timeout must be a positive", ("timeout 0", {"timeout": 0}), ("timeout 0", {"timeout": 0})),
    ("timeout must be a positive", ("a negative timeout", {"timeout": -30}), ("a negative timeout", {"timeout": -1})),
)]


PUSH = [push for push, _pull in ALIKE] + [
    Case("push_code: a relative dest is refused", PushCode, push_args(dest="code/train"), "error",
         "not an absolute path", check=no_rsync),
    Case("push_code: a ~ dest is refused (it depends on the login directory)", PushCode, push_args(dest="~/code"),
         "error", "not an absolute path", check=no_rsync),
    Case("push_code: a top-level dest (/root) is refused: --delete-after would empty it", PushCode,
         push_args(dest="/root"), "error", "top-level directory", check=no_rsync),
    Case("push_code: lib_dest that is an option is refused", PushCode,
         push_args(lib_dest="-e sh", lib_files=["atomic.py"]), "error", "lib_dest", check=no_rsync),
    Case("push_code: dest inside src on the controller is refused", PushCode,
         push_args(dest=lambda tmp: str(tmp / "work" / "code" / "deploy")), "error", "one holds the other",
         check=no_rsync),
    Case("push_code: dest the parent of src on the controller is refused (--delete-after would delete src)",
         PushCode, push_args(dest=lambda tmp: str(tmp / "work")), "error", "one holds the other", check=no_rsync),
    Case("push_code: lib_files climbing out of module_utils are refused", PushCode,
         push_args(lib_dest=lambda tmp: str(tmp / "box" / "lib"), lib_files=["../../../../etc/passwd"]), "error",
         "are not files of", check=no_rsync),
    Case("push_code: src a file, not a directory", PushCode,
         push_args(src=lambda tmp: str(tmp / "work" / "code" / "train.py"), dest=lambda tmp: str(tmp / "box" / "c2")),
         "error", "is not a directory", check=lambda result, tmp: CALLS == [] or pytest.fail(str(CALLS))),
    Case("push_code: an exclude that is an rsync option stays an exclude pattern", PushCode,
         push_args(exclude=lambda tmp: ["--rsh=touch %s" % (tmp / "pwned")]), "ok",
         check=lambda result, tmp: (not (tmp / "pwned").exists() or pytest.fail("pwned"),
                                    (tmp / "box" / "code" / "train.py").exists() or pytest.fail("not pushed"))),
    Case("push_code: files named like options (-e, --delete) are pushed as files", PushCode,
         push_args(dest=lambda tmp: ((tmp / "work" / "code" / "-e").write_text("x"),
                                     (tmp / "work" / "code" / "--delete").write_text("y"),
                                     str(tmp / "box" / "code"))[2]), "ok",
         check=lambda result, tmp: sorted(os.listdir(str(tmp / "box" / "code"))) == ["--delete", "-e", "train.py"]
         or pytest.fail(str(os.listdir(str(tmp / "box" / "code"))))),
]


PULL = [pull for _push, pull in ALIKE] + [
    Case("pull_verify: manifest_path that is an option (-e ...) is refused", PullVerify,
         pull_args(manifest_path="-e touch /tmp/x"), "error", "manifest_path", check=nothing_pulled),
    Case("pull_verify: a relative manifest_path is refused", PullVerify,
         pull_args(manifest_path="PULL_MANIFEST.json"), "error", "not an absolute path", check=nothing_pulled),
]

CASES = LINKS + PATHS + PUSH + PULL


@pytest.mark.parametrize("case", CASES, ids=str)
def test_sync(case, hostile):
    hostile(case)


# --------------------------------------------------------------------------- a source rewritten during the copy (9)


class _RewriteAfterFirstChunk(object):
    """Stands in for the copy loop's hashing thread: after the first chunk it rewrites ``path`` in place, same
    size, and restores its mtime (as ``touch -r`` or a careless writer would), then hashes in this thread."""

    def __init__(self, path, content):
        self.path, self.content, self.done = path, content, False

    def __call__(self, max_workers=1):
        return self

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def submit(self, function, *args):
        if not self.done:
            self.done = True
            st = os.stat(self.path)
            with open(self.path, "r+b") as handle:
                handle.write(self.content)
            os.utime(self.path, ns=(st.st_atime_ns, st.st_mtime_ns))
        future = Future()
        future.set_result(function(*args))
        return future


def _rewriting(monkeypatch, tmp):
    src = run_tree(tmp)
    best = src / "ckpt" / "epoch_10.pt"
    monkeypatch.setattr(sync, "CHUNK_SIZE", 1000)
    monkeypatch.setattr(sync, "ThreadPoolExecutor", _RewriteAfterFirstChunk(str(best), b"N" * 3000))
    return {"src": str(src), "dest": str(tmp / "durable"), "include": ["ckpt/*"]}


def _no_mixed_copy(result, tmp):
    assert not (tmp / "durable" / "ckpt" / "epoch_10.pt").exists()
    assert result["copied"] == []


def test_rewrite_in_place_with_mtime_restored_is_caught(hostile, monkeypatch, tmp_path):
    args = _rewriting(monkeypatch, tmp_path)
    hostile(Case("checked_sync: a source rewritten in place during the copy, mtime restored", checked_sync, args,
                 "error", "changed after it was planned or while it was copied", check=_no_mixed_copy))


def test_rewrite_that_keeps_even_ctime_is_caught_by_the_second_hash(hostile, monkeypatch, tmp_path):
    args = _rewriting(monkeypatch, tmp_path)
    # a kernel whose coarse clock stamps the rewrite with the same ctime: only the second read can tell
    monkeypatch.setattr(sync, "identity", lambda st: (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns),
                        raising=False)
    hostile(Case("checked_sync: a rewrite in place that even ctime misses", checked_sync, args, "error",
                 "while it was copied", check=_no_mixed_copy))


# --------------------------------------------------------------------------- real read-only and full filesystems


@contextlib.contextmanager
def mounted_tmpfs(path, options):
    """A real tmpfs (the pattern of tests/unit/conftest.py's ``tmpfs`` fixture, which this directory cannot see)."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    path.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], check=True)
    try:
        yield pathlib.Path(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=True)


@pytest.mark.root
def test_read_only_dest_says_so_and_what_to_do(hostile, tmp_path):
    src = run_tree(tmp_path)
    with mounted_tmpfs(tmp_path / "durable", "ro,size=1m") as mnt:
        hostile(Case("checked_sync: dest on a read-only filesystem", checked_sync,
                     {"src": str(src), "dest": str(mnt / "run")}, "error", "read-only: remount it read-write",
                     check=lambda result, tmp: result["copied"] == [] or pytest.fail()))


@pytest.mark.root
def test_full_dest_fails_before_writing(hostile, tmp_path):
    src = run_tree(tmp_path)
    (src / "big.pt").write_bytes(os.urandom(256 * 1024))
    with mounted_tmpfs(tmp_path / "durable", "size=64k") as mnt:
        hostile(Case("checked_sync: dest on a full (64 KiB) filesystem", checked_sync,
                     {"src": str(src), "dest": str(mnt)}, "error", "not enough room",
                     check=lambda result, tmp: os.listdir(str(mnt)) == [] or pytest.fail(str(os.listdir(str(mnt))))))
