# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""A module run without AnsiballZ: the controller side of module_utils/direct_run.

Every AnsiballZ module first compiles ``ansible.module_utils.basic`` and its imports on the host, from a zip: about
0.25 s of the host's CPU on each run, ping's whole cost. patrol runs its probe on every host at every tick, and a
fresh launch runs preflight's probe, two writes and the job's start on every host, each step waiting for the one
before, so the actions of those modules (each a ``DirectAction``) send only what the module needs when they can:

1. the task's arguments are validated here, on the controller, against the module's own argument spec (its
   ``MODULE_OPTIONS``: the keyword arguments it gives AnsibleModule);
2. module_utils/direct_run.py goes to the host's Python on stdin, as Ansible pipelines a module, with the module's
   source, the module_utils it imports (both without their documentation: ``lean``) and the validated arguments;
3. the one JSON document it prints is parsed as Ansible parses a module's result.

The same module code runs on the host either way. It runs the usual way, AnsiballZ through ansible.builtin.normal,
whenever Ansible would not pipeline it (pipelining off, async, a non-sh shell), when the task is delegated, when
the host's Python is not known without discovery (no ansible_python_interpreter and no discovered one yet: every
profile sets it), and when the arguments do not validate, so that the module reports them in its own words. It also
runs through AnsiballZ when a step of the direct run that leans on ansible-core's private API fails at preparation
(the shebang, the module command): nothing has run on the host yet. After the host has run it, a probe (``READ_ONLY``)
runs again through AnsiballZ when the parsing fails (``_parse_returned_data``, which gives a dict up to 2.20 and a
UnifiedTaskResult from 2.21) or the host printed no module result at all: never a failed task of its own. A module
that changes the host (its action's ``READ_ONLY`` is False: a write, a job's start) is never run twice: its task
fails, and says that what it changed is not known. ``-vvv`` says which way each host ran, and why.
"""

from __future__ import annotations

import ast
import base64
import fcntl
import importlib
import io
import json
import os
import re
import zlib

from ansible import constants as C
from ansible.executor.interpreter_discovery import InterpreterDiscoveryRequiredError
from ansible.executor.module_common import _get_shebang
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.plugins.action import ActionBase
from ansible.plugins.action.normal import ActionModule as NormalAction
from ansible.utils.display import Display
from ansible.utils.vars import merge_hash

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils.redact import redact_result

display = Display()

COLLECTION = __name__.split(".plugins.", 1)[0]  # ansible_collections.remote_gpu.trainer
MODULE_UTILS = COLLECTION + ".plugins.module_utils"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the collection's folder
RUNNER = MODULE_UTILS + ".direct_run"
BASIC = "ansible.module_utils.basic"
# what the runner stands in for besides AnsibleModule, for a module with SUBSPECS (module_utils/direct_run)
TYPING = ("ansible.module_utils.common.arg_spec", "ansible.module_utils.errors")
FUTURE = "from __future__ import annotations\n"
# Right after the runner's __future__ import, before any other import: the remote user's working directory (where
# Python looks first for a program read from stdin) is untrusted.
CLEAN_PATH = "import sys\nsys.path[:] = [entry for entry in sys.path if entry not in ('', '.')]\n"

# "from PACKAGE import NAMES" (NAMES may be parenthesised over several lines) and "import MODULE"
IMPORT_FROM = re.compile(r"^[ \t]*from[ \t]+([\w.]+)[ \t]+import[ \t]+(\([^)]*\)|[^\n]*)", re.M)
IMPORT = re.compile(r"^[ \t]*import[ \t]+([\w.]+)", re.M)
# a module's documentation, which only ansible-doc and the controller read
DOC_NAMES = frozenset(("DOCUMENTATION", "EXAMPLES", "RETURN"))
COMMENT_LINE = re.compile(rb"^[ \t]*#")


class Unsupported(Exception):
    """The module cannot run without AnsiballZ."""


def read_source(name):
    """The source of the collection's module ``name`` (an import name)."""
    path = os.path.join(ROOT, *name[len(COLLECTION) + 1:].split(".")) + ".py"
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise Unsupported("cannot read %s: %s" % (path, exc)) from exc


def lean(source):
    """``source`` as the host needs it: without its docstrings, a module's DOCUMENTATION, EXAMPLES and RETURN (each
    string becomes ``""``) and its lines of only a comment, every line kept where it was (blank), so that a
    traceback from the host names the line of the collection's file. The probes' programs are about 40% smaller, on
    every host at every tick. A source that reads ``__doc__`` keeps its docstrings, one that reads DOCUMENTATION,
    EXAMPLES or RETURN keeps that string; ``source`` itself where it or its lean copy does not compile."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return source
    docstrings, in_strings, read = [], set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and _is_text(first.value):
                docstrings.append(first.value)
        elif isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store):
            read.add(node.id)
        elif isinstance(node, ast.Attribute):
            read.add(node.attr)
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and node.end_lineno > node.lineno:
            # a line that starts with # inside a string is no comment (0-based: the string's lines after its first)
            in_strings.update(range(node.lineno, node.end_lineno))
    strings = [] if "__doc__" in read else docstrings
    # the module's own documentation: a top-level NAME = "..." that nothing reads
    strings += [statement.value for statement in tree.body
                if isinstance(statement, ast.Assign) and _is_text(statement.value)
                and {getattr(target, "id", None) for target in statement.targets} & (DOC_NAMES - read)]
    lines = io.BytesIO(source.encode("utf-8")).readlines()
    for index, line in enumerate(lines):
        if index not in in_strings and COMMENT_LINE.match(line):
            lines[index] = b"\n" if line.endswith(b"\n") else b""
    # ast's columns count UTF-8 bytes; from the last string up, so that the positions above stay true
    for node in sorted(strings, key=lambda string: (string.lineno, string.col_offset), reverse=True):
        first, last = node.lineno - 1, node.end_lineno - 1
        lines[first:last + 1] = ([lines[first][:node.col_offset] + b'""' + lines[last][node.end_col_offset:]]
                                 + [b"\n"] * (last - first))
    leaner = b"".join(lines).decode("utf-8")
    try:
        compile(leaner, "lean", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return source
    return leaner


def _is_text(node):
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def imports(source):
    """The import names that ``source`` imports: each ``import X``; for ``from P import a, b``, ``P.a`` and ``P.b``
    when P is the collection's module_utils package, else ``P``."""
    found = [match.group(1) for match in IMPORT.finditer(source)]
    for match in IMPORT_FROM.finditer(source):
        package, names = match.groups()
        if package != MODULE_UTILS:
            found.append(package)
            continue
        names = re.sub(r"#[^\n]*", "", names).strip("()")
        found.extend("%s.%s" % (package, name.split()[0]) for name in names.split(",") if name.strip())
    return found


def module_sources(module, allowed=(BASIC,)):
    """{import name: source} of the collection's module ``module`` (its short name) and of the module_utils it
    imports, transitively. Unsupported when any of them imports something of ``ansible`` that is not ``allowed``
    (the runner stands in for those only)."""
    sources, todo = {}, [COLLECTION + ".plugins.modules." + module]
    while todo:
        name = todo.pop()
        if name in sources:
            continue
        sources[name] = lean(read_source(name))
        for imported in imports(sources[name]):
            if imported.startswith(MODULE_UTILS + "."):
                todo.append(imported)
            elif imported.split(".")[0] == "ansible" and imported not in allowed:
                raise Unsupported("%s imports %s" % (name, imported))
    return sources


def runner_source():
    """module_utils/direct_run.py with the import path's cleaning right after its __future__ import."""
    head, future, rest = lean(read_source(RUNNER)).partition(FUTURE)
    if not future:
        raise Unsupported("%s has no line %r to put the import path's cleaning after" % (RUNNER, FUTURE.strip()))
    return head + future + CLEAN_PATH + rest


def pack(sources):
    """{import name: source} as base64 of zlib-compressed JSON, as direct_run.main reads it."""
    return base64.b64encode(zlib.compress(json.dumps(sources, sort_keys=True).encode("utf-8"), 6)).decode("ascii")


def prepare(module):
    """What every host's run of ``module`` shares, as JSON gives it back (tuples as lists, as every worker reads it
    from the cache): {"options": its MODULE_OPTIONS, "subspecs": its SUBSPECS (the argument specs of the dict
    options it types itself, if any), "runner": runner_source(), "sources": its module_sources, packed}."""
    code = importlib.import_module(COLLECTION + ".plugins.modules." + module)
    subspecs = getattr(code, "SUBSPECS", {})
    sources = module_sources(module, (BASIC,) + (TYPING if subspecs else ()))
    return json.loads(json.dumps({"options": code.MODULE_OPTIONS, "subspecs": subspecs, "runner": runner_source(),
                                  "sources": pack(sources)}))


def prepared(module):
    """prepare(module), made once per run and kept as JSON in the run's local temporary folder, as AnsiballZ keeps
    its zips there: the first worker makes it while the others of that moment wait on a lock, then read it."""
    path = os.path.join(C.DEFAULT_LOCAL_TMP, "remote_gpu_direct_%s.json" % module)
    try:
        with open(path + ".lock", "a", encoding="utf-8") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with open(path, encoding="utf-8") as handle:
                    return json.load(handle)
            except (OSError, ValueError):
                shared = prepare(module)
                with open(path + ".new", "w", encoding="utf-8") as handle:
                    json.dump(shared, handle)
                os.replace(path + ".new", path)
                return shared
    except OSError as exc:
        display.vvv("cannot keep %s: %s" % (path, exc))
        return prepare(module)


def program(shared, request):
    """The program the host's Python reads from stdin: the runner, then ``main(SOURCES, REQUEST)``."""
    return "%s\nmain(%r, %r)\n" % (shared["runner"], shared["sources"], request)


def host_side_spec(spec):
    """``spec`` with type ``path`` as ``str`` (also list elements, also in suboptions): the controller checks the
    types, and the host expands ``~`` and variables in them (direct_run.expand_paths) as the remote user."""
    copy = {}
    for name, option in spec.items():
        option = dict(option)
        for key in ("type", "elements"):
            if option.get(key) == "path":
                option[key] = "str"
        if option.get("options"):
            option["options"] = host_side_spec(option["options"])
        copy[name] = option
    return copy


class DirectAction(NormalAction):
    """The action of a module that runs without AnsiballZ where Ansible would pipeline it (see above).

    A subclass sets ``MODULE``, the module's short name, and ``READ_ONLY = False`` where the module changes the host.
    The module defines ``MODULE_OPTIONS``: the keyword arguments it gives AnsibleModule (``argument_spec``, its
    constraints, ``supports_check_mode``)."""

    MODULE = ""
    # a probe: a second run, through AnsiballZ, where the direct run's result cannot be read, is harmless
    READ_ONLY = True

    def run(self, tmp=None, task_vars=None):
        # what the box answered leaves through the one redaction owner (a log tail that printed a token)
        return redact_result(self._run(tmp, task_vars), task_vars)

    def _run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        # Each step below that leans on ansible-core's private API (the shebang, the module command, the result
        # parser) can change in any release. A failure of one at preparation is no failure of the task: AnsiballZ
        # runs the module the usual way. At parsing, the host has run the module: a probe runs again through
        # AnsiballZ, a module that changes the host does not (see not_read).
        try:
            command, text = self.direct_command(task_vars)
        except Unsupported as exc:
            return self.through_ansiballz(tmp, task_vars, exc)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            return self.through_ansiballz(tmp, task_vars, "preparing its direct run failed (%s: %s)"
                                          % (type(exc).__name__, exc))
        result = ActionBase.run(self, tmp, task_vars)
        interpreter = self._used_interpreter.lstrip("#!")
        display.vvv("%s runs without AnsiballZ (%d bytes to %s)" % (self.MODULE, len(text), interpreter),
                    host=self._play_context.remote_addr)
        # an unreachable host or a timeout is the task's, as for any module run. The connection prints what the
        # host answered at -vvv, before any redaction, unless its play context (a copy of the task's) says no_log:
        # the answer shows, redacted, as the task's result (a key a job printed that no pattern knows, but the
        # controller does, stays out of the output)
        context = getattr(self._connection, "_play_context", None) or self._play_context
        no_log, context.no_log = context.no_log, True
        try:
            response = self._low_level_execute_command(command, sudoable=True, in_data=text.encode("utf-8"))
        finally:
            context.no_log = no_log
        try:
            parsed = self.direct_result(response)
        except Unsupported as exc:
            why = str(exc)
        except Exception as exc:  # pylint: disable=broad-exception-caught
            why = "parsing its direct run's result failed (%s: %s)" % (type(exc).__name__, exc)
        else:
            return merge_hash(result, parsed)
        if self.READ_ONLY:
            return self.through_ansiballz(tmp, task_vars, why)
        return self.not_read(result, response, why)

    def not_read(self, result, response, why):
        """The failed result of a module that changes the host, which ran there but whose result cannot be read
        (``why``): it is not run a second time (a restart would restart the job it has just started)."""
        display.vvv("%s ran without AnsiballZ, and its result cannot be read: %s" % (self.MODULE, why),
                    host=self._play_context.remote_addr)
        stderr = response.get("stderr") or ""
        return dict(result, failed=True, rc=response.get("rc"), module_stderr=stderr[-2000:],
                    msg="%s ran on the host without AnsiballZ, but its result cannot be read (%s), so what it "
                        "changed there is not known; it is not run a second time. Look at the host, then run "
                        "again with -vvv (ANSIBLE_PIPELINING=False runs it through AnsiballZ) and report what it "
                        "prints" % (self.MODULE, why))

    def through_ansiballz(self, tmp, task_vars, why):
        """The module run the usual way, through AnsiballZ (ansible.builtin.normal); ``-vvv`` says ``why``."""
        display.vvv("%s runs through AnsiballZ: %s" % (self.MODULE, why), host=self._play_context.remote_addr)
        return super().run(tmp, task_vars)

    def direct_command(self, task_vars):
        """(the command that runs the host's Python on stdin, the program it reads there); Unsupported where the
        module runs through AnsiballZ."""
        shebang = self.shebang(task_vars)
        shared = prepared(self.MODULE)
        params, spec = self.validated_params(shared["options"], shared["subspecs"])
        request = json.dumps({"module": COLLECTION + ".plugins.modules." + self.MODULE, "params": params,
                              "spec": spec, "checked": [canonical(sub) for sub in shared["subspecs"].values()],
                              "check_mode": bool(self._task.check_mode), "diff": bool(self._task.diff)})
        text = program(shared, request)
        command = self._connection._shell.build_module_command(self._compute_environment_string(), shebang, "")
        if not isinstance(command, str) or not command.strip():
            raise Unsupported("the shell built no module command")
        self._used_interpreter = shebang  # what the parser names when the host has no such Python
        return command.strip(), text

    def direct_result(self, response):
        """The module's result from the host's ``response``, as Ansible parses a module's: a dict up to
        ansible-core 2.20, a UnifiedTaskResult from 2.21. Unsupported when the output is no module result at all
        (the runner itself failed): AnsiballZ then runs a probe, and reports whatever stops it (see _run)."""
        parsed = self._parse_returned_data(response, "legacy")
        if isinstance(parsed, dict):
            data, module_result = parsed, parsed.get("_ansible_parsed")
        else:
            module_result = parsed.ansible_parsed
            parsed.remove_internal_keys()
            data = parsed.as_result_dict(for_round_trip=True)
        if not isinstance(data, dict):
            raise Unsupported("the parsed result is a %s, not a dict" % type(data).__name__)
        if not module_result:
            raise Unsupported("its output is not a module result (%s)" % data.get("msg"))
        return data

    def shebang(self, task_vars):
        """``#!`` and the host's Python, as Ansible would run the module with; Unsupported where Ansible would not
        pipeline it, or must discover the host's Python first."""
        if self._task.async_val:
            raise Unsupported("async")
        if self._task.delegate_to:
            raise Unsupported("a delegated task")
        if not self._is_pipelining_enabled("new"):
            raise Unsupported("pipelining is off")
        if getattr(self._connection._shell, "SHELL_FAMILY", None) != "sh":
            raise Unsupported("not an sh-family shell")
        try:
            shebang, _interpreter = _get_shebang("/usr/bin/python", task_vars, self._templar,
                                                 remote_is_local=bool(getattr(self._connection, "_remote_is_local",
                                                                              False)))
        except InterpreterDiscoveryRequiredError:
            raise Unsupported("the host's Python is discovered first (set ansible_python_interpreter to skip that)")
        return shebang

    def validated_params(self, options, subspecs):
        """(the task's arguments checked against the module's ``options`` (its MODULE_OPTIONS) with their defaults,
        each dict option of ``subspecs`` checked against its spec too; the argument spec with those as suboptions,
        for the host to expand paths). Unsupported when they do not validate, or validate with a warning, so that
        the module reports that itself."""
        return validated(options, subspecs, self._task.args)


def validated(options, subspecs, args):
    """(``args`` checked against ``options`` (a module's MODULE_OPTIONS) with their defaults, each dict option of
    ``subspecs`` checked against its spec too; the argument spec with those as suboptions); Unsupported when they do
    not validate (see DirectAction.validated_params)."""
    options = dict(options)
    options.pop("supports_check_mode", None)
    spec = options.pop("argument_spec")
    params = checked(spec, dict(args), **options)
    for name, subspec in subspecs.items():
        params[name] = checked(subspec, params[name] or {})
    return params, dict((name, dict(option, options=subspecs[name]) if name in subspecs else option)
                        for name, option in spec.items())


def program_for(module, args, check_mode=False):
    """The program that runs the collection's module ``module`` with ``args`` on a host's Python, read from stdin,
    for a controller action that runs it over SSH itself (rent_probe: several new boxes at once); Unsupported when
    the arguments do not validate."""
    shared = prepared(module)
    params, spec = validated(shared["options"], shared["subspecs"], args)
    request = json.dumps({"module": COLLECTION + ".plugins.modules." + module, "params": params, "spec": spec,
                          "checked": [canonical(sub) for sub in shared["subspecs"].values()],
                          "check_mode": bool(check_mode)})
    return program(shared, request)


def checked(spec, values, **constraints):
    """``values`` validated against ``spec`` (path types left to the host) with its defaults; Unsupported when they
    do not validate, or validate with a warning, or ``spec`` has a no_log option."""
    if any(option.get("no_log") for option in spec.values()):
        raise Unsupported("an option is no_log")
    result = ArgumentSpecValidator(host_side_spec(spec), **constraints).validate(values)
    if result.error_messages or result._warnings or result._deprecations:
        raise Unsupported("the arguments do not validate as they are: the module reports why")
    return result.validated_parameters


def canonical(spec):
    """The same text as module_utils/direct_run.canonical gives the same spec on the host."""
    return json.dumps(spec, sort_keys=True)
