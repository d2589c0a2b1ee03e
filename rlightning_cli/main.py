"""The root ``rlightning`` group, plugin-provided commands, and the error boundary.

Failures map to exit codes: 0 success, 2 user error (bad config, unknown plugin, bad arguments), 1 unexpected.

Nothing imported here may pull in torch or ray: ``--help``, ``list-plugins`` and ``config validate`` must stay
fast. Commands that train import the runtime inside their bodies.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Sequence

import click

from rlightning_core._version import PLUGIN_API_VERSION, __version__
from rlightning_core.errors import PluginLoadError, RlightningError, UserError


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    from rlightning_core.plugins import get_plugins

    click.echo(f"rlightning {__version__} (plugin API {PLUGIN_API_VERSION}, Python {sys.version.split()[0]})")
    for p in get_plugins().plugins:
        state = "" if p.status == "loaded" else f" [{p.status}]"
        click.echo(f"  {p.name}: {p.distribution} {p.version}{state}")
    ctx.exit(0)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the loaded plugins, then exit.")
def cli() -> None:
    """rlightning: reinforcement learning where every moving part is a plugin.

    Train with `rlightning train CONFIG`, see what is installed with `rlightning list-plugins`,
    check a config with `rlightning config validate CONFIG`.
    """


def build_cli() -> click.Group:
    """The root group with core commands and every plugin's ``register_commands`` additions."""
    from rlightning_cli.commands import register_core_commands

    register_core_commands(cli)
    try:
        from rlightning_core.plugins import get_plugins

        plugins = get_plugins()
    except PluginLoadError:
        return cli  # reported when a command needs the plugins

    def report(plugin: str, exc: BaseException) -> None:
        click.echo(f"warning: plugin {plugin!r} failed to add its commands: {exc}", err=True)

    plugins.call_each("register_commands", on_error=report, cli=cli)
    return cli


def _culprit(exc: BaseException) -> str | None:
    """The plugin component ``exc`` came from, if any (see :mod:`rlightning_core.provenance`)."""
    from rlightning_core.provenance import culprit

    try:
        return culprit(exc)
    except Exception:  # naming the culprit must never hide the error itself
        return None


def _remote_cause(exc: BaseException) -> BaseException:
    """The user error itself when ``exc`` carries one raised in a Ray actor, else ``exc``.

    Ray re-raises an actor's exception as a ``RayTaskError`` that is also an instance of the original type and
    keeps it in its ``cause`` field; its message is the remote traceback, which a user error does not show.
    """
    cause = getattr(exc, "cause", None)
    return cause if isinstance(cause, UserError) else exc


def main(argv: Sequence[str] | None = None) -> None:
    """Console-script entry point."""
    try:
        group = build_cli()
        rv = group.main(args=list(argv) if argv is not None else None, prog_name="rlightning",
                        standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:  # bad arguments: click's own message, exit 2
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("Aborted.", err=True)
        sys.exit(130)
    except (UserError, PluginLoadError) as exc:
        click.echo(f"Error: {_remote_cause(exc)}", err=True)
        sys.exit(2)
    except RlightningError as exc:  # a run failed for a reason that is not a bug (e.g. a worker died)
        click.echo(f"Error: {exc}", err=True)
        where = _culprit(exc)
        if where:
            click.echo(f"  (raised in {where})", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        sys.exit(130)
    except Exception as exc:
        traceback.print_exc()
        where = _culprit(exc)
        if where:
            click.echo(f"\nrlightning hit an unexpected error in {where}; the traceback is above.", err=True)
        else:
            click.echo("\nrlightning hit an unexpected error (a bug, or a plugin's); the traceback is above.",
                       err=True)
        sys.exit(1)
    sys.exit(rv if isinstance(rv, int) else 0)
