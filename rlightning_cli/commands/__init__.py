"""Core subcommands, one module each."""

from __future__ import annotations

import click


def register_core_commands(cli: click.Group) -> None:
    """Attach the core commands to ``cli`` (idempotent)."""
    from rlightning_cli.commands.config_cmd import config_group
    from rlightning_cli.commands.enjoy_cmd import enjoy_command
    from rlightning_cli.commands.env_client import env_client
    from rlightning_cli.commands.eval_cmd import eval_command
    from rlightning_cli.commands.export_cmd import export_command
    from rlightning_cli.commands.list_plugins import list_plugins
    from rlightning_cli.commands.new_plugin import new_plugin
    from rlightning_cli.commands.plot import plot
    from rlightning_cli.commands.sweep import sweep
    from rlightning_cli.commands.train import train

    for command in (train, eval_command, enjoy_command, export_command, list_plugins, config_group, new_plugin, plot,
                    env_client, sweep):
        if command.name not in cli.commands:
            cli.add_command(command)
