"""module_utils/redact.py, the one owner of redaction, and plugin_utils/redact.py, the run's known secrets."""

from __future__ import annotations

import inspect
import itertools
import json
import random
import re
import time

import pytest

from ansible_collections.remote_gpu.trainer.plugins.module_utils import redact
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.notify_format import redact as notify_redact
from ansible_collections.remote_gpu.trainer.plugins.module_utils.provider_http import scrub
from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import redact_result, run_secrets


@pytest.mark.parametrize("text,secret", [
    ("token sk-abcdefghijklmnop1234 is invalid", "sk-abcdefghijklmnop1234"),
    ("key rpa_ABCDEFGHIJKLMNOP1234 refused", "rpa_ABCDEFGHIJKLMNOP1234"),
    ("HF_TOKEN=hf_abcdefghijklmnopqrstu", "hf_abcdefghijklmnopqrstu"),
    ("Authorization: Bearer abcdefgh12345678", "abcdefgh12345678"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "dXNlcjpwYXNzd29yZA=="),
    ("GET https://bob:hunter2@api.example/v1/pods", "hunter2"),
    ("GET https://bob:hunter2@api.example/v1/pods", "bob"),
    ("?api_key=XYZSECRET1&x=1", "XYZSECRET1"),
    ('{"password": "pa55word!"}', "pa55word!"),
    ("dingtalk ...&sign=abcDEF123%2B", "abcDEF123%2B"),
    ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.c2lnbmF0dXJl here", "eyJzdWIiOiIxMjM0NTY3ODkwIn0"),
    ("token ghp_abcdefghijklmnopqrstuvwxyz0123 x", "ghp_abcdefghijklmnopqrstuvwxyz0123"),
])
def test_tokens_of_known_shapes_and_user_information_go(text, secret):
    assert secret not in redact.redact(text)
    assert redact.MARK in redact.redact(text)


@pytest.mark.parametrize("text", [
    "epoch 3/10 loss 0.25", "sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
    "max_tokens=5", "design: good", "token expired yesterday", "https://hf-mirror.com/models", "see api_key)",
    "git commit 1f3e5d7c9b0a2e4d6c8b0a1f3e5d7c9b2a4e6d8c",
])
def test_ordinary_text_is_kept(text):
    assert redact.redact(text) == text


def test_known_secrets_and_their_url_forms_go_longest_first():
    secret = "k+y/1 long"
    text = "a %s b k%%2By%%2F1%%20long c k%%2By%%2F1+long" % secret
    assert redact.redact(text, [secret, None, "", "ab"]) == "a <redacted> b <redacted> c <redacted>"
    assert redact.redact("x hunter2 y", ["hunter2"], mark="***") == "x *** y"
    assert redact.redact(None) == "" and redact.redact(7) == "7"


def test_the_older_helpers_are_the_same_owner():
    assert scrub("key S3CRETKEY in https://u:p4ss@h/x", "S3CRETKEY") == redact.redact(
        "key S3CRETKEY in https://u:p4ss@h/x", ["S3CRETKEY"])
    assert notify_redact("url http://h/x?s=abc123 sk-abcdefghijklmnop1234", ["abc123"]) == "url http://h/x?s=*** ***"


def test_redact_data_walks_results_and_stays_json():
    data = {"msg": "Bearer abcdefgh12345678", "rows": [{"tail": ["hf_abcdefghijklmnopqrstu"]}], "n": 3,
            "ok": True, "nested": {"hunter22": ("hunter22",)}}
    out = redact.redact_data(data, ["hunter22"])
    text = json.dumps(out)
    assert "abcdefgh12345678" not in text and "hf_abc" not in text and "hunter22" not in text
    assert out["n"] == 3 and out["ok"] is True
    deep = current = []
    for _level in range(200):
        current.append([])
        current = current[0]
    assert redact.redact_data(deep)  # bounded depth, no RecursionError


def test_environ_secrets_by_name():
    env = {"RUNPOD_API_KEY": "k1", "HF_TOKEN": "hf-short", "MY_SERVICE_PASSWORD": "longenough", "HOME": "/root",
           "SOME_KEY": "1", "SLACK_WEBHOOK_URL": "https://hooks.slack.com/services/T/B/x", "EMPTY_TOKEN": " "}
    assert sorted(redact.environ_secrets(env)) == sorted(["k1", "hf-short", "longenough",
                                                          "https://hooks.slack.com/services/T/B/x"])


def test_run_secrets_from_task_vars_and_credentials():
    task_vars = {"vault_wandb_api_key": "wandbkey-1234567890", "credentials_secrets": {"HF_TOKEN": "hfvalue-12345678"},
                 "trainer_data_dir": "/root/autodl-tmp", "some_token": "{{ lookup('env', 'X') }}", "a_key": 5}
    found = run_secrets(task_vars, environ={})
    assert sorted(found) == ["hfvalue-12345678", "wandbkey-1234567890"]
    result = redact_result({"msg": "printed wandbkey-1234567890 and hfvalue-12345678"}, task_vars)
    assert result["msg"] == "printed <redacted> and <redacted>"


def test_a_url_with_user_information_is_named_without_it():
    problem = redact.url_userinfo_problem("https://bob:hunter2@api.example:8443/v1/x?q=1")
    assert "hunter2" not in problem and "bob" not in problem and "api.example:8443" in problem
    assert "user information" in problem and "/v1/x" not in problem  # a webhook's path is its token
    assert redact.url_userinfo_problem("https://api.example/v1") is None
    assert redact.url_secrets("https://bob:hunter2@h/x") == ["bob:hunter2", "hunter2"]
    assert redact.url_secrets("https://h/x") == []


def test_without_secrets_drops_environments_and_credentials_at_any_depth():
    record = {"id": 1, "env": {"HF_TOKEN": "x"}, "extra_env": [["A", "b"]], "jupyter_token": "t",
              "ssh_key_names": ["mine"], "ports": [{"HostPort": 22, "root_password": "p"}],
              "snapshot": {"proxy_host": "h", "ssh_command": "ssh -p 1 root@h", "root_password": "p"}}
    assert redact.without_secrets([record]) == [{"id": 1, "ssh_key_names": ["mine"], "ports": [{"HostPort": 22}],
                                                 "snapshot": {"proxy_host": "h"}}]


@pytest.mark.parametrize("unit,times", [("a-", 500000), ("a.", 500000), ("x:", 500000), ("x", 1000000),
                                        ("token=", 100000), ("a_=", 300000)])
def test_a_megabyte_of_hostile_text_is_redacted_in_linear_time(unit, times):
    # How the work grows, not how long it takes: a megabyte against an eighth of it, in the same run, the best of
    # three each, in this process's CPU time (which other processes on a loaded machine do not add to). Linear work
    # gives about 8; "a-" * 500000 grew about 64-fold with the old unbounded key-name pattern (4.5 s for the megabyte).
    def best(text):
        runs = []
        for _attempt in range(3):
            started = time.process_time()
            redact.redact(text, ["secret123"])
            runs.append(time.process_time() - started)
        return min(runs)

    prefix = "http://" if unit == "x" else ""
    small, large = best(prefix + unit * (times // 8)), best(prefix + unit * times)
    assert large / max(small, 1e-4) < 24, "an eighth took %.3f s, the whole %.3f s" % (small, large)


# vast.ai keys (64 hex digits) and W&B keys (40 hex digits) have no prefix. Redacting every 40/64-hex string would
# blank the sha256 digests and commits that manifests, receipts and reports must show, so they go by the name that
# stands before them in free text: NAME=value, "name": value and YAML (already covered before issue 29, item 4),
# the hyphenated api-key and the --api-key VALUE option of the vastai CLI, and a netrc's password (where wandb
# keeps its key).
VAST = "3b5d7f9a1c3e5b7d9f1a3c5e7b9d1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1e3b5d"
WANDB = "9c2e4a6f8b1d3c5e7a9f0b2d4c6e8a1f3b5d7c9e"


@pytest.mark.parametrize("text,secret", [
    ("WANDB_API_KEY=%s" % WANDB, WANDB),
    ("export VAST_API_KEY='%s'" % VAST, VAST),
    ('{"wandb_api_key": "%s"}' % WANDB, WANDB),
    ("vast_api_key: %s" % VAST, VAST),
    ("env: {'WANDB_API_KEY': '%s'}" % WANDB, WANDB),
    ("vastai stop instance 42 --api-key %s" % VAST, VAST),
    ("vastai stop instance 42 --api-key=%s" % VAST, VAST),
    ("api-key: %s" % VAST, VAST),
    ("machine api.wandb.ai\n  login user\n  password %s\n" % WANDB, WANDB),
])
def test_hex_keys_go_where_a_secret_name_stands_before_them(text, secret):
    assert secret not in redact.redact(text), redact.redact(text)


@pytest.mark.parametrize("text", [
    "sha256 %s" % VAST, '{"sha256": "%s", "bytes": 3}' % VAST, "manifest_sha256=%s" % VAST,
    '"tree_sha256": "%s"' % VAST, "commit %s" % WANDB, '{"commit": "%s", "dirty": false}' % WANDB,
    "%s  best.safetensors" % VAST, "HEAD is now at %s" % WANDB[:12], "password reset required",
    "--api-key is not set: export VAST_API_KEY", "token expired yesterday",
])
def test_digests_and_commits_stay_readable(text):
    assert redact.redact(text) == text


# redact runs its patterns only on a text where may_match (_MAY_MATCH) finds what every one of them needs. Held to the patterns
# themselves: texts built at random from their pieces (the words, the prefixes, the separators, values of every
# length) and from what is near them ("sig", "tok", "ey", "-x", ":/"), and every text of the tests above.
PIECES = ("token", "TOKEN", "tok", "password", "passwd", "Passw", "secret", "sign", "sig", "signature", "api_key",
          "api-key", "apikey", "ApiKey", "access_key", "key", "bearer", "Bearer", "basic", "BASIC", "://", ":/", "@",
          "--", "-", "--api-key", "rpa_", "rps_", "hf_", "sk-", "ghp_", "gho_", "github_pat_", "xoxb-", "local-",
          "eyJ", "ey", ".", "=", ":", " ", "%20", "+", '"', "'", "/", "_", "0123456789abcdef", "ABCDEFGHIJKLMNOP",
          "x", "1", "9c2e4a6f8b1d3c5e7a9f0b2d4c6e8a1f3b5d7c9e", "user:pw", "https", "h")


def _texts(count, seed=20261205):
    """Every piece, separator and value in a row (each name before each value), and ``count`` random rows."""
    rng = random.Random(seed)
    grid = ["".join(parts) for parts in itertools.product(
        ("", "x ", "--", '"'), PIECES, ("", "=", ": ", " ", '": "', "@"),
        ("ABCDEFGHIJKLMNOP1234", "0123456789abcdef", "user:pw@h"))]
    return grid + ["".join(rng.choices(PIECES, k=rng.randint(1, 9))) for row in range(count)]


def test_a_text_that_may_match_finds_nothing_in_is_one_the_patterns_keep():
    texts = _texts(30000)
    passed_over = [text for text in texts if not redact.may_match(text)]
    # the generator reaches both sides of the check, and the patterns redact many of the texts they are given
    assert 1000 < len(passed_over) < len(texts) - 1000
    assert sum(redact._by_pattern(text, redact.MARK) != text for text in texts) > 1000
    changed = [text for text in passed_over if redact._by_pattern(text, redact.MARK) != text]
    assert not changed, changed[:5]


def test_every_secret_of_the_tests_above_is_found_by_the_check():
    module = inspect.getmodule(test_a_text_that_may_match_finds_nothing_in_is_one_the_patterns_keep)
    for name in ("test_tokens_of_known_shapes_and_user_information_go", "test_hex_keys_go_where_a_secret_name_stands_before_them"):
        for mark in getattr(module, name).pytestmark:
            for case in mark.args[1]:
                assert redact.may_match(case[0]), case


# The letters that Python's (?i) takes for an ASCII one besides its two cases (the patterns are (?i); may_match
# searches the text made lower case, which does not make the first three that letter).
FOLDED = ("paſsword=abcd1234", "PAſSWORD: abcd1234", "ſign=abcd1234", "toKen=abcd1234", "TOKEN=abcd1234",
          "apİ_key=abcd1234", "apı-key: abcd1234", "--apİ-key abcd1234", "baſıc abcdefgh1234", "tokEN abcd12345")


@pytest.mark.parametrize("text", FOLDED)
def test_the_check_finds_what_ignorecase_matches_to_an_ascii_letter(text):
    assert redact._by_pattern(text, redact.MARK) != text  # the patterns redact it: the check must let it through
    assert redact.may_match(text) and "abcd1234" not in redact.redact(text)


def test_the_lower_case_check_is_the_ignorecase_one():
    """may_match searches the lowered text (about 14 times faster than (?i) on a log line): the same answer as the
    (?i) search of _MAY_MATCH, on every text of the tests above and on those letters."""
    ignorecase = re.compile("(?i)" + redact._MAY_MATCH.pattern)
    texts = _texts(5000) + list(FOLDED) + ["\u0130\u0131\u017f\u212a ok", "ŞİGN", "\u2588\u2588 50%", ""]
    assert [bool(ignorecase.search(text)) for text in texts] == [redact.may_match(text) for text in texts]
