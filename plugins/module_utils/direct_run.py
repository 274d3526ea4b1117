# -*- coding: utf-8 -*-
# Copyright: remote_gpu.trainer contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Runs one of this collection's direct-run modules on the host without AnsiballZ: the box side of plugin_utils/direct.

Every AnsiballZ module, ping included, starts by compiling ``ansible.module_utils.basic`` and its imports from a zip
(about 0.25 s of the host's CPU per run). A module of this collection whose action is a plugin_utils/direct
DirectAction (patrol's and preflight's probes, launch's writes and start, teardown's manifest and identity check)
needs only a few of AnsibleModule's methods, so its action sends this file instead, as the program the host's Python
reads from stdin (as Ansible pipelines a module), followed by one call: ``main(SOURCES, REQUEST)``.

* SOURCES: base64 of zlib-compressed JSON ``{import name: source}``: the module and the module_utils it imports,
  imported from memory (nothing is written on the host).
* REQUEST: JSON ``{"module": import name, "params": ..., "spec": ..., "checked": [...], "check_mode": bool,
  "diff": bool}``. The controller has validated the parameters against the module's own argument spec, and the
  dict options that the module types itself with ArgumentSpecValidator (its SUBSPECS; ``checked`` are those specs)
  against theirs. Options of type ``path`` are expanded here, on the host, as AnsibleModule does (``~`` is the
  remote user's home): ``spec`` is the argument spec with those SUBSPECS as suboptions.
* The controller puts one line right after this file's ``from __future__`` import: it drops the working directory
  (the remote user's, untrusted) from the import path before anything else is imported, as AnsiballZ does, so that a
  json.py there cannot shadow the standard library.

``ansible.module_utils.basic`` is then a stand-in whose ``AnsibleModule`` is :class:`DirectModule` (see
stand_in_ansible), and the module runs as ``__main__``, unchanged. Its result (or failure) is the one JSON document
it prints, as with AnsiballZ. Standard library only.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import runpy
import subprocess
import sys
import traceback
import types
import zlib

# where AnsibleModule.get_bin_path looks after PATH (ansible.module_utils.common.process)
SBIN_DIRS = ("/sbin", "/usr/sbin", "/usr/local/sbin")


class MemoryImporter(object):
    """Imports the modules of ``sources`` ({import name: source}) from memory; their parents are packages."""

    def __init__(self, sources):
        self.sources = sources
        self.packages = set()
        for name in sources:
            parts = name.split(".")
            self.packages.update(".".join(parts[:end]) for end in range(1, len(parts)))

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in self.sources and fullname not in self.packages:
            return None
        return importlib.util.spec_from_loader(fullname, self, is_package=fullname in self.packages)

    def create_module(self, spec):
        return None

    def is_package(self, fullname):
        return fullname in self.packages

    def get_source(self, fullname):
        """The source as it was sent (without its documentation): detached_job copies the job's library from it."""
        return self.sources.get(fullname, "")

    def get_code(self, fullname):
        filename = fullname.replace(".", "/") + ("/__init__.py" if fullname in self.packages else ".py")
        return compile(self.get_source(fullname), filename, "exec", dont_inherit=True)

    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)  # pylint: disable=exec-used


class DirectModule(object):
    """The part of AnsibleModule that this collection's direct-run modules use, with AnsibleModule's behaviour."""

    params = {}
    check_mode = False
    _diff = False  # the task's --diff, as AnsibleModule keeps it

    def __init__(self, argument_spec=None, supports_check_mode=False, **_constraints):
        self.run_command_environ_update = {}
        if self.check_mode and not supports_check_mode:
            self.exit_json(skipped=True, msg="remote module does not support check mode")

    def get_bin_path(self, arg, required=False, opt_dirs=None):
        """The path of executable ``arg`` (an execute bit set) in ``opt_dirs``, PATH, then the sbin directories; None
        when absent."""
        dirs = list(opt_dirs or []) + os.environ.get("PATH", "").split(os.pathsep) + list(SBIN_DIRS)
        for directory in dirs:
            path = os.path.join(directory, arg)
            if directory and os.path.exists(path) and not os.path.isdir(path) and os.stat(path).st_mode & 0o111:
                return path
        if required:
            self.fail_json(msg="Failed to find required executable \"%s\" in paths: %s" % (arg, os.pathsep.join(dirs)))
        return None

    def run_command(self, args, check_rc=False, environ_update=None):
        """(rc, stdout, stderr) of the argv list ``args``, in AnsibleModule's environment (its
        run_command_environ_update, then ``environ_update``), with stdin from /dev/null."""
        if isinstance(args, (str, bytes)):
            raise TypeError("run_command takes an argv list here, not a command line")
        env = dict(os.environ)
        env.update(self.run_command_environ_update)
        env.update(environ_update or {})
        try:
            # this is the stand-in for AnsibleModule.run_command, which the direct run has no AnsibleModule for
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,  # pylint: disable=ansible-bad-function
                                    env=env, close_fds=True)
            out, err = proc.communicate()
        except OSError as exc:
            self.fail_json(msg=str(exc), rc=exc.errno, cmd=list(args))
        out, err = out.decode("utf-8", "surrogateescape"), err.decode("utf-8", "surrogateescape")
        if check_rc and proc.returncode:
            self.fail_json(msg=err.rstrip(), rc=proc.returncode, stdout=out, stderr=err, cmd=list(args))
        return proc.returncode, out, err

    def exit_json(self, **result):
        end(result, 0)

    def fail_json(self, msg, **result):
        result.update(failed=True, msg=msg)
        end(result, 1)


def end(result, code):
    """Print the module's one JSON document and exit with ``code``."""
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()
    sys.exit(code)  # pylint: disable=ansible-bad-function


def expand_path(value):
    return os.path.expanduser(os.path.expandvars(value))


def expand_paths(spec, params):
    """``params`` with ``~`` and variables expanded in the options of ``spec`` typed ``path`` (and lists of them), in
    suboptions too, as AnsibleModule's type check does."""
    for name, option in spec.items():
        value = params.get(name)
        if value is None:
            continue
        if option.get("type") == "path":
            params[name] = expand_path(value)
        elif option.get("type") == "list" and option.get("elements") == "path":
            params[name] = [expand_path(item) if isinstance(item, str) else item for item in value]
        if option.get("options"):
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict):
                    expand_paths(option["options"], item)
    return params


class TypedValidator(object):
    """Stand-in for ArgumentSpecValidator, for a module that types some dict options itself (its SUBSPECS): the
    controller has typed those values against the same specs, so validate() hands them back as they are. A spec
    the controller did not check is refused: the run stops, it never passes unchecked values on."""

    checked = ()

    def __init__(self, argument_spec, *_args, **_kwargs):
        if canonical(argument_spec) not in self.checked:
            raise RuntimeError("ArgumentSpecValidator on a spec the controller did not check: run this module through "
                               "AnsiballZ (its action's MODULE_OPTIONS or SUBSPECS miss this spec)")

    def validate(self, parameters):
        return types.SimpleNamespace(validated_parameters=dict(parameters), error_messages=[],
                                     errors=types.SimpleNamespace(errors=[]))


class UnsupportedError(Exception):
    """Stand-in for ansible.module_utils.errors.UnsupportedError (TypedValidator never reports one)."""


def canonical(spec):
    """One text for equal argument specs, on both sides (tuples are lists in JSON)."""
    return json.dumps(spec, sort_keys=True)


def stand_in_ansible(checked):
    """``ansible`` and ``ansible.module_utils`` as empty packages, ``ansible.module_utils.basic`` as a module whose
    AnsibleModule is DirectModule and, for the ``checked`` specs (canonical texts), the stand-ins of
    ``ansible.module_utils.common.arg_spec`` and ``ansible.module_utils.errors``. The controller refuses a module
    that imports anything else of ``ansible``."""
    TypedValidator.checked = frozenset(checked)
    modules = {"ansible": {}, "ansible.module_utils": {}, "ansible.module_utils.common": {},
               "ansible.module_utils.basic": {"AnsibleModule": DirectModule},
               "ansible.module_utils.common.arg_spec": {"ArgumentSpecValidator": TypedValidator},
               "ansible.module_utils.errors": {"UnsupportedError": UnsupportedError}}
    for name, attributes in modules.items():
        module = types.ModuleType(name)
        if not attributes:
            module.__path__ = []
        module.__dict__.update(attributes)
        sys.modules[name] = module


def main(sources, request):
    request = json.loads(request)
    module = request["module"]
    try:
        sys.meta_path.insert(0, MemoryImporter(json.loads(zlib.decompress(base64.b64decode(sources)))))
        stand_in_ansible(request["checked"])
        DirectModule.params = expand_paths(request["spec"], request["params"])
        DirectModule.check_mode = bool(request["check_mode"])
        DirectModule._diff = bool(request.get("diff"))  # pylint: disable=protected-access
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    # SystemExit, the module's own end, is not an Exception: it passes through
    except Exception as exc:  # pylint: disable=broad-except
        end({"failed": True, "exception": traceback.format_exc(),
             "msg": "%s stopped on an unexpected %s: %s (a bug: please report it with the exception, shown with -vvv)"
                    % (module.rsplit(".", 1)[-1], type(exc).__name__, exc)}, 1)
    end({"failed": True, "msg": "%s ended without a result" % module.rsplit(".", 1)[-1]}, 1)
