"""Harness of the hostile-input sweep (see conftest.py): run a module's main() or an action's run() under a
deadline, classify the outcome, and assert the case's expectation."""

from __future__ import annotations

import inspect
import json
import signal
import subprocess
import traceback

from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args
from ansible.plugins.action import ActionBase

OUTCOMES = ("error", "refused", "ok")


# The processes the cases started (hostile.start); conftest.py ends them, by PID, after each test.
STARTED = []


def start(argv, **popen_args):
    """Start a helper process for a case (a bystander, a holder of a file) and remember it to end it later."""
    proc = subprocess.Popen(argv, **popen_args)  # pylint: disable=consider-using-with
    STARTED.append(proc)
    return proc


def end_started():
    while STARTED:
        proc = STARTED.pop()
        proc.kill()
        proc.wait()


class Hang(Exception):
    """The case ran past its timeout."""


class Case(object):
    """One hostile input.

    ``target``: a module (its ``main()`` is run), an action plugin class (its ``run()`` is run, through
    ``tests/unit/plugins/action/controller_actions.py``), or a function ``(args) -> result dict`` for a reader that
    runs on the box outside any module (the job's own scripts: launch.py's command line). ``args``: the task's arguments, or a function of the test's
    ``tmp_path`` that builds the hostile files and returns them. ``expect``: one of OUTCOMES. ``fragment``: what the
    message must contain (for ``error``). ``check``: a function ``(result, tmp_path)`` asserting that nothing unsafe
    happened (``refused``) or that the files are right (``ok``); it asserts, or returns False to fail the case.
    ``timeout``: seconds before the case counts as a hang.
    """

    def __init__(self, name, target, args, expect, fragment=None, check=None, timeout=20, task_vars=None):
        if expect not in OUTCOMES:
            raise ValueError("expect must be one of %s" % (OUTCOMES,))
        if expect == "error" and not fragment:
            raise ValueError("an error case names the fragment its message must contain")
        self.name, self.target, self.args, self.expect = name, target, args, expect
        self.fragment, self.check, self.timeout, self.task_vars = fragment, check, timeout, task_vars

    def __str__(self):
        return self.name


def _alarm(_signum, _frame):
    raise Hang()


def _run_module(module, args, capsys):
    with patch_module_args(args):
        try:
            module.main()
        except SystemExit:
            pass
    return json.loads(capsys.readouterr().out)


def _run_action(action_class, args, task_vars):
    # imported here: the harness of the unit tests of the actions is shared, not copied
    from controller_actions import run_action  # pylint: disable=import-outside-toplevel,import-error
    variables = dict(task_vars or {})
    host = variables.pop("inventory_hostname", "box1")
    try:
        return run_action(action_class, args, host=host, task_vars=variables)
    except AnsibleActionFail as exc:
        # what Ansible's task executor makes of it: a failed task with the message, not a traceback
        return dict(exc.result, failed=True, msg=exc.message)


def execute(case, capsys, tmp_path):
    """Run ``case`` -> (outcome, result): outcome is failed/ok, or ``traceback``/``hang`` with the details."""
    args = case.args(tmp_path) if callable(case.args) else dict(case.args)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(case.timeout)
    try:
        if isinstance(case.target, type) and issubclass(case.target, ActionBase):
            result = _run_action(case.target, args, case.task_vars)
        elif inspect.isfunction(case.target):
            result = case.target(args)
        else:
            result = _run_module(case.target, args, capsys)
    except Hang:
        return "hang", {"msg": "no answer within %d s" % case.timeout}
    except Exception:  # pylint: disable=broad-except
        return "traceback", {"msg": traceback.format_exc()}
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return ("failed" if result.get("failed") else "ok"), result


def run_case(case, capsys, tmp_path):
    outcome, result = execute(case, capsys, tmp_path)
    assert outcome not in ("traceback", "hang"), "%s: %s\n%s" % (case, outcome, result.get("msg"))
    if case.expect == "ok":
        assert outcome == "ok", "%s: expected success, got: %s" % (case, result.get("msg"))
    else:
        assert outcome == "failed", "%s: expected a failure, got success: %s" % (case, result.get("msg"))
        message = str(result.get("msg") or "")
        assert message.strip(), "%s: failed without a message" % case
        assert "Traceback" not in message, "%s: the message is a traceback: %s" % (case, message)
        if case.fragment:
            assert case.fragment in message, "%s: %r not in the message: %s" % (case, case.fragment, message)
    if case.check:
        # a check asserts, or returns a truth value: False fails the case either way
        assert case.check(result, tmp_path) is not False, "%s: its check failed: %s" % (case, result.get("msg"))
    return result
