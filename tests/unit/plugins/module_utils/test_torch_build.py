"""torch_build: the torch version and CUDA build of the job's interpreter, from real torch/version.py texts."""
from __future__ import annotations

import os
import pathlib
import sys
import threading

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import torch_build

TORCH_FIXTURES = pathlib.Path(__file__).resolve().parents[3] / "fixtures" / "torch"


def fixture(version):
    matches = sorted(TORCH_FIXTURES.glob("version.py__%s__*.txt" % version))
    assert len(matches) == 1, matches
    return matches[0].read_text()


@pytest.mark.parametrize("version, cuda, hip, build", [
    ("2.13.0+cpu", None, None, "cpu"),
    ("2.14.1+cu130", "13.0", None, "cuda"),
    ("2.7.1+cu126", "12.6", None, "cuda"),
    ("2.2.1+cu121", "12.1", None, "cuda"),
    ("2.3.0.dev20240308+rocm6.0", None, "6.0.32830-d62f6a171", "rocm"),
    ("1.8.0a0+1a92802", "11.1", None, "cuda"),  # the 1.x format: plain assignments, no annotations
])
def test_parse_real_version_py_texts(version, cuda, hip, build):
    fields = torch_build.parse_version_py(fixture(version))
    assert fields["__version__"] == version and fields["cuda"] == cuda and fields["hip"] == hip
    assert torch_build.build_kind(fields) == build


def test_every_fixture_is_covered():
    names = {path.name.split("__")[1] for path in TORCH_FIXTURES.glob("version.py__*.txt")}
    assert names == {"2.13.0+cpu", "2.14.1+cu130", "2.7.1+cu126", "2.2.1+cu121", "2.3.0.dev20240308+rocm6.0",
                     "1.8.0a0+1a92802"}


def test_parse_takes_only_literals_and_never_runs_the_text():
    text = ("import os\nos.system('touch /tmp/pwned')\n__version__ = '0.1.4+f7cfcbe'\n"
            "cuda = _C.CUDA_VERSION\nhip = ('a' * 10 ** 9)\n")  # nestedtensor's version.py sets cuda this way
    fields = torch_build.parse_version_py(text)
    assert fields == {"__version__": "0.1.4+f7cfcbe"} and torch_build.build_kind(fields) is None
    assert torch_build.parse_version_py("") == {} and torch_build.parse_version_py(None) == {}
    assert torch_build.parse_version_py("cuda = '12.4'  # a comment\n") == {"cuda": "12.4"}


def test_record_prefers_version_py_over_the_distribution_version():
    # torch 2.14.1 from PyPI: METADATA says "Version: 2.14.1"; torch.__version__ (version.py) is 2.14.1+cu130.
    record = torch_build.torch_record("/py", location="/site/torch", version_py=fixture("2.14.1+cu130"),
                                      dist_version="2.14.1")
    assert record == {"python": "/py", "installed": True, "location": "/site/torch", "version": "2.14.1+cu130",
                      "cuda": "13.0", "hip": None, "build": "cuda", "reason": None}


def test_record_of_a_missing_torch_and_of_a_torch_without_version_py():
    missing = torch_build.torch_record("/py")
    assert missing["installed"] is False and missing["version"] is None and missing["build"] is None
    assert missing["reason"] == "torch is not installed for /py"
    bare = torch_build.torch_record("/py", location="/site/torch", dist_version="2.5.1")
    assert bare["installed"] is True and bare["version"] == "2.5.1" and bare["build"] is None
    assert "no readable version.py" in bare["reason"]
    failed = torch_build.torch_record("/py", reason="it hung")
    assert failed["installed"] is None and failed["reason"] == "it hung"


def test_summary():
    cuda = torch_build.torch_record("/py", location="/t", version_py=fixture("2.2.1+cu121"))
    cpu = torch_build.torch_record("/py", location="/t", version_py=fixture("2.13.0+cpu"))
    rocm = torch_build.torch_record("/py", location="/t", version_py=fixture("2.3.0.dev20240308+rocm6.0"))
    assert torch_build.summary(cuda) == "torch 2.2.1+cu121 CUDA 12.1"
    assert torch_build.summary(cpu) == "torch 2.13.0+cpu CPU-only"
    assert torch_build.summary(rocm) == "torch 2.3.0.dev20240308+rocm6.0 ROCm HIP 6.0.32830-d62f6a171"
    assert torch_build.summary(torch_build.torch_record("/py")) == "no torch"
    assert torch_build.summary(torch_build.torch_record("/py", reason="x")) == "torch unknown"
    assert torch_build.summary(torch_build.torch_record("/py", location="/t")) == "torch ? build unknown"
    assert torch_build.summary(None) == "" and torch_build.summary("junk") == ""


def fake_torch(root, version_py):
    """A torch package under ``root`` whose import would leave a mark: the probe must never import it."""
    pkg = root / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("open(%r, 'w').write('imported')\n" % str(root / "IMPORTED"))
    if version_py is not None:
        (pkg / "version.py").write_text(version_py)
    return pkg


def test_probe_reads_version_py_of_the_torch_the_interpreter_finds_without_importing_it(tmp_path):
    pkg = fake_torch(tmp_path, fixture("2.7.1+cu126"))
    record = torch_build.probe(sys.executable, cwd=str(tmp_path))  # the job's working directory is on sys.path
    assert record["location"] == str(pkg) and record["installed"] is True, record
    assert (record["version"], record["cuda"], record["build"]) == ("2.7.1+cu126", "12.6", "cuda")
    assert record["python"] == sys.executable and record["reason"] is None
    assert not (tmp_path / "IMPORTED").exists()


def test_probe_ignores_the_helpers_pythonpath(tmp_path, monkeypatch):
    fake_torch(tmp_path / "lib", fixture("2.13.0+cpu"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "lib"))
    (tmp_path / "code").mkdir()
    if torch_build.probe(sys.executable, cwd=str(tmp_path / "code"))["installed"]:
        pytest.fail("the probe saw a torch on the launch helpers' PYTHONPATH")


def test_probe_without_torch(tmp_path):
    record = torch_build.probe(sys.executable, cwd=str(tmp_path))
    if record["location"] and not record["location"].startswith(str(tmp_path)):
        pytest.skip("this interpreter has a torch of its own at %s" % record["location"])
    assert record["installed"] is False and record["reason"] == "torch is not installed for %s" % sys.executable


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


@pytest.mark.parametrize("python, reason", [
    ("/nonexistent/bin/python", "/nonexistent/bin/python is not an executable interpreter"),
    ("python3", "no interpreter to ask (got 'python3')"),
    ("", "no interpreter to ask (got '')"),
])
def test_probe_of_a_missing_interpreter_says_why(python, reason):
    record = torch_build.probe(python)
    assert record["installed"] is None and record["reason"].startswith(reason), record


def test_probe_of_a_broken_or_hanging_interpreter_says_why(tmp_path):
    broken = script(tmp_path, "broken", "echo 'noise'\necho 'Fatal Python error: init_fs_encoding' >&2\nexit 1\n")
    record = torch_build.probe(broken)
    assert record["installed"] is None
    assert record["reason"] == "%s exited 1 without the probe's answer: Fatal Python error: init_fs_encoding" % broken
    record = torch_build.probe(str(tmp_path))
    assert "is not an executable interpreter" in record["reason"]
    hanging = script(tmp_path, "hanging", "exec sleep 30\n")
    record = torch_build.probe(hanging, timeout=1)
    assert record["reason"] == "%s did not answer within 1 s" % hanging


def test_probe_output_after_noise():
    out = "sitecustomize says hi\n%s{\"location\": \"/t\"}\n" % torch_build.PROBE_MARK
    assert torch_build.parse_probe_output(out) == {"location": "/t"}
    assert torch_build.parse_probe_output("%s[1]\n" % torch_build.PROBE_MARK) is None
    assert torch_build.parse_probe_output("%s{\n" % torch_build.PROBE_MARK) is None
    assert torch_build.parse_probe_output("nothing") is None


def test_read_bounded_refuses_fifos_and_large_files(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(str(fifo))
    result = []
    reader = threading.Thread(target=lambda: result.append(torch_build.read_bounded(str(fifo))), daemon=True)
    reader.start()
    reader.join(5)
    assert result == [None], "read_bounded blocked on a FIFO"
    big = tmp_path / "big"
    big.write_text("x" * (torch_build.MAX_VERSION_PY + 1))
    assert torch_build.read_bounded(str(big)) is None
    assert torch_build.read_bounded(str(tmp_path / "absent")) is None
    (tmp_path / "ok").write_text("cuda = None\n")
    assert torch_build.read_bounded(str(tmp_path / "ok")) == "cuda = None\n"
