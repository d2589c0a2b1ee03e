"""``rlightning eval PATH``: mean and std of the episode return of a trained policy."""

from __future__ import annotations

import click


@click.command("eval")
@click.argument("path", metavar="RUN_DIR_OR_CHECKPOINT", type=click.Path(exists=True))
@click.option("--episodes", "-n", type=click.IntRange(min=1), default=10, show_default=True,
              help="Episodes per env config.")
@click.option("--seed", type=int, default=None, help="Seed of the evaluation envs (default: the run's).")
@click.option("--best", is_flag=True, help="Use the best-by-eval checkpoint instead of the latest.")
@click.option("--video", type=click.Path(file_okay=False), default=None,
              help="Also record the episodes as MP4 files into this directory (needs moviepy).")
def eval_command(path: str, episodes: int, seed: int | None, best: bool, video: str | None) -> int:
    """Evaluate the policy of a run directory or checkpoint with deterministic actions."""
    from rlightning_cli.commands.train import setup_logging
    from rlightning_core.evaluate import evaluate_checkpoint

    setup_logging("WARNING")  # e.g. the newer checkpoints that were refused, one line each
    result = evaluate_checkpoint(path, episodes=episodes, seed=seed, best=best, video_dir=video)
    click.echo(f"checkpoint: {result['checkpoint']}")
    click.echo(f"episodes: {result['episodes']}")
    click.echo(f"return: mean {result['mean']:.2f} std {result['std']:.2f}")
    if video:
        click.echo(f"videos: {video}")
    return 0
