"""``rlightning train CONFIG``: train until a stop rule fires; ``--dry-run`` prints the plan instead."""

from __future__ import annotations

import logging
import sys
from typing import Any

import click


def setup_logging(level: str) -> None:
    """Rlightning's own messages to stderr, one line each."""
    logger = logging.getLogger("rlightning")
    if not logger.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[rlightning] %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def describe_plan(config: Any, config_file: str, run_dir: str | None) -> list[str]:
    """The plan ``--dry-run`` prints: :func:`rlightning_core.plan.describe_plan`, the one the run logs at start.

    The weight sync is decided as the run will (measuring the policy's weights where ``weight_sync: auto``
    depends on their size).
    """
    from rlightning_core.plan import describe_plan as plan_lines
    from rlightning_core.plan import dry_run_sync

    return plan_lines(config, source=config_file, run_dir=run_dir, sync=dry_run_sync(config))


@click.command("train")
@click.argument("arguments", nargs=-1, metavar="[CONFIG] [KEY=VALUE]...")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Write the run here (default: runs/...).")
@click.option("--resume", "resume", type=click.Path(exists=True), metavar="RUN_DIR",
              help="Continue the run in RUN_DIR (or from a checkpoint file) where it stopped; its saved config is "
                   "used when no CONFIG is given.")
@click.option("--dry-run", is_flag=True, help="Resolve everything and print the plan without training.")
def train(arguments: tuple[str, ...], run_dir: str | None, resume: str | None, dry_run: bool) -> int:
    """Train with CONFIG (YAML/TOML/JSON), overridden by KEY=VALUE pairs such as policy.params.lr=1e-3.

    With --resume RUN_DIR, CONFIG may be left out: the run's saved config (RUN_DIR/config.yaml) is used, and
    KEY=VALUE pairs apply on top of it (e.g. engine.total_steps=8192 to train longer).
    """
    from rlightning_cli.commands.list_plugins import warn_load_failures
    from rlightning_core.plugins import get_plugins
    from rlightning_core.training import resolve_config, resolve_run_dir
    from rlightning_core.training import train as run_training

    warn_load_failures(get_plugins())
    config_file, overrides = _split_arguments(arguments)
    if config_file is None and resume is None:
        raise click.UsageError("Missing argument 'CONFIG' (it may be left out only with --resume RUN_DIR).")
    config, source = resolve_config(config_file, overrides, resume_from=resume)
    if dry_run:
        planned = str(resolve_run_dir(config, run_dir, resume_from=resume)) if run_dir or resume else None
        click.echo("\n".join(describe_plan(config, source, planned)))
        return 0
    setup_logging(config.logging.level)
    target = resolve_run_dir(config, run_dir, resume_from=resume)
    click.echo(f"Run directory: {target}", err=True)
    result = run_training(config, target, resume_from=resume)  # the library's train(): one code path
    ev = f", last eval return {result.last_eval_return:.4g}" if result.last_eval_return is not None else ""
    if result.stop_signal:  # exit code 128 + signal number, as a shell reports a process a signal stopped
        import signal

        click.echo(f"Stopped by {result.stop_signal} after {result.iterations} iterations, {result.env_steps} env "
                   f"steps; final checkpoint written. Resume with --resume {result.run_dir}", err=True)
        return 128 + int(signal.Signals[result.stop_signal])
    why = f"callback: {result.stop_message}" if result.stop_reason == "callback" else result.stop_reason
    click.echo(f"Stopped ({why}) after {result.iterations} iterations, {result.env_steps} env "
               f"steps, {result.train_s:.1f}s of training{ev}. Run directory: {result.run_dir}", err=True)
    return 130 if result.stop_reason == "interrupted" else 0


def _split_arguments(arguments: tuple[str, ...]) -> tuple[str | None, list[str]]:
    """``(CONFIG or None, overrides)``: the first argument is CONFIG unless it reads as an override.

    An override has ``=`` in it; a config file may too, so one that exists is still CONFIG. Anything after the
    first argument is an override (``load_config`` reports one without ``=``).
    """
    from pathlib import Path

    if not arguments:
        return None, []
    first, rest = arguments[0], list(arguments[1:])
    if "=" in first and not Path(first).is_file():
        return None, [first, *rest]
    return first, rest
