"""The hook a package implements to add commands to ``compactor``.

Command plugins are declared under their own entry-point group, ``progressive_compactor_cli``,
so that the compaction plugins a config selects are never imported just to build the command
line. The built-in ``ab`` group is one::

    [project.entry-points.progressive_compactor_cli]
    my-commands = "my_package.cli"
"""

from __future__ import annotations

from typing import Any

from ..hookspecs import hookspec

GROUP = "progressive_compactor_cli"


@hookspec
def register_commands(cli: Any) -> None:
    """Add commands to the ``compactor`` group with ``cli.add_command(...)``.

    Called once when the command line starts. Broadcast: a plugin that fails to load or to
    register is reported as a warning and the other commands still work. Keep the module's
    imports light (import heavy things inside the commands): every ``compactor`` run loads it.

    :param cli: the root ``click.Group``.
    """
