"""Run a controller action plugin's ``run()`` without a play: a mocked task, connection, play context, loader and
templar, as Ansible's own unit tests of action plugins do.

``make_action(ActionModule, args, check_mode=False, transport="local")`` builds the plugin; ``run_action`` also
passes the task variables (``inventory_hostname``). The connection's ``get_option`` answers from ``options``.
"""

from __future__ import annotations

from unittest.mock import MagicMock

from ansible.errors import AnsibleUndefinedVariable


def make_connection(transport="local", options=None):
    connection = MagicMock()
    connection.transport = transport
    connection._shell.tmpdir = None  # pylint: disable=protected-access
    connection.get_option.side_effect = dict(options or {}).get
    return connection


def make_action(action_class, args, check_mode=False, connection=None, name="remote_gpu.trainer.action"):
    task = MagicMock()
    task.args = dict(args)
    task.async_val = 0
    task.check_mode = check_mode
    task.action = name
    action = action_class(task=task, connection=connection or make_connection(), play_context=MagicMock(),
                          loader=MagicMock(), templar=MagicMock(), shared_loader_obj=None)
    action._load_name = name  # pylint: disable=protected-access
    return action


def run_action(action_class, args, host="box1", check_mode=False, connection=None, task_vars=None):
    """``run()`` of a fresh ``action_class`` for ``host``; returns its result dict."""
    variables = {"inventory_hostname": host}
    variables.update(task_vars or {})
    action = make_action(action_class, args, check_mode=check_mode, connection=connection)
    return action.run(task_vars=variables)


# A variable that does not resolve, as a host's raw variable holds it
UNDEFINED = "{{ nosuchvar }}"


class FakeHostVars:
    """hostvars.raw_get as Ansible's HostVars answers it: the host's variables, or a non-mapping for an unknown host."""

    def __init__(self, hosts):
        self.hosts = hosts
        self.asked = []

    def raw_get(self, host):
        self.asked.append(host)
        return self.hosts.get(host, "undefined")


def templar():
    """A templar whose template() returns the value, and raises for UNDEFINED, as an undefined variable does."""
    def template(value):
        if value == UNDEFINED:
            raise AnsibleUndefinedVariable("'nosuchvar' is undefined")
        return value
    engine = MagicMock()
    engine.copy_with_new_env.return_value.template.side_effect = template
    engine.template.side_effect = template
    return engine
