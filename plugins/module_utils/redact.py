# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""The one owner of secret redaction: every message, result, report, history record, dashboard, receipt and
notification that leaves the collection passes through ``redact`` (text) or ``redact_data`` (a result).

What is redacted:

- the known secrets of the run, given by the caller (an API key, a webhook URL, an SMTP password), with their
  URL-quoted forms; ``environ_secrets`` adds the values of the controller's secret-named environment variables
  (the providers' keys, ``HF_TOKEN``, ``WANDB_API_KEY``, any ``*_KEY``/``*_TOKEN``/``*_PASSWORD``/``*_SECRET``);
- user information in URLs (``scheme://user:password@host`` keeps ``scheme://<redacted>@host``);
- secret-named query parameters and ``key=value`` / ``"key": "value"`` pairs (``api_key``, ``api-key``, ``token``,
  ``sign``...), a secret-named command-line option and its value (``--api-key VALUE``, as the vastai CLI takes it),
  and the value after ``password`` in a netrc (``machine api.wandb.ai login user password VALUE``, where wandb
  keeps its key);
- tokens of the shapes the providers and tools hand out (RunPod ``rpa_``/``rps_``, Hugging Face ``hf_``, OpenAI-style
  ``sk-``, GitHub ``ghp_``, Slack ``xox?-``, W&B ``local-``, JWTs such as AutoDL's), and the value after ``Bearer``/``Basic``/``token``.

A vast.ai key (64 hex digits) and a W&B key (40 hex digits) have no prefix: they look like a sha256 or a git
commit, which reports must keep, so they are never redacted by shape. They go as known secrets (their environment
variables, ``credentials_secrets``), and in free text wherever a secret-like name stands before them (the pairs,
the option and the netrc above: ``WANDB_API_KEY=...``, ``"vast_api_key": "..."``, ``--api-key ...``); a bare one
with no such name is kept, as a digest is (tests/unit/plugins/module_utils/test_redact.py holds both).

Pure functions, standard library only: modules on the box and the controller's plugins import the same code.
"""

from __future__ import annotations

import re
import urllib.parse

MARK = "<redacted>"
# A known secret shorter than this is not searched for: it would blank ordinary words of every message.
MIN_SECRET = 4
# Environment variables whose values are secrets, by name (the providers' keys, the tokens of the job environment).
SECRET_ENV_NAMES = ("RUNPOD_API_KEY", "VAST_API_KEY", "LAMBDA_API_KEY", "AUTODL_TOKEN", "HF_TOKEN",
                    "HUGGING_FACE_HUB_TOKEN", "WANDB_API_KEY", "OPENAI_API_KEY", "GITHUB_TOKEN")
SECRET_NAME = re.compile(r"(?i)(?:^|_)(?:api_?key|key|token|password|passwd|secrets?|webhook(?:_url)?|access_key)$")
# Harvested values (from names alone) shorter than this are left alone: "KEY=1" is a setting, not a secret.
MIN_HARVESTED = 8

_WORD = r"[A-Za-z0-9_\-]"
SHAPES = (
    re.compile(r"(?<![A-Za-z0-9])(?:rpa|rps)_[A-Za-z0-9]{12,}"),          # RunPod API keys
    re.compile(r"(?<![A-Za-z0-9])hf_[A-Za-z0-9]{16,}"),                    # Hugging Face tokens
    re.compile(r"(?<![A-Za-z0-9])sk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"),  # OpenAI/Anthropic-style keys
    re.compile(r"(?<![A-Za-z0-9])(?:ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{20,}"),  # GitHub tokens
    re.compile(r"(?<![A-Za-z0-9])xox[abprs]-[A-Za-z0-9\-]{10,}"),           # Slack tokens
    re.compile(r"(?<![A-Za-z0-9])local-[0-9a-f]{40}"),                     # W&B local keys
    re.compile(r"(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*"),  # JWTs (AutoDL tokens)
)
# the value after an authorization scheme
# (and after "token" or a netrc's "password", when the value holds a digit: "token expired" is a sentence)
_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+|%20|\+)([A-Za-z0-9._~+/=\-]{8,})"
                     r"|\b(token|password)(\s+|%20|\+)((?=[A-Za-z._~+/=\-]*[0-9])[A-Za-z0-9._~+/=\-]{8,})")
# a secret-named command-line option and its value: --api-key KEY (the vastai CLI), --token T, --password P
_OPTION = re.compile(r"(?i)(--(?:api[_\-]?key|access[_\-]?key|token|password|secret)\s+)([^\s\-\"'][^\s\"']{3,})")
# user information in a URL: scheme://user[:password]@
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]{0,30}://)([^/\s@\"'<>\\]+)@")
# a secret-named parameter or field: api_key=..., ?token=..., "password": "...", sign=...
_PAIR = re.compile(r"(?i)([\"']?(?<![A-Za-z0-9_\-])(?:[a-z0-9_\-]{0,40}(?:api[_\-]?key|access[_\-]?key|token|password|passwd|secret|signature)|sign)"
                   r"[\"']?\s*[=:]\s*[\"']?)([^\s\"'&,;<>\\]{4,})")
# What each pattern above cannot match without, case-insensitively (a superset of what they match): "://" (user
# information), the words of the schemes, the options and the pairs, the shapes' prefixes. Most strings of a result
# (paths, states, numbers, log lines) hold none, and the patterns are not run on them (redact_data of a patrol
# probe's result, 15 jobs and about 2,000 strings: 6.2 ms before, 3.0 ms, on the controller of every host).
# tests/unit/plugins/module_utils/test_redact.py holds this to the patterns: a text that this does not find is one
# that they leave as it is.
# Searched in the text made lower case (may_match), not with (?i): Python's re finds no literal to skip ahead with
# under IGNORECASE. The check took about 10 us for a 60-character log line, 0.7 us so (job_log.py redacts each line
# of a job's log tail on the box, at every patrol tick), and redact_data of a result of 4,500 strings 7.1 ms, 2.4 ms.
_MAY_MATCH = re.compile(r"://|bearer|basic|token|passw|secret|sign|api[_\-]?key|access[_\-]?key"
                        r"|rp[as]_|hf_|sk-|gh[opsu]_|github_pat_|xox[abprs]-|local-|eyj")
# The letters that (?i) matches to an ASCII letter besides its two cases (the patterns are (?i)): the dotted and the
# dotless I, the long S and the Kelvin sign. lower() makes only the last one that letter (the dotted I becomes an i
# and a combining dot), so they are made the letter first.
_FOLD = {0x130: "i", 0x131: "i", 0x17F: "s", 0x212A: "k"}


def may_match(text):
    """Whether any pattern of redact could match in ``text`` (a superset of what they match, see _MAY_MATCH)."""
    if not text.isascii():
        text = text.translate(_FOLD)
    return _MAY_MATCH.search(text.lower()) is not None


def _forms(secret):
    """A secret and its URL-quoted forms (how it shows in a URL, a query string or a form body)."""
    return dict.fromkeys((secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret),
                          urllib.parse.quote(secret)))


def _pair(match, mark):
    value = match.group(2)
    # a number (a token count, a page number) or an already redacted value is not a secret
    if value.isdigit() or mark in value or value.lower() in ("none", "null", "true", "false"):
        return match.group(0)
    return match.group(1) + mark


def _scheme(match, mark):
    if match.group(1):
        return match.group(1) + match.group(2) + mark
    return match.group(4) + match.group(5) + mark


def _by_pattern(text, mark):
    """``text`` with the user information of its URLs, the values after a scheme, a secret-named option or name, and
    the secrets of a known shape replaced by ``mark``."""
    text = _USERINFO.sub(lambda m: m.group(1) + mark + "@", text)
    text = _SCHEME.sub(lambda m: _scheme(m, mark), text)
    text = _OPTION.sub(lambda m: m.group(1) + mark, text)
    for shape in SHAPES:
        text = shape.sub(mark, text)
    return _PAIR.sub(lambda m: _pair(m, mark), text)


def _known(secrets):
    """The known secrets of ``secrets`` long enough to search for, with their URL-quoted forms, longest first."""
    known = set()
    for secret in secrets or ():
        if isinstance(secret, str) and len(secret.strip()) >= MIN_SECRET:
            known.update(form for form in _forms(secret.strip()) if form)
    return sorted(known, key=len, reverse=True)


def _redact(text, known, mark):
    text = "" if text is None else str(text)
    if not text:
        return text
    if may_match(text):
        text = _by_pattern(text, mark)
    for form in known:
        text = text.replace(form, mark)
    return text


def redact(text, secrets=(), mark=MARK):
    """``text`` (any value: it is made a string) with every known secret in ``secrets`` and every secret of a
    known shape replaced by ``mark``. None is the empty string."""
    return _redact(text, _known(secrets), mark)


def redact_data(value, secrets=(), mark=MARK):
    """A copy of ``value`` (dicts, lists, strings, scalars) with every string redacted; keys are kept, except
    that a dict key that is itself a secret is redacted too. Deeper than 64 levels: the whole value is ``mark``."""
    known = _known(secrets)

    def walk(value, depth):
        if depth > 64:
            return mark
        if isinstance(value, str):
            return _redact(value, known, mark)
        if isinstance(value, dict):
            return dict((_redact(key, known, mark) if isinstance(key, str) else key, walk(item, depth + 1))
                        for key, item in value.items())
        if isinstance(value, (list, tuple)):
            return [walk(item, depth + 1) for item in value]
        return value

    return walk(value, 0)


def environ_secrets(environ):
    """The values of the secret-named variables of ``environ`` (see SECRET_ENV_NAMES and SECRET_NAME)."""
    found = []
    for name, value in (environ or {}).items():
        if not isinstance(value, str) or not value.strip():
            continue
        if name in SECRET_ENV_NAMES or (SECRET_NAME.search(name) and len(value.strip()) >= MIN_HARVESTED):
            found.append(value.strip())
    return found


def url_secrets(url):
    """The user information of ``url`` (``user:password`` and the password alone), for a module's
    ``no_log_values``: so that not even its ``invocation`` shows them. [] when it has none."""
    try:
        netloc = urllib.parse.urlsplit(str(url or "")).netloc
    except ValueError:
        return []
    if "@" not in netloc:
        return []
    userinfo = netloc.rpartition("@")[0]
    return [part for part in (userinfo, userinfo.partition(":")[2]) if len(part) >= MIN_SECRET]


def url_userinfo_problem(url, what="api_url"):
    """A message when ``url`` carries user information (``user:password@``), else None. The message never shows
    it: such a URL is refused before any request, because the credentials would travel in logs and errors."""
    try:
        parts = urllib.parse.urlsplit(str(url or ""))
    except ValueError:
        return None
    if "@" not in (parts.netloc or ""):
        return None
    # the host only: a webhook's path is its token
    shown = "%s://%s@%s/..." % (parts.scheme, MARK, parts.netloc.rpartition("@")[2])
    return ("%s %s holds user information (user:password@): refused, nothing was sent. Put the credentials where "
            "they belong (the API key's environment variable or option, a webhook URL from *_env or *_file without "
            "user:password@), and give the URL without them." % (what, shown))


# Fields of a provider's instance record that carry the instance's environment or credentials: never cached,
# never copied into hostvars (provider_hosts curates the rest).
RECORD_SECRET_KEYS = re.compile(r"(?i)^(?:env|envs|environment|extra_env|env_vars|onstart|onstart_cmd|docker_args|"
                                r"ssh_command|jupyter_url|root_password|.*(?:password|passwd|token|secret|api_?key).*)$")


def without_secrets(record, _depth=0):
    """A copy of a provider's record (or list of records) without the fields named by RECORD_SECRET_KEYS, at any
    depth; deeper than 64 levels the part is dropped (None)."""
    if _depth > 64:
        return None
    if isinstance(record, dict):
        return dict((key, without_secrets(value, _depth + 1)) for key, value in record.items()
                    if not (isinstance(key, str) and RECORD_SECRET_KEYS.match(key)))
    if isinstance(record, list):
        return [without_secrets(item, _depth + 1) for item in record]
    return record
