"""``rlightning sweep CONFIG --space SPACE --trials N``: a hyperparameter search, each trial a normal run."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("sweep")
@click.argument("arguments", nargs=-1, metavar="CONFIG [KEY=VALUE]...")
@click.option("--space", "space_file", required=True, type=click.Path(dir_okay=False),
              help="The search space: dotted config keys and their distributions (docs/sweeps.md).")
@click.option("--trials", type=click.IntRange(min=1), required=True,
              help="Finished trials the sweep should hold (a re-run with the same --sweep-dir continues it).")
@click.option("--metric", default="eval/episode_return_mean", show_default=True,
              help="The metric to optimize; a trial's result is its last reported value.")
@click.option("--direction", type=click.Choice(["max", "min"]), default="max", show_default=True)
@click.option("--sweep-dir", type=click.Path(file_okay=False),
              help="Where the study, the trials' run dirs and the summary go (default: sweeps/<config name>).")
@click.option("--seed", type=int, default=None, help="The sampler's seed (default: the config's seed).")
@click.option("--ray", "use_ray", is_flag=True,
              help="Run the trials as Ray Tune trials (also when the config says cluster.mode: ray).")
def sweep(arguments: tuple[str, ...], space_file: str, trials: int, metric: str, direction: str,
          sweep_dir: str | None, seed: int | None, use_ray: bool) -> int:
    """Search hyperparameters of CONFIG (KEY=VALUE overrides apply to every trial).

    Locally: Optuna (TPE sampler, median pruning on the metric, the study in SWEEP_DIR/study.db, so a killed
    sweep resumes). With --ray: Ray Tune with Optuna search. Either way SWEEP_DIR/summary.{csv,md,png} at the end.
    """
    from rlightning_cli.commands.list_plugins import warn_load_failures
    from rlightning_cli.commands.train import setup_logging
    from rlightning_core.config import load_config
    from rlightning_core.plugins import get_plugins
    from rlightning_core.sweep.space import load_space, validate_space
    from rlightning_core.sweep.summary import best_row, write_summary

    if not arguments or ("=" in arguments[0] and not Path(arguments[0]).is_file()):
        raise click.UsageError("Missing argument 'CONFIG'.")
    warn_load_failures(get_plugins())
    config_file, overrides = arguments[0], list(arguments[1:])
    config = load_config(config_file, overrides)
    space = load_space(space_file)
    validate_space(space, config_file, overrides)
    setup_logging(config.logging.level)
    target = Path(sweep_dir) if sweep_dir else Path("sweeps") / config.name
    goal = "maximize" if direction == "max" else "minimize"
    sampler_seed = config.seed if seed is None else seed
    if use_ray or config.cluster.mode == "ray":
        from rlightning_core.sweep.tune import run_tune_sweep

        rows = run_tune_sweep(Path(config_file).resolve(), space, target.resolve(), trials=trials,
                              overrides=overrides, metric=metric, direction=goal, seed=sampler_seed,
                              cluster=config.cluster)
    else:
        from rlightning_core.sweep.local import import_optuna, run_local_sweep

        import_optuna()
        click.echo(f"Sweep directory: {target}", err=True)
        rows = run_local_sweep(config_file, space, target, trials=trials, overrides=overrides, metric=metric,
                               direction=goal, seed=sampler_seed)
    files = write_summary(target, rows, metric=metric, direction=goal)
    best = best_row(rows, goal)
    counts = {s: sum(1 for r in rows if r.status == s) for s in dict.fromkeys(r.status for r in rows)}
    click.echo(f"{len(rows)} trials ({', '.join(f'{n} {s.lower()}' for s, n in counts.items())}); summary: "
               f"{', '.join(str(f) for f in files)}", err=True)
    if best is not None:
        click.echo(f"Best: trial {best.number}, {metric} = {best.value:.4g}: "
                   f"{', '.join(f'{k}={v}' for k, v in best.params.items())} ({best.run_dir})", err=True)
    if any(r.status == "RUNNING" for r in rows):  # a trial's run was stopped by SIGINT/SIGTERM
        click.echo(f"Interrupted; run the same command again to continue the sweep in {target}", err=True)
        return 130
    return 0
