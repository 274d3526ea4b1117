"""trainer-download's pure functions: the proxy a job uses, the attempt plan, the ModelScope fallback decision, the
egress findings, and the resumable fetch against a local server. The lab test (tests/lab/tests/test_hf_download_lab.py)
runs it on a box with the real huggingface_hub and the lab's proxy."""

from __future__ import annotations

import hashlib
import http.server
import os
import pathlib
import subprocess
import sys
import threading

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import hf_download as hd

PROXY = "http://127.0.0.1:3128"


def test_redact_hides_user_information_of_urls():
    assert hd.redact("via http://user:s3cret@proxy:8080/ and https://h/x") == \
        "via http://<redacted>@proxy:8080/ and https://h/x"


HF_CANARY = "CANARY-job-hf-token-0a1b2c3d"


def test_redact_is_the_collections_one_owner_with_the_job_environments_secrets(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_CANARY)
    text = hd.redact("401 for %s: Authorization: Bearer hf_CANARYshapedToken0123456789" % HF_CANARY)
    assert HF_CANARY not in text and "hf_CANARY" not in text and "401 for <redacted>" in text


def test_redact_as_installed_on_the_box_imports_the_one_owner_beside_it(tmp_path):
    """hf_mirror writes hf_download.py as trainer_download.py and redact.py as trainer_redact.py, side by side."""
    utils = pathlib.Path(hd.__file__).parent
    (tmp_path / "trainer_download.py").write_text((utils / "hf_download.py").read_text())
    (tmp_path / "trainer_redact.py").write_text((utils / "redact.py").read_text())
    probe = ("import sys; sys.path[:] = [sys.argv[1]] + [p for p in sys.path if 'ansible_collections' not in p and "
             "'.collections' not in p]; import trainer_download as t; "
             "print(t.shared_redact.__name__, t.redact('token ' + sys.argv[2] + ' via http://u:pw@proxy:1/'))")
    env = {"PATH": os.environ.get("PATH", ""), "HF_TOKEN": HF_CANARY}
    out = subprocess.run([sys.executable, "-I", "-c", probe, str(tmp_path), HF_CANARY], capture_output=True,
                         text=True, env=env, check=True, cwd=str(tmp_path)).stdout
    assert out.split()[0] == "trainer_redact", out
    assert HF_CANARY not in out and "pw" not in out, out


@pytest.mark.parametrize("env,endpoint,kind", [
    ({}, "https://huggingface.co", "hub"),
    ({"HF_ENDPOINT": "https://hf-mirror.com/"}, "https://hf-mirror.com", "mirror"),
    ({"HF_ENDPOINT": " "}, "https://huggingface.co", "hub"),
])
def test_endpoint_of_the_job(env, endpoint, kind):
    assert hd.endpoint_of(env) == endpoint and hd.endpoint_kind(endpoint) == kind


@pytest.mark.parametrize("url,env,expected", [
    ("https://hf-mirror.com/", {}, (None, "no https_proxy or all_proxy is set")),
    ("https://hf-mirror.com/", {"https_proxy": PROXY}, (PROXY, "https_proxy")),
    ("http://127.0.0.2:9000/", {"https_proxy": PROXY}, (None, "no http_proxy or all_proxy is set")),
    ("https://hf-mirror.com/", {"HTTPS_PROXY": "http://upper:1", "https_proxy": PROXY}, (PROXY, "https_proxy")),
    ("https://hf-mirror.com/", {"ALL_PROXY": PROXY}, (PROXY, "ALL_PROXY")),
    ("https://www.modelscope.cn/", {"https_proxy": PROXY, "no_proxy": "localhost,modelscope.cn"},
     (None, "no_proxy covers www.modelscope.cn")),
    ("https://www.modelscope.cn/", {"https_proxy": PROXY, "no_proxy": "localhost,modelscope.com"},
     (PROXY, "https_proxy")),
    ("http://127.0.0.2:9000/", {"http_proxy": PROXY, "NO_PROXY": "127.0.0.2"}, (None, "NO_PROXY covers 127.0.0.2")),
    ("https://huggingface.co/", {"https_proxy": PROXY, "no_proxy": "*"}, (None, "no_proxy covers huggingface.co")),
])
def test_proxy_for_reads_the_environment_as_the_http_clients_do(url, env, expected):
    assert hd.proxy_for(url, env) == expected


def test_attempt_env_turns_hf_transfer_off_sets_whole_second_timeouts_and_xet_off_for_a_mirror():
    env = hd.attempt_env({"HF_ENDPOINT": "https://hf-mirror.com", "HF_HUB_ENABLE_HF_TRANSFER": "1"}, 60.5, 30)
    assert env["HF_HUB_ENABLE_HF_TRANSFER"] == "0"
    assert env["HF_HUB_DOWNLOAD_TIMEOUT"] == "61" and env["HF_HUB_ETAG_TIMEOUT"] == "30"
    assert env["HF_HUB_DISABLE_XET"] == "1" and env["HF_HUB_DISABLE_PROGRESS_BARS"] == "1"
    hub = hd.attempt_env({"HF_HUB_DISABLE_XET": "0"}, 1, 1, progress=True)
    assert hub["HF_HUB_DISABLE_XET"] == "0" and "HF_HUB_DISABLE_PROGRESS_BARS" not in hub
    assert "HF_HUB_DISABLE_XET" not in hd.attempt_env({}, 1, 1)


def test_backoff_doubles_up_to_its_cap():
    assert [hd.next_wait(n, 10) for n in (1, 2, 3, 4, 5)] == [10, 20, 40, 80, 120]
    assert hd.next_wait(3, 1, cap=3) == 3


@pytest.mark.parametrize("attempt,retries,remaining,timeout,expected", [
    (1, 3, 3600, 600, 600), (3, 3, 3600, 600, 600), (4, 3, 3600, 600, None),
    (2, 3, 100.5, 600, 100.5), (2, 3, 0.5, 600, None),
])
def test_plan_attempt_bounds_each_attempt_and_the_total(attempt, retries, remaining, timeout, expected):
    assert hd.plan_attempt(attempt, retries, remaining, timeout) == expected


@pytest.mark.parametrize("args,installed,model_id,why", [
    (("Qwen/Qwen2.5-0.5B", "model", "main", "auto"), True, "Qwen/Qwen2.5-0.5B", ""),
    (("meta-llama/Llama-3-8B", "model", "main", "LLM-Research/Meta-Llama-3-8B"), True,
     "LLM-Research/Meta-Llama-3-8B", ""),
    (("Qwen/Qwen2.5-0.5B", "model", "main", "off"), True, None, "the ModelScope fallback is off"),
    (("lab/data", "dataset", "main", "auto"), True, None, "covers models only, not a dataset"),
    (("Qwen/Qwen2.5-0.5B", "model", "v1.0", "auto"), True, None, "revision v1.0 is a Hugging Face revision"),
    (("Qwen/Qwen2.5-0.5B", "model", "v1.0", "Qwen/Qwen2.5-0.5B"), True, "Qwen/Qwen2.5-0.5B", ""),
    (("Qwen/Qwen2.5-0.5B", "model", "main", "no-owner"), True, None, "is not a ModelScope model id"),
    (("Qwen/Qwen2.5-0.5B", "model", "main", "auto"), False, None, "the modelscope package is not installed for"),
])
def test_modelscope_fallback_decision(args, installed, model_id, why):
    got_id, got_why = hd.modelscope_plan(*args, installed=installed)
    assert got_id == model_id and why in got_why and bool(got_why) == bool(why)


def probe(url, kind, answered, proxy=None, why="no https_proxy or all_proxy is set", status=200, error=None):
    return {"url": url, "kind": kind, "proxy": proxy, "proxy_why": why, "answered": answered,
            "status": status if answered else None, "error": error}


def test_egress_findings_say_which_endpoint_answered_and_by_which_path():
    [ok] = hd.egress_findings([probe("https://hf-mirror.com", "mirror", True, PROXY, "https_proxy")])
    assert (ok["level"], ok["code"], ok["proxy"]) == ("INFO", "hf_egress_ok", PROXY)
    assert "https://hf-mirror.com (mirror) answered HTTP 200 through the proxy %s (from https_proxy)" % PROXY \
        in ok["message"]
    [direct] = hd.egress_findings([probe("https://huggingface.co", "hub", True, why="no_proxy covers huggingface.co")])
    assert "answered HTTP 200 directly (no_proxy covers huggingface.co)" in direct["message"]

    [down] = hd.egress_findings([probe("https://hf-mirror.com", "mirror", False, PROXY, "https_proxy", error="timed out"),
                                 probe("https://huggingface.co", "hub", True, PROXY, "https_proxy")])
    assert (down["level"], down["code"]) == ("WARN", "hf_egress_mirror_down")
    assert "did not answer (no answer: timed out)" in down["message"] and "hf_mirror_endpoint" in down["action"]

    [dead] = hd.egress_findings([probe("https://hf-mirror.com", "mirror", False, PROXY, "https_proxy", error="refused"),
                                 probe("https://huggingface.co", "hub", False, PROXY, "https_proxy", error="refused")])
    assert (dead["level"], dead["code"]) == ("FAIL", "hf_egress_unreachable")
    assert "The proxy did not get through" in dead["action"]
    [bare] = hd.egress_findings([probe("https://huggingface.co", "hub", False, error="timed out")])
    assert bare["code"] == "hf_egress_unreachable" and "network_turbo" in bare["action"]
    assert "directly (no https_proxy or all_proxy is set)" in bare["message"]


def test_failure_advice_names_what_was_tried_the_path_and_what_to_do_without_the_proxys_password():
    env = {"HF_ENDPOINT": "https://hf-mirror.com", "https_proxy": "http://u:pw@proxy:8080"}
    text = hd.failure_advice(env, ["Hugging Face attempt 1 (timeout)"], "the modelscope package is not installed")
    assert "Tried: Hugging Face attempt 1 (timeout)." in text
    assert "endpoint https://hf-mirror.com (mirror), through the proxy http://<redacted>@proxy:8080 (https_proxy)" in text
    assert "ModelScope not tried: the modelscope package is not installed" in text
    assert "What to do:" in text and "pw" not in text


@pytest.mark.parametrize("have,size,expected", [(0, 10, 0), (4, 10, 4), (10, 10, 10), (11, 10, 0), (4, None, 0)])
def test_resume_from(have, size, expected):
    assert hd.resume_from(have, size) == expected


def test_verify_checks_the_size_and_an_lfs_files_sha256(tmp_path):
    path = tmp_path / "blob"
    path.write_bytes(b"weights")
    sha = hashlib.sha256(b"weights").hexdigest()
    assert hd.verify(str(path), sha, 7) == ""
    assert hd.verify(str(path), "a" * 40, 7) == ""  # a git blob id: the size only
    assert hd.verify(str(path), sha, 8) == "size 7, expected 8"
    assert hd.verify(str(path), "0" * 64, 7).startswith("sha256 %s, expected 000" % sha)


DATA = bytes(range(256)) * 64


class Ranged(http.server.BaseHTTPRequestHandler):
    ranges = []
    honour_range = True

    def log_message(self, *args):  # pylint: disable=arguments-differ
        pass

    def do_GET(self):  # noqa: N802
        wanted = self.headers.get("Range")
        Ranged.ranges.append(wanted)
        start = int(wanted.split("=")[1].split("-")[0]) if wanted and Ranged.honour_range else 0
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(DATA) - start))
        self.end_headers()
        self.wfile.write(DATA[start:])


@pytest.fixture()
def server():
    Ranged.ranges = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ranged)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        yield "http://127.0.0.1:%d/blob" % srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


@pytest.mark.parametrize("honour", [True, False])
def test_fetch_resumes_a_partial_file_or_starts_over_when_the_range_is_ignored(server, tmp_path, monkeypatch, honour):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(Ranged, "honour_range", honour)
    partial = tmp_path / "blob.trainer-partial"
    partial.write_bytes(DATA[:1000])
    hd.fetch(server, str(partial), len(DATA), {}, 10)
    assert partial.read_bytes() == DATA and Ranged.ranges == ["bytes=1000-"]
    hd.fetch(server, str(partial), len(DATA), {}, 10)  # complete: no request
    assert Ranged.ranges == ["bytes=1000-"]


def test_fetch_keeps_what_arrived_when_the_file_is_short(server, tmp_path, monkeypatch):
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.delenv(name, raising=False)
    partial = tmp_path / "blob.trainer-partial"
    with pytest.raises(IOError, match="incomplete: %d of %d bytes arrived" % (len(DATA), len(DATA) + 5)):
        hd.fetch(server, str(partial), len(DATA) + 5, {}, 10)
    assert partial.read_bytes() == DATA


def args(*extra):
    return hd.parser().parse_args(["download", "lab/m", "--backoff", "1"] + list(extra))


def test_download_retries_transient_failures_then_succeeds(monkeypatch, capsys):
    results = iter([(False, "timeout", "no result within 600 s"), (True, "", "/cache/snap")])
    specs = []
    monkeypatch.setattr(hd, "run_attempt", lambda spec, env, limit: specs.append((spec["source"], limit)) or next(results))
    monkeypatch.setattr(hd.time, "sleep", lambda s: None)
    assert hd.download(args(), {}) == hd.EXIT_OK
    out, err = capsys.readouterr()
    assert out == "/cache/snap\n" and "done after 2 attempts" in err
    assert specs == [("hf", 600.0), ("hf", 600.0)]


def test_download_stops_retrying_a_missing_repo_and_falls_back_to_modelscope(monkeypatch, capsys):
    calls = []

    def attempt(spec, env, limit):
        calls.append(spec["source"])
        if spec["source"] == "hf":
            return False, "RepositoryNotFoundError", "RepositoryNotFoundError: 404"
        return True, "", "/ms/snap"
    monkeypatch.setattr(hd, "run_attempt", attempt)
    monkeypatch.setattr(hd, "modelscope_installed", lambda python: True)
    assert hd.download(args(), {}) == hd.EXIT_OK
    assert calls == ["hf", "modelscope"] and capsys.readouterr().out == "/ms/snap\n"


def test_download_says_what_was_tried_when_nothing_works(monkeypatch, capsys):
    monkeypatch.setattr(hd, "run_attempt", lambda spec, env, limit: (False, "ConnectError", "ConnectError: refused"))
    monkeypatch.setattr(hd, "modelscope_installed", lambda python: False)
    monkeypatch.setattr(hd.time, "sleep", lambda s: None)
    assert hd.download(args("--retries", "2"), {"HF_ENDPOINT": "https://hf-mirror.com"}) == hd.EXIT_FAILED
    out, err = capsys.readouterr()
    assert out == ""
    assert "Tried: Hugging Face attempt 1 (ConnectError: refused); Hugging Face attempt 2 (ConnectError: refused)." in err
    assert "ModelScope not tried: the modelscope package is not installed" in err


@pytest.mark.parametrize("argv,message", [
    ([], "say download REPO_ID or egress"),
    (["download", "x/y", "--retries", "0"], "'0' is not a whole number of 1 or more"),
    (["download", "x/y", "--attempt-timeout", "soon"], "'soon' is not a number of seconds above 0"),
    (["egress", "--timeout", "-1"], "'-1' is not a number of seconds above 0"),
])
def test_bad_arguments_exit_2_with_a_message(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        hd.main(argv)
    assert exc.value.code == hd.EXIT_USAGE
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_the_file_runs_as_a_script_with_the_standard_library_alone():
    source = open(hd.__file__, encoding="utf-8").read()
    assert "ansible" not in "".join(line for line in source.splitlines() if line.startswith(("import ", "from ")))
    assert os.path.basename(hd.__file__) == "hf_download.py"
