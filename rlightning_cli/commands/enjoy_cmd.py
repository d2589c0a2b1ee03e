"""``rlightning enjoy RUN_DIR``: watch a trained policy play, on screen or into an MP4, with each return."""

from __future__ import annotations

import click


@click.command("enjoy")
@click.argument("path", metavar="RUN_DIR_OR_CHECKPOINT", type=click.Path(exists=True))
@click.option("--episodes", "-n", type=click.IntRange(min=1), default=1, show_default=True,
              help="Episodes to play, one after the other.")
@click.option("--video", type=click.Path(dir_okay=False), default=None,
              help="Write the episodes into this MP4 file instead of opening a window (needs moviepy). "
                   "Without a display the default is RUN_DIR/videos/enjoy.mp4.")
@click.option("--best", is_flag=True, help="Use the best-by-eval checkpoint instead of the latest.")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="Episode i resets the env with SEED + i (default: the run's seed).")
@click.option("--deterministic/--stochastic", default=True, show_default=True,
              help="Take the policy's mode, or sample actions (torch seeded with SEED).")
def enjoy_command(path: str, episodes: int, video: str | None, best: bool, seed: int | None,
                  deterministic: bool) -> int:
    """Run the trained policy with rendering and print each episode's return."""
    from rlightning_cli.commands.train import setup_logging
    from rlightning_core.enjoy import enjoy

    setup_logging("WARNING")

    def report(index: int, ret: float, length: int) -> None:
        click.echo(f"episode {index}: return {ret:.2f} length {length}")

    result = enjoy(path, episodes=episodes, video=video, best=best, seed=seed, deterministic=deterministic,
                   on_episode=report)
    mean = sum(result.returns) / len(result.returns)
    click.echo(f"mean return: {mean:.2f} over {len(result.returns)} episodes")
    click.echo(f"checkpoint: {result.checkpoint}")
    if result.video is not None:
        click.echo(f"video: {result.video} ({result.frames} frames)")
    return 0
