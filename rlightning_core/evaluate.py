"""Evaluate a saved policy: rebuild it from a checkpoint (config included) and run deterministic episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlightning_core.video import Mp4Writer, require_moviepy, video_fps

__all__ = ["evaluate_checkpoint"]


def evaluate_checkpoint(path: str | Path, *, episodes: int = 10, seed: int | None = None, best: bool = False,
                        video_dir: str | Path | None = None, obs_preprocessor: Any = None,
                        reward_preprocessor: Any = None, preprocess_fn: Any = None) -> dict[str, Any]:
    """Mean/std return of the policy in ``path`` (run dir, checkpoints dir or checkpoint file).

    The config saved in the checkpoint's manifest rebuilds envs, policy and preprocessors; evaluation envs
    are seeded from ``seed`` (default: the run's seed), so repeated calls give the same numbers. A directory
    is evaluated from its newest checkpoint that fully loads (every CRC, the payload's structure); newer files
    that do not are reported, one warning each, and left where they are (evaluating changes nothing in the
    run directory; the next resume moves them aside).

    A run assembled with the builders may have used what no config holds; pass the same here:
    ``obs_preprocessor`` / ``reward_preprocessor`` (``build_data_buffer``'s: their saved statistics are loaded
    into them) and ``preprocess_fn`` (``build_env_group``'s). The manifest lists them, so a checkpoint that
    needs them and does not get them is refused (the policy would be evaluated on other inputs than it
    learned on).

    Raises:
        UserError: no checkpoint there, or it needs ``preprocessors`` / ``preprocess_fn`` that were not passed.
    """
    from rlightning_core.engine.evaluation import Evaluator
    from rlightning_core.plugins import get_plugins
    from rlightning_core.saved_run import read_saved_run

    if video_dir is not None:
        require_moviepy("--video")
    saved = read_saved_run(path, best=best, purpose="evaluating", obs_preprocessor=obs_preprocessor,
                           reward_preprocessor=reward_preprocessor, preprocess_fn=preprocess_fn,
                           caller="rlightning_core.evaluate.evaluate_checkpoint")
    file, config = saved.file, saved.config
    plugins = get_plugins()
    run_seed = config.seed if seed is None else seed

    render_mode = "rgb_array" if video_dir is not None else None
    probe = Evaluator(config.env, policy=None, episodes=episodes, seed=run_seed,  # type: ignore[arg-type]
                      registry=plugins.registry, render_mode=render_mode, preprocess_fn=preprocess_fn)
    space = probe.group.observation_space
    policy = saved.build_policy(space, probe.group.action_space)
    preprocessors = saved.build_preprocessors(space, num_envs=episodes, registry=plugins.registry)
    probe.policy, probe.preprocessors = policy, preprocessors
    writers: dict[int, Mp4Writer] = {}
    if video_dir is not None:  # one MP4 per env: its first episode (the one evaluated), streamed as rendered
        fps = video_fps(probe.group.workers[0])

        def sink(env_index: int, frame: Any) -> None:
            if env_index not in writers:
                writers[env_index] = Mp4Writer(Path(video_dir) / f"eval-env{env_index}-episode-0.mp4", fps)
            writers[env_index].write(frame)

        probe.frame_sink = sink
    try:
        metrics = probe.evaluate()
    finally:
        for writer in writers.values():
            writer.close()
        probe.close()
    returns_std = metrics["eval/episode_return_std"]
    return {"checkpoint": str(file), "episodes": episodes * len(config.env),
            "mean": metrics["eval/episode_return_mean"], "std": returns_std, "metrics": metrics}

