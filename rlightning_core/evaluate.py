"""Evaluate a saved policy: rebuild it from a checkpoint (config included) and run deterministic episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlightning_core.errors import UserError
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
    from rlightning_core.builders import build_policy_group
    from rlightning_core.checkpoint.manager import (
        CheckpointManager,
        checkpoint_directory,
        load_checkpoint,
        load_newest,
        to_numpy_tree,
    )
    from rlightning_core.config.loading import load_config_dict
    from rlightning_core.engine.evaluation import Evaluator
    from rlightning_core.plugins import get_plugins

    if video_dir is not None:
        require_moviepy("--video")
    path = Path(path)
    if best:
        directory = checkpoint_directory(path) if path.is_dir() else path.parent
        file = CheckpointManager(directory).best()
        if file is None:
            raise UserError(f"no best-by-eval checkpoint recorded in {directory}")
        state, manifest = load_checkpoint(file)
    else:
        loaded = load_newest(path)
        loaded.report_refused("evaluating", move_aside=False)
        file, state, manifest = loaded.path, loaded.state, loaded.manifest
    if "config_yaml" not in manifest:
        raise UserError(f"{file}: the checkpoint carries no config (written by an older rlightning?)")
    from rlightning_core.config.removed import upgrade_saved_config

    config = load_config_dict(upgrade_saved_config(yaml.safe_load(manifest["config_yaml"])),
                              source=f"{file} (saved config)")
    state["preprocessors"] = to_numpy_tree(state["preprocessors"])
    from rlightning_core.preprocess.functions import as_preprocessor

    given = [p for p in (as_preprocessor(obs_preprocessor, "obs_preprocessor", "evaluate_checkpoint"),
                         as_preprocessor(reward_preprocessor, "reward_preprocessor", "evaluate_checkpoint"))
             if p is not None]
    preprocessors = given or None
    _check_builder_inputs(file, manifest, config, state, preprocessors, preprocess_fn)
    plugins = get_plugins()
    run_seed = config.seed if seed is None else seed

    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    render_mode = "rgb_array" if video_dir is not None else None
    probe = Evaluator(config.env, policy=None, episodes=episodes, seed=run_seed,  # type: ignore[arg-type]
                      registry=plugins.registry, render_mode=render_mode, preprocess_fn=preprocess_fn)
    policy_group.materialize(probe.group.observation_space, probe.group.action_space, seed=config.seed)
    policy_group.load_state_dict(state["policy"])
    if preprocessors is None:
        preprocessors = []
        for pc in config.preprocessors:
            spec = plugins.registry.resolve("preprocessor", pc.type)
            preprocessors.append(spec.build(pc.params, observation_space=probe.group.observation_space,
                                            num_envs=episodes))
    for pre, pstate in zip(preprocessors, state["preprocessors"], strict=True):
        pre.load_state_dict(pstate)
    assert policy_group.rollout is not None
    probe.policy, probe.preprocessors = policy_group.rollout, preprocessors
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


def _check_builder_inputs(file: Path, manifest: dict[str, Any], config: Any, state: dict[str, Any],
                          preprocessors: list[Any] | None, preprocess_fn: Any) -> None:
    """Refuse a checkpoint whose run used builder-only inputs (see :func:`evaluate_checkpoint`) not passed now."""
    training = manifest.get("training_config") or {}
    fns = sorted(f"{k.removesuffix('.preprocess_fn')}: {v}" for k, v in training.items()
                 if k.endswith(".preprocess_fn"))
    if fns and preprocess_fn is None:
        raise UserError(f"{file}: the run passed its observations through build_env_group(preprocess_fn=...) "
                        f"({'; '.join(fns)}), which no config holds; evaluate it from Python with "
                        "rlightning_core.evaluate.evaluate_checkpoint(path, preprocess_fn=...)")
    saved = len(state["preprocessors"])
    have = len(preprocessors) if preprocessors is not None else len(config.preprocessors)
    if saved != have:
        names = [str(training.get(f"preprocessors[{i}].function", training.get(f"preprocessors[{i}].type", "?")))
                 for i in range(saved)]
        given = "were passed" if preprocessors is not None else "are in its saved config"
        raise UserError(f"{file}: the checkpoint holds the state of {saved} preprocessor(s) ({', '.join(names)}) "
                        f"but {have} {given}; a run that passed preprocessors to build_data_buffer is evaluated "
                        "from Python with the same ones: evaluate_checkpoint(path, obs_preprocessor=..., "
                        "reward_preprocessor=...)")
