"""Run a controller action plugin's ``run()`` without a play: a mocked task, connection, play context, loader and
templar, as Ansible's own unit tests of action plugins do.

``make_action(ActionModule, args, check_mode=False, transport="local")`` builds the plugin; ``run_action`` also
passes the task variables (``inventory_hostname``). The connection's ``get_option`` answers from ``options``.
"""

from __future__ import annotations

from unittest.mock import MagicMock


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
