# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""trainer-download: a model download that survives the GFW, and an egress check on the job's real path.

The role ``hf_mirror`` copies this file to the box (``~/.trainer/bin/trainer_download.py``) with a wrapper,
``~/.trainer/bin/trainer-download``, that sources the job environment's loader (``~/.trainer/jobenv.sh``: the proxy
hook, ``HF_ENDPOINT``, ``HF_HOME``, ...) and runs this file with the jobs' Python. So both commands see exactly what a
job sees, not the controller's or a bare SSH shell's environment.

``trainer-download download REPO_ID`` is the runbook's ``for i in 1 2 3; do timeout 600 huggingface-cli download ...
&& break; done`` loop: each attempt is huggingface_hub's ``snapshot_download`` in a child process killed after
``--attempt-timeout`` seconds, the attempts are spaced by a doubling backoff, and all of it is bounded by
``--total-timeout``. A stalled or dropped attempt leaves its partial files (``*.incomplete``) in the cache, and the
next one resumes them with an HTTP range request. ``HF_HUB_ENABLE_HF_TRANSFER`` is turned off (hf_transfer neither
resumes nor honours the timeouts), and Xet is turned off when the endpoint is a mirror (the mirrors do not proxy
it). When every attempt fails, a model is fetched from ModelScope instead, when the ``modelscope`` package is
installed and the repository has a ModelScope id (the same id, or ``--modelscope ID``); otherwise the message says
what was tried and what to do. The snapshot's path is the only line on stdout.

``trainer-download egress`` asks the job's endpoint (``HF_ENDPOINT``, else huggingface.co) for one page through the
proxy the job's HTTP clients would use (``https_proxy``/``http_proxy``/``all_proxy`` and ``no_proxy`` of the job's
environment), and huggingface.co too when a mirror does not answer; it prints one JSON object: what answered, the
proxy used or why none, and the findings (``hf_egress_ok``, ``hf_egress_mirror_down``, ``hf_egress_unreachable``).

Standard library only at import (huggingface_hub and modelscope are imported in the child process), Python 3.8+.
The pure functions are unit-tested in tests/unit/plugins/module_utils/test_hf_download.py.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time

from urllib.error import HTTPError
from urllib.parse import urlsplit
from urllib.request import HTTPRedirectHandler, ProxyHandler, Request, build_opener, proxy_bypass_environment

HUB = "https://huggingface.co"
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 3, 2
BACKOFF_CAP = 120.0
# huggingface_hub's errors that no retry mends: the repository, revision or file is not there, or not for us.
PERMANENT = {"RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError", "RemoteEntryNotFoundError",
             "GatedRepoError", "DisabledRepoError"}
_USERINFO = re.compile(r"(?<=://)[^/@\s]+@")

try:  # the collection's one redaction owner; on the box, hf_mirror installs it beside this file as trainer_redact.py
    from ansible_collections.remote_gpu.trainer.plugins.module_utils import redact as shared_redact
except ImportError:
    try:
        import trainer_redact as shared_redact  # pylint: disable=import-error
    except ImportError:
        shared_redact = None


def redact(text):
    """``text`` through the collection's one redaction owner (module_utils/redact.py): the job environment's secrets
    (``HF_TOKEN``, ``WANDB_API_KEY``, any ``*_TOKEN``/``*_KEY``...), user information in URLs (a proxy's user and
    password) and tokens of known shapes. Without it beside this file, only the user information is replaced."""
    if shared_redact is not None:
        return shared_redact.redact(text, shared_redact.environ_secrets(os.environ))
    return _USERINFO.sub("***@", str(text))


def endpoint_of(env):
    """The Hugging Face endpoint the job uses: ``HF_ENDPOINT`` without a trailing slash, else the hub."""
    return (env.get("HF_ENDPOINT") or "").strip().rstrip("/") or HUB


def endpoint_kind(endpoint):
    """``hub`` for huggingface.co itself, else ``mirror``."""
    host = (urlsplit(endpoint).hostname or "").lower()
    return "hub" if host in ("huggingface.co", "www.huggingface.co") else "mirror"


def proxy_for(url, env):
    """The proxy the job's HTTP clients use for ``url`` with the environment ``env`` (a mapping), as urllib, requests
    and httpx read it: ``<scheme>_proxy`` (the lower-case name first), then ``all_proxy``; none when ``no_proxy``
    covers the host. -> (proxy URL or None, why: the variable it came from, or the reason there is none)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    host = parts.hostname or ""
    proxies = {}
    for name in (scheme + "_proxy", "all_proxy", "no_proxy"):
        for spelled in (name.upper(), name):  # the lower-case spelling wins when both are set
            if env.get(spelled):
                proxies[name] = (env[spelled], spelled)
    chosen = proxies.get(scheme + "_proxy") or proxies.get("all_proxy")
    if chosen is None:
        return None, "no %s_proxy or all_proxy is set" % scheme
    if "no_proxy" in proxies:
        port = ":%d" % parts.port if parts.port else ""
        if proxy_bypass_environment(host + port, {"no": proxies["no_proxy"][0]}):
            return None, "%s covers %s" % (proxies["no_proxy"][1], host)
    return chosen[0], chosen[1]


def attempt_env(env, read_timeout, etag_timeout, progress=False):
    """The environment of one download attempt: the job's, with hf_transfer off, the timeouts set, Xet off for a
    mirror (unless the job sets it either way) and, unless asked, no progress bars in the job's log."""
    out = dict(env)
    out["HF_HUB_ENABLE_HF_TRANSFER"] = "0"
    # whole seconds: huggingface_hub reads them with int()
    out["HF_HUB_DOWNLOAD_TIMEOUT"] = "%d" % max(1, int(-(-float(read_timeout) // 1)))
    out["HF_HUB_ETAG_TIMEOUT"] = "%d" % max(1, int(-(-float(etag_timeout) // 1)))
    if endpoint_kind(endpoint_of(env)) == "mirror":
        out.setdefault("HF_HUB_DISABLE_XET", "1")
    if not progress:
        out.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    return out


def next_wait(attempt, backoff, cap=BACKOFF_CAP):
    """Seconds to wait before attempt ``attempt + 1`` (attempt counts from 1): ``backoff``, doubled each time."""
    return min(float(cap), float(backoff) * (2 ** max(0, attempt - 1)))


def plan_attempt(attempt, retries, remaining, attempt_timeout):
    """The time limit of attempt ``attempt`` (from 1), or None when there is none to make: ``retries`` attempts at
    most, each limited to ``attempt_timeout`` and to what is left of the total (``remaining`` seconds; an attempt
    with less than one second is not started)."""
    if attempt > retries or remaining < 1:
        return None
    return min(float(attempt_timeout), float(remaining))


def modelscope_plan(repo_id, repo_type, revision, modelscope, installed):
    """Whether to try ModelScope after Hugging Face failed. -> (ModelScope id or None, why not: a sentence that says
    what to do). ``modelscope`` is ``auto`` (the same id), ``off`` or an explicit ModelScope id."""
    if modelscope == "off":
        return None, "the ModelScope fallback is off (--modelscope off)"
    if repo_type != "model":
        return None, "the ModelScope fallback covers models only, not a %s" % repo_type
    if revision not in ("", "main") and modelscope == "auto":
        return None, ("revision %s is a Hugging Face revision, which ModelScope does not share: pass --modelscope "
                      "<ModelScope id> to take its default revision" % revision)
    model_id = repo_id if modelscope == "auto" else modelscope
    if not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$", model_id):
        return None, "%r is not a ModelScope model id (owner/name)" % model_id
    if not installed:
        return None, ("the modelscope package is not installed for %s: `%s -m pip install modelscope` (then the "
                      "fallback can fetch %s), or download it elsewhere" % (sys.executable, sys.executable, model_id))
    return model_id, ""


def failure_advice(env, tried, fallback_reason):
    """The closing message when nothing worked: what was tried and what to do."""
    endpoint = endpoint_of(env)
    proxy, why = proxy_for(endpoint + "/", env)
    lines = ["trainer-download: the download failed. Tried: %s." % "; ".join(tried)]
    path = "through the proxy %s (%s)" % (redact(proxy), why) if proxy else "directly (%s)" % why
    lines.append("  endpoint %s (%s), %s" % (endpoint, endpoint_kind(endpoint), path))
    if fallback_reason:
        lines.append("  ModelScope not tried: %s" % fallback_reason)
    lines.append("  What to do: run `trainer-download egress` to see which endpoint answers on this path; behind the "
                 "GFW set a mirror (hf_mirror_endpoint) and the platform's proxy hook (network_turbo), raise "
                 "--attempt-timeout or --total-timeout for a large model, and run the same command again: the "
                 "partial files are kept and resumed.")
    return "\n".join(lines)


def egress_findings(probes):
    """Findings from the egress probes: ``probes[0]`` is the job's endpoint, ``probes[1]`` (when there) the hub, asked
    because the mirror did not answer. Each probe: url, kind, proxy (redacted) or None, proxy_why, answered,
    status, error."""
    def path(p):
        return ("through the proxy %s (from %s)" % (p["proxy"], p["proxy_why"]) if p["proxy"]
                else "directly (%s)" % p["proxy_why"])

    def outcome(p):
        return "HTTP %s" % p["status"] if p["answered"] else "no answer: %s" % p["error"]

    first = probes[0]
    if first["answered"]:
        return [{"level": "INFO", "code": "hf_egress_ok",
                 "message": "the job's Hugging Face endpoint %s (%s) answered %s %s"
                            % (first["url"], first["kind"], outcome(first), path(first)),
                 "action": "Nothing to do: downloads in jobs take this path.",
                 "endpoint": first["url"], "kind": first["kind"], "proxy": first["proxy"]}]
    hub = probes[1] if len(probes) > 1 else None
    if hub is not None and hub["answered"]:
        return [{"level": "WARN", "code": "hf_egress_mirror_down",
                 "message": "the job's mirror %s did not answer (%s) %s, but %s answered %s %s"
                            % (first["url"], outcome(first), path(first), hub["url"], outcome(hub), path(hub)),
                 "action": "Downloads through the mirror fail: retry later, or set hf_mirror_endpoint to another "
                           "mirror (or '' for huggingface.co) for this host; trainer-download falls back to "
                           "ModelScope for models.",
                 "endpoint": first["url"], "kind": first["kind"], "proxy": first["proxy"]}]
    tried = "; ".join("%s: %s %s" % (p["url"], outcome(p), path(p)) for p in probes)
    if any(p["proxy"] for p in probes):
        action = ("The proxy did not get through: check it (the platform's proxy hook, trainer_proxy_hook) or "
                  "exempt the endpoint with no_proxy when it is domestic (trainer_no_proxy_extra).")
    else:
        action = ("The job has no proxy for this endpoint: behind the GFW, wire the platform's proxy hook (the "
                  "network_turbo role, trainer_proxy_hook) and a mirror (hf_mirror_endpoint).")
    return [{"level": "FAIL", "code": "hf_egress_unreachable",
             "message": "no Hugging Face endpoint answered the job's environment: %s" % tried,
             "action": action, "endpoint": first["url"], "kind": first["kind"], "proxy": first["proxy"]}]


# --- what touches the network or other processes ----------------------------------------------------------------


def probe(url, env, timeout):
    """GET ``url`` through the proxy the job would use (explicitly, so that the report says the path taken)."""
    proxy, why = proxy_for(url, env)
    scheme = urlsplit(url).scheme
    opener = build_opener(ProxyHandler({scheme: proxy} if proxy else {}))
    result = {"url": url, "kind": endpoint_kind(url), "proxy": redact(proxy) if proxy else None,
              "proxy_why": why, "answered": False, "status": None, "error": None}
    try:
        response = opener.open(Request(url, headers={"User-Agent": "trainer-download/egress"}), timeout=timeout)
        result["status"] = response.status
        response.close()
    except HTTPError as exc:
        result["status"] = exc.code
    except Exception as exc:  # pylint: disable=broad-except
        result["error"] = redact(getattr(exc, "reason", None) or exc)[:300]
        return result
    result["answered"] = result["status"] < 500
    if not result["answered"]:
        result["error"] = "HTTP %s" % result["status"]
    return result


def egress(env, timeout, repo):
    endpoint = endpoint_of(env)
    target = "%s/api/models/%s" % (endpoint, repo) if repo else endpoint + "/"
    probes = [probe(target, env, timeout)]
    probes[0]["url"] = endpoint
    if not probes[0]["answered"] and endpoint_kind(endpoint) == "mirror":
        probes.append(probe(HUB + "/", env, timeout))
        probes[1]["url"] = HUB
    findings = egress_findings(probes)
    report = {"endpoint": endpoint, "kind": endpoint_kind(endpoint), "probes": probes, "findings": findings,
              "answered": probes[0]["answered"]}
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    return EXIT_OK if probes[0]["answered"] else 1


def modelscope_installed(python):
    probe_code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('modelscope') else 1)"
    try:
        return subprocess.call([python, "-c", probe_code]) == 0  # pylint: disable=ansible-bad-function
    except OSError:
        return False


def run_attempt(spec, env, limit):
    """One attempt in a child process (its own process group, killed at ``limit`` seconds). -> (ok, path or error)."""
    argv = [sys.executable, os.path.abspath(__file__), "_attempt", json.dumps(spec)]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, start_new_session=True)  # pylint: disable=ansible-bad-function
    try:
        out = proc.communicate(timeout=limit)[0]
    except subprocess.TimeoutExpired:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            try:
                proc.communicate(timeout=5)
                break
            except subprocess.TimeoutExpired:
                continue
        return False, "timeout", "no result within %d s (killed; its partial files are kept)" % limit
    lines = (out or b"").decode("utf-8", "replace").strip().splitlines()
    try:
        result = json.loads(lines[-1])
    except (IndexError, ValueError):
        return False, "crash", "exit %s without a result" % proc.returncode
    if result.get("ok"):
        return True, "", result["path"]
    return False, result.get("kind", "error"), redact(result.get("error", ""))[:500]


class _DropAuthOnHostChange(HTTPRedirectHandler):
    """Follow redirects (the hub sends large files to its CDN) without taking the token to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = HTTPRedirectHandler.redirect_request(self, req, fp, code, msg, headers, newurl)
        if new is not None and urlsplit(newurl).hostname != urlsplit(req.full_url).hostname:
            new.remove_header("Authorization")
        return new


def resume_from(have, size):
    """Where a partial file of ``have`` bytes resumes a file of ``size`` bytes: ``have``, or 0 when it is longer
    than the file (another version's leftover) or ``size`` is unknown."""
    return have if size is not None and 0 <= have <= size else 0


def fetch(url, partial, size, headers, read_timeout):
    """GET ``url`` into ``partial``, resuming it with a range request; every chunk is written as it comes, so a drop
    leaves what arrived for the next attempt. The proxies are the environment's (urllib reads them as the probe)."""
    have = resume_from(os.path.getsize(partial) if os.path.exists(partial) else 0, size)
    if size is not None and have == size:
        return
    request = Request(url, headers=dict(headers, **({"Range": "bytes=%d-" % have} if have else {})))
    response = build_opener(_DropAuthOnHostChange()).open(request, timeout=read_timeout)
    with response:
        if have and response.status != 206:  # the server ignored the range: start over
            have = 0
        with open(partial, "ab" if have else "wb") as out:
            while True:
                chunk = response.read(1 << 16)
                if not chunk:
                    break
                out.write(chunk)
    got = os.path.getsize(partial)
    if size is not None and got != size:
        raise IOError("incomplete: %d of %d bytes arrived (kept for the next attempt)" % (got, size))


def verify(path, etag, size):
    """A finished file against its metadata: its size, and its sha256 when the etag is one (an LFS file: weights)."""
    if size is not None and os.path.getsize(path) != size:
        return "size %d, expected %d" % (os.path.getsize(path), size)
    if re.match(r"^[0-9a-f]{64}$", etag or ""):
        digest = hashlib.sha256()
        with open(path, "rb") as src:
            for block in iter(lambda: src.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != etag:
            return "sha256 %s, expected %s" % (digest.hexdigest(), etag)
    return ""


def prefill(spec):
    """Fetch the snapshot's missing blobs into the hub cache ourselves, resumable across attempts (huggingface_hub 1.x
    and later delete a partial file when a download fails); snapshot_download then only links them."""
    from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name
    from huggingface_hub.utils import build_hf_headers, filter_repo_objects

    api = HfApi()
    commit = api.repo_info(spec["repo"], repo_type=spec["repo_type"], revision=spec["revision"],
                           timeout=spec["etag_timeout"]).sha
    names = [entry.path for entry in api.list_repo_tree(spec["repo"], repo_type=spec["repo_type"], revision=commit,
                                                        recursive=True) if hasattr(entry, "size")]
    folder = repo_folder_name(repo_id=spec["repo"], repo_type=spec["repo_type"])
    storage = os.path.join(constants.HF_HUB_CACHE, folder)
    blobs = os.path.join(storage, "blobs")
    for name in filter_repo_objects(names, allow_patterns=spec["include"] or None):
        meta = get_hf_file_metadata(hf_hub_url(spec["repo"], name, repo_type=spec["repo_type"], revision=commit),
                                    timeout=spec["etag_timeout"])
        if not meta.etag or os.path.exists(os.path.join(blobs, meta.etag)):
            continue
        if not os.path.isdir(blobs):
            os.makedirs(blobs)
        partial = os.path.join(blobs, meta.etag + ".trainer-partial")
        fetch(meta.location, partial, meta.size, build_hf_headers(), spec["read_timeout"])
        wrong = verify(partial, meta.etag, meta.size)
        if wrong:
            os.unlink(partial)
            raise IOError("%s arrived corrupt (%s); removed, the next attempt fetches it again" % (name, wrong))
        os.chmod(partial, 0o644)
        os.replace(partial, os.path.join(blobs, meta.etag))


def child(spec):
    """The attempt itself, in the child process. Prints one JSON line."""
    try:
        if spec["source"] == "hf":
            from huggingface_hub import snapshot_download
            if not spec["local_dir"]:
                prefill(spec)
            path = snapshot_download(repo_id=spec["repo"], repo_type=spec["repo_type"], revision=spec["revision"],
                                     local_dir=spec["local_dir"] or None, allow_patterns=spec["include"] or None,
                                     etag_timeout=spec["etag_timeout"])
        else:
            from modelscope import snapshot_download
            kwargs = {}
            if spec["local_dir"]:
                kwargs["local_dir"] = spec["local_dir"]
            elif not os.environ.get("MODELSCOPE_CACHE") and os.environ.get("HF_HOME"):
                kwargs["cache_dir"] = os.path.join(os.environ["HF_HOME"], "modelscope")
            if spec["include"]:
                kwargs["allow_patterns"] = spec["include"]
            path = snapshot_download(spec["repo"], **kwargs)
        sys.stdout.write(json.dumps({"ok": True, "path": str(path)}) + "\n")
        return EXIT_OK
    except ImportError as exc:
        package = "huggingface_hub" if spec["source"] == "hf" else "modelscope"
        error = "%s is not installed for %s (%s)" % (package, sys.executable, exc)
        sys.stdout.write(json.dumps({"ok": False, "kind": "not_installed", "error": error}) + "\n")
    except Exception as exc:  # pylint: disable=broad-except
        kind = type(exc).__name__
        text = str(exc).splitlines()[0] if str(exc) else ""
        sys.stdout.write(json.dumps({"ok": False, "kind": kind, "error": "%s: %s" % (kind, text)}) + "\n")
    return EXIT_FAILED


def say(text):
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def download(args, env):
    spec = {"source": "hf", "repo": args.repo_id, "repo_type": args.repo_type, "revision": args.revision,
            "local_dir": args.local_dir, "include": args.include or [], "etag_timeout": args.etag_timeout,
            "read_timeout": args.read_timeout}
    child_env = attempt_env(env, args.read_timeout, args.etag_timeout, args.progress)
    deadline = time.monotonic() + args.total_timeout
    tried = []
    attempt = 1
    kind = ""
    while True:
        limit = plan_attempt(attempt, args.retries, deadline - time.monotonic(), args.attempt_timeout)
        if limit is None:
            break
        say("trainer-download: %s from %s, attempt %d of %d (limit %d s)"
            % (args.repo_id, endpoint_of(env), attempt, args.retries, limit))
        ok, kind, detail = run_attempt(spec, child_env, limit)
        if ok:
            say("trainer-download: done after %d attempt%s: %s" % (attempt, "" if attempt == 1 else "s", detail))
            sys.stdout.write(detail + "\n")
            return EXIT_OK
        say("trainer-download: attempt %d failed: %s" % (attempt, detail))
        tried.append("Hugging Face attempt %d (%s)" % (attempt, detail))
        if kind in PERMANENT or kind == "not_installed":
            break
        wait = min(next_wait(attempt, args.backoff), max(0.0, deadline - time.monotonic() - 1))
        attempt += 1
        if attempt <= args.retries and wait > 0:
            time.sleep(wait)
    model_id, why_not = modelscope_plan(args.repo_id, args.repo_type, args.revision, args.modelscope,
                                        args.modelscope != "off" and modelscope_installed(sys.executable))
    if model_id:
        # one more attempt after the total: the fallback is not cut short by the time Hugging Face took
        limit = float(args.attempt_timeout)
        say("trainer-download: falling back to ModelScope: %s (limit %d s)" % (model_id, limit))
        ms_spec = dict(spec, source="modelscope", repo=model_id)
        ok, kind, detail = run_attempt(ms_spec, dict(env), limit)
        if ok:
            say("trainer-download: done from ModelScope: %s" % detail)
            sys.stdout.write(detail + "\n")
            return EXIT_OK
        tried.append("ModelScope %s (%s)" % (model_id, detail))
    say(failure_advice(env, tried, why_not))
    return EXIT_FAILED


class Parser(argparse.ArgumentParser):
    def error(self, message):
        self.print_usage(sys.stderr)
        say("trainer-download: %s (see trainer-download --help)" % message)
        raise SystemExit(EXIT_USAGE)


def positive(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise argparse.ArgumentTypeError("%r is not a number of seconds above 0" % text)
    return value


def count(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError("%r is not a whole number of 1 or more" % text)
    return int(text)


def parser():
    p = Parser(prog="trainer-download", description="Download from Hugging Face (or its mirror) with timeouts, "
               "retries and resume, then from ModelScope; or check the job's egress path (egress).")
    sub = p.add_subparsers(dest="command")
    d = sub.add_parser("download", help="download a repository snapshot; prints its path")
    d.add_argument("repo_id")
    d.add_argument("--repo-type", choices=["model", "dataset"], default="model")
    d.add_argument("--revision", default="main")
    d.add_argument("--include", action="append", metavar="PATTERN", help="only these files (repeat)")
    d.add_argument("--local-dir", default="", help="a plain directory instead of the cache")
    d.add_argument("--retries", type=count, default=3, help="attempts at most (3)")
    d.add_argument("--attempt-timeout", type=positive, default=600.0, help="seconds per attempt (600)")
    d.add_argument("--total-timeout", type=positive, default=3600.0, help="seconds in all (3600)")
    d.add_argument("--backoff", type=positive, default=10.0, help="seconds before the 2nd attempt, doubled after (10)")
    d.add_argument("--read-timeout", type=positive, default=60.0, help="HF_HUB_DOWNLOAD_TIMEOUT (60)")
    d.add_argument("--etag-timeout", type=positive, default=30.0, help="HF_HUB_ETAG_TIMEOUT (30)")
    d.add_argument("--modelscope", default="auto", help="auto (the same id), off, or a ModelScope model id")
    d.add_argument("--progress", action="store_true", help="show huggingface_hub's progress bars")
    e = sub.add_parser("egress", help="which endpoint answers the job, through which proxy (one JSON line)")
    e.add_argument("--timeout", type=positive, default=15.0, help="seconds per request (15)")
    e.add_argument("--repo", default="", help="ask for this model's API page instead of the endpoint's root")
    return p


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_attempt"]:
        return child(json.loads(argv[1]))
    args = parser().parse_args(argv)
    if args.command is None:
        parser().error("say download REPO_ID or egress")
    env = dict(os.environ)
    if args.command == "egress":
        return egress(env, args.timeout, args.repo)
    return download(args, env)


if __name__ == "__main__":
    raise SystemExit(main())
