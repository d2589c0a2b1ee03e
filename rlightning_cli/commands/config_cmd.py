"""``rlightning config show|validate``: the resolved config, or whether it is valid."""

from __future__ import annotations

import click

from rlightning_core.config import config_to_yaml, load_config


@click.group("config")
def config_group() -> None:
    """Inspect and check configuration files."""


@config_group.command("show")
@click.argument("config_file", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def show(config_file: str, overrides: tuple[str, ...]) -> None:
    """Print CONFIG, with overrides applied and every default filled in, as YAML."""
    click.echo(config_to_yaml(load_config(config_file, overrides)), nl=False)


@config_group.command("validate")
@click.argument("config_file", metavar="CONFIG", type=click.Path(dir_okay=False))
@click.argument("overrides", nargs=-1, metavar="[KEY=VALUE]...")
def validate(config_file: str, overrides: tuple[str, ...]) -> None:
    """Check CONFIG (types, keys, component names, plugin params) without running anything."""
    from rlightning_core.config import component_slots
    from rlightning_core.plugins import get_plugins

    cfg = load_config(config_file, overrides)
    registry = get_plugins().registry
    click.echo(f"{config_file}: valid")
    for path, kind, comp in component_slots(cfg):
        spec = registry.resolve(kind, comp.type)
        click.echo(f"  {path}: {kind} {spec.name!r} from {spec.distribution} {spec.version}")
