"""A module run without AnsiballZ: the controller's payload (plugin_utils/direct) and the host's runner
(module_utils/direct_run), run for real in a child Python that reads the program from stdin, as a host's does."""

from __future__ import annotations

import ast
import base64
import io
import json
import os
import pathlib
import re
import subprocess
import sys
import zipfile

import pytest

from ansible_collections.remote_gpu.trainer.plugins.plugin_utils import direct

REPO = pathlib.Path(__file__).resolve().parents[4]
VENV_BIN = pathlib.Path(sys.executable).parent
MODULES = direct.COLLECTION + ".plugins.modules."


def run_program(text, cwd, env=None):
    """(exit code, the one JSON document printed) of ``text`` run as a host's Python runs it: from stdin."""
    proc = subprocess.run([sys.executable], input=text, capture_output=True, text=True, cwd=str(cwd),
                          env=dict(os.environ, **(env or {})), timeout=60, check=False)
    lines = proc.stdout.splitlines()
    assert len(lines) == 1, proc.stdout + proc.stderr
    return proc.returncode, json.loads(lines[0])


def request(module, params, spec=None, check_mode=False, checked=(), diff=False):
    return json.dumps({"module": MODULES + module, "params": params, "spec": spec or {}, "checked": list(checked),
                       "check_mode": check_mode, "diff": diff})


def shared_with(sources):
    """prepare()'s shape for hand-made module sources (the runner is the real one)."""
    return {"runner": direct.runner_source(), "sources": direct.pack(sources)}


def ansiballz_files(module):
    """The collection's files inside the AnsiballZ payload that Ansible really builds for ``module``."""
    tmp = pathlib.Path(os.environ.get("TMPDIR", "/tmp"))
    keep = tmp / ("ansiballz-%d" % os.getpid())
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_KEEP_REMOTE_FILES="1",
               ANSIBLE_REMOTE_TMP=str(keep), ANSIBLE_PIPELINING="0")
    subprocess.run([str(VENV_BIN / "ansible"), "localhost", "-c", "local", "-m", "remote_gpu.trainer." + module,
                    "-a", json.dumps({"name": "train"})], env=env, capture_output=True, check=False, timeout=120)
    try:
        text = next(keep.glob("*/AnsiballZ_%s.py" % module)).read_text()
    finally:
        subprocess.run(["rm", "-rf", str(keep)], check=False)
    data = re.search(r"zip_data='([^']*)'", text) or re.search(r'ZIPDATA = """(.*?)"""', text, re.S)
    archive = zipfile.ZipFile(io.BytesIO(base64.b64decode(data.group(1))))
    return {info.filename[:-3].replace("/", ".") for info in archive.infolist()
            if "/remote_gpu/" in info.filename and info.file_size and not info.filename.endswith("__init__.py")}


# the modules whose action is a DirectAction
DIRECT_MODULES = sorted(path.stem for path in (REPO / "plugins" / "action").glob("*.py")
                        if "(DirectAction):" in path.read_text(encoding="utf-8"))


def test_the_direct_run_modules_are_those_the_tests_expect():
    assert DIRECT_MODULES == ["box_identity", "detached_job", "job_status", "preflight_probe", "pull_manifest",
                              "write_files"]


@pytest.mark.parametrize("module", DIRECT_MODULES)
def test_the_sources_sent_are_those_ansiballz_would_send(module):
    # what the runner stands in for: AnsibleModule, and for a module with SUBSPECS the validator that types them
    allowed = (direct.BASIC,) + (direct.TYPING if direct.prepare(module)["subspecs"] else ())
    assert set(direct.module_sources(module, allowed)) == ansiballz_files(module)


def test_a_module_that_needs_more_of_ansible_than_the_runner_stands_in_for_is_refused():
    # preflight_probe types its checks' suboptions itself: allowed only with its SUBSPECS (prepare)
    with pytest.raises(direct.Unsupported, match=r"preflight_probe imports ansible\.module_utils\.common\.arg_spec"):
        direct.module_sources("preflight_probe")
    assert set(direct.prepare("preflight_probe")["subspecs"]) == {"storage", "gpu", "env"}


def without_documentation(source):
    """The program of ``source`` as ast dumps it, its docstrings and DOCUMENTATION, EXAMPLES and RETURN empty."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and ast.get_docstring(node):
            node.body[0].value.value = ""
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") in direct.DOC_NAMES:
            node.value.value = ""
    return ast.dump(tree)


def statement_lines(source):
    return [(type(node).__name__, node.lineno) for node in ast.walk(ast.parse(source)) if isinstance(node, ast.stmt)]


@pytest.mark.parametrize("module", DIRECT_MODULES)
def test_the_host_gets_the_sources_without_their_documentation_each_statement_on_its_line(module):
    sources = direct.module_sources(module, (direct.BASIC,) + direct.TYPING)
    whole = {name: direct.read_source(name) for name in sources}
    whole[direct.RUNNER], sources[direct.RUNNER] = direct.read_source(direct.RUNNER), direct.lean(
        direct.read_source(direct.RUNNER))
    for name, source in sources.items():
        assert source != whole[name], name
        # the same program, but for the documentation; each statement on its line, no line of only a comment
        assert without_documentation(source) == without_documentation(whole[name]), name
        assert statement_lines(source) == statement_lines(whole[name]), name
        assert source.count("\n") == whole[name].count("\n"), name
        assert not re.search(r"^[ \t]*#", source, re.M), name
    assert "DOCUMENTATION = \"\"" in sources[MODULES + module]
    # what goes to the host at every run: 30% smaller at least (about 40%)
    assert len(direct.pack(sources)) < 0.7 * len(direct.pack(whole))


def test_lean_keeps_code_strings_and_lines_and_leaves_what_it_cannot_read():
    source = ('#!/usr/bin/python\n# -*- coding: utf-8 -*-\n"""The module,\n\nover lines."""\n'
              'from __future__ import annotations\nDOCUMENTATION = r\'\'\'\nmodule: x\n\'\'\'\n'
              'HASH = "#not a comment"  # a comment\nSCRIPT = """set -e\n# a line of the script\n"""\n'
              'class A:\n    """Doc."""\n\n    # a comment\n\n'
              'def f():\n    """Only a docstring."""\n\n\ndef g():\n    x = ("a"\n         # one\n         "b")\n'
              '    return x, "\\u00e9t\u00e9"\n')
    leaner = direct.lean(source)
    assert leaner == ('\n\n""\n\n\nfrom __future__ import annotations\nDOCUMENTATION = ""\n\n\n'
                      'HASH = "#not a comment"  # a comment\nSCRIPT = """set -e\n# a line of the script\n"""\n'
                      'class A:\n    ""\n\n\n\n'
                      'def f():\n    ""\n\n\ndef g():\n    x = ("a"\n         # one\n         "b")\n'
                      '    return x, "\\u00e9t\u00e9"\n')
    namespace = {}
    exec(compile(leaner, "lean", "exec"), namespace)  # pylint: disable=exec-used
    assert namespace["SCRIPT"] == "set -e\n# a line of the script\n"
    assert namespace["HASH"] == "#not a comment" and namespace["g"]() == ("ab", "\u00e9t\u00e9")
    assert direct.lean("def broken(:\n    # kept\n") == "def broken(:\n    # kept\n"


def test_lean_keeps_what_the_program_reads_of_its_documentation():
    reads_doc = '"""Usage: probe."""\nimport sys\n\n\ndef main():\n    """Main."""\n    sys.stdout.write(__doc__)\n'
    assert direct.lean(reads_doc) == reads_doc
    # DOCUMENTATION is read; RETURN is read too (in f, which lean does not tell from the module's); EXAMPLES is not
    reads_spec = ('import yaml\nDOCUMENTATION = """\noptions: {}\n"""\nEXAMPLES = """\n- x: 1\n"""\n'
                  'RETURN = """\nx: 1\n"""\nSPEC = yaml.safe_load(DOCUMENTATION)\n\n\n'
                  'def f():\n    RETURN = "kept"\n    return RETURN\n')
    assert direct.lean(reads_spec) == reads_spec.replace('EXAMPLES = """\n- x: 1\n"""', 'EXAMPLES = ""\n\n')


def test_a_traceback_from_the_host_names_the_line_of_the_collection_s_file(tmp_path):
    body = ('"""A module\nwith a docstring\nof three lines."""\n# a comment\n\n\n'
            'def main():\n    """It fails."""\n    {}["missing"]  # line 9\n\n\nmain()\n')
    sources = {MODULES + "boom": direct.lean(body)}
    code, result = run_program(direct.program(shared_with(sources), request("boom", {})), tmp_path)
    assert code == 1 and re.search(r'line 9, in main\b', result["exception"]), result["exception"]


def test_imports_reads_plain_aliased_and_parenthesised_imports():
    source = ("import os\nimport json as j\nfrom ansible.module_utils.basic import AnsibleModule\n"
              "from %s import (\n    cgroup,  # the OOM counters\n    jobs as j2,\n)\n"
              "from %s.findings import worst\n" % (direct.MODULE_UTILS, direct.MODULE_UTILS))
    assert direct.imports(source) == ["os", "json", "ansible.module_utils.basic", direct.MODULE_UTILS + ".cgroup",
                                      direct.MODULE_UTILS + ".jobs", direct.MODULE_UTILS + ".findings"]


def test_host_side_spec_leaves_paths_to_the_host_and_the_spec_untouched():
    spec = {"log_path": {"type": "path"}, "paths": {"type": "list", "elements": "path"},
            "jobs": {"type": "list", "elements": "dict", "options": {"log_path": {"type": "path"}}}}
    original = json.dumps(spec, sort_keys=True)
    host = direct.host_side_spec(spec)
    assert host["log_path"]["type"] == "str" and host["paths"]["elements"] == "str"
    assert host["jobs"]["options"]["log_path"]["type"] == "str"
    assert json.dumps(spec, sort_keys=True) == original


def test_job_status_runs_from_stdin_and_expands_paths_as_the_remote_user(tmp_path):
    home = tmp_path / "home"
    (home / "data").mkdir(parents=True)
    shared = direct.prepare("job_status")
    params = {"name": "train", "log_path": None, "queue_length": 0, "queue_record": None, "jobs": None,
              "run_dir": str(tmp_path / "jobs"),
              "progress_regex": None, "stale_minutes": 30, "hung_minutes": 60, "tail_lines": 20, "scan_timeout": 30,
              "paths": ["~/data"], "warn_pct": 85, "fail_pct": 95, "gpu": False, "timeout": 15, "kernel_log": "auto",
              "cgroup_root": "/sys/fs/cgroup", "fail_on": "never"}
    params["progress_regex"] = shared["options"]["argument_spec"]["progress_regex"]["default"]
    code, result = run_program(direct.program(shared, request("job_status", params,
                                                              shared["options"]["argument_spec"])),
                               tmp_path, {"HOME": str(home)})
    assert code == 0, result
    assert result["paths"][0]["path"] == str(home / "data")
    assert [f["code"] for f in result["findings"]] == ["job_missing"]
    assert result["jobs"][0]["job_dir"] == str(tmp_path / "jobs" / "train")


def test_a_json_module_in_the_remote_working_directory_is_never_imported(tmp_path):
    (tmp_path / "json.py").write_text("raise SystemExit('the working directory was on the import path')\n")
    (tmp_path / "zlib.py").write_text("raise SystemExit('the working directory was on the import path')\n")
    sources = {MODULES + "hello": "from ansible.module_utils.basic import AnsibleModule\n"
                                  "AnsibleModule(argument_spec={}).exit_json(changed=False, said='hello')\n"}
    code, result = run_program(direct.program(shared_with(sources), request("hello", {})), tmp_path)
    assert (code, result) == (0, {"changed": False, "said": "hello"})


def test_a_bug_in_the_module_is_a_failed_result_with_the_exception_apart(tmp_path):
    sources = {MODULES + "boom": "def main():\n    {}['missing']\n\nmain()\n"}
    code, result = run_program(direct.program(shared_with(sources), request("boom", {})), tmp_path)
    assert code == 1 and result["failed"]
    assert result["msg"].startswith("boom stopped on an unexpected KeyError: 'missing' (a bug")
    assert "Traceback" not in result["msg"] and "KeyError" in result["exception"]


def test_ansiblemodule_stand_in_fails_exits_and_finds_binaries_as_ansiblemodule_does(tmp_path):
    tools = tmp_path / "bin"
    tools.mkdir()
    (tools / "tool").write_text("#!/bin/sh\necho \"$LC_ALL $EXTRA\"; cat\n")
    (tools / "tool").chmod(0o755)
    (tools / "plain").write_text("not executable\n")
    body = ("from ansible.module_utils.basic import AnsibleModule\n"
            "m = AnsibleModule(argument_spec={}, supports_check_mode=True)\n"
            "m.run_command_environ_update = {'LC_ALL': 'C'}\n"
            "rc, out, err = m.run_command([m.get_bin_path('tool'), 'x'], environ_update={'EXTRA': 'e'})\n"
            "if m.get_bin_path('plain') or m.get_bin_path('absent'):\n    m.fail_json(msg='found too much')\n"
            "if m.params['required']:\n    m.get_bin_path('absent', required=True)\n"
            "m.exit_json(rc=rc, out=out, check_mode=m.check_mode)\n")
    shared = shared_with({MODULES + "tools": body})
    env = {"PATH": "%s:%s" % (tools, os.environ["PATH"])}
    code, result = run_program(direct.program(shared, request("tools", {"required": False}, check_mode=True)),
                               tmp_path, env)
    # stdin of a command is /dev/null: the program's own stdin is not handed on
    assert (code, result) == (0, {"rc": 0, "out": "C e\n", "check_mode": True})
    code, result = run_program(direct.program(shared, request("tools", {"required": True})), tmp_path, env)
    assert code == 1 and result["failed"] and result["msg"].startswith('Failed to find required executable "absent"')


def test_the_stand_in_keeps_the_diff_flag_and_the_loader_gives_the_sources_it_was_sent(tmp_path):
    # write_files reads module._diff; detached_job copies the job's library from its modules' loader (get_source)
    helper = "# a comment\nVALUE = 1\n"
    body = ("import importlib\n"
            "from ansible.module_utils.basic import AnsibleModule\n"
            "from ansible_collections.remote_gpu.trainer.plugins.module_utils import helper\n"
            "m = AnsibleModule(argument_spec={}, supports_check_mode=True)\n"
            "m.exit_json(diff=m._diff, source=helper.__loader__.get_source(helper.__name__), value=helper.VALUE)\n")
    shared = shared_with({MODULES + "differ": body, direct.MODULE_UTILS + ".helper": helper})
    for diff in (True, False):
        code, result = run_program(direct.program(shared, request("differ", {}, diff=diff)), tmp_path)
        assert (code, result) == (0, {"diff": diff, "source": helper, "value": 1})


def test_a_module_without_check_mode_support_is_skipped_in_check_mode(tmp_path):
    body = ("from ansible.module_utils.basic import AnsibleModule\n"
            "AnsibleModule(argument_spec={}).exit_json(changed=True)\n")
    code, result = run_program(direct.program(shared_with({MODULES + "writer": body}),
                                              request("writer", {}, check_mode=True)), tmp_path)
    assert code == 0 and result["skipped"] and "check mode" in result["msg"]


def test_a_module_typing_a_spec_the_controller_did_not_check_stops_and_says_so(tmp_path):
    spec = {"count": {"type": "int", "default": 1}}
    body = ("from ansible.module_utils.basic import AnsibleModule\n"
            "from ansible.module_utils.common.arg_spec import ArgumentSpecValidator\n"
            "m = AnsibleModule(argument_spec={})\n"
            "checked = ArgumentSpecValidator(%r).validate(m.params['section'])\n"
            "m.exit_json(section=checked.validated_parameters, errors=checked.errors.errors)\n" % spec)
    shared = shared_with({MODULES + "typed": body})
    typed = {"section": {"count": 3}}
    code, result = run_program(direct.program(shared, request("typed", typed, checked=[direct.canonical(spec)])),
                               tmp_path)
    assert (code, result) == (0, {"section": {"count": 3}, "errors": []})
    code, result = run_program(direct.program(shared, request("typed", typed)), tmp_path)
    assert code == 1 and "ArgumentSpecValidator on a spec the controller did not check" in result["msg"]
