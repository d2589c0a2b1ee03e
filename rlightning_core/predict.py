"""Act with a trained policy from user code: ``load_policy(run_dir).predict(obs)``.

The policy is rebuilt from the run's checkpoint exactly as evaluation rebuilds it
(:mod:`rlightning_core.saved_run`): the newest checkpoint that fully loads, read weights-only, its saved
config, and its observation preprocessors with their statistics frozen (``update=False``, as evaluation
applies them), so an observation gets the action the trained policy would take for it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rlightning_core.errors import UserError

__all__ = ["LoadedPolicy", "load_policy"]


class LoadedPolicy:
    """A trained policy and its preprocessors, ready to act (see :func:`load_policy`).

    Attributes:
        policy: the rollout :class:`~rlightning_core.policy.base.BasePolicy`.
        preprocessors: the run's preprocessors, holding the saved statistics (never updated here).
        observation_space / action_space: the single-env spaces the policy was trained on.
        config: the run's saved config.
        checkpoint: the checkpoint file the weights came from.
    """

    def __init__(self, policy: Any, preprocessors: list[Any], *, observation_space: Any, action_space: Any,
                 config: Any, checkpoint: Path, preprocess_fn: Callable[[np.ndarray], np.ndarray] | None = None
                 ) -> None:
        self.policy = policy
        self.preprocessors = preprocessors
        self.observation_space = observation_space
        self.action_space = action_space
        self.config = config
        self.checkpoint = checkpoint
        self.preprocess_fn = preprocess_fn

    def preprocess(self, obs: np.ndarray) -> np.ndarray:
        """A batch of raw observations as the policy sees it (``preprocess_fn``, then the preprocessors)."""
        if self.preprocess_fn is not None:
            obs = self.preprocess_fn(obs)
        for pre in self.preprocessors:
            obs = pre.obs(obs, update=False)
        return obs

    def predict(self, obs: Any, *, state: Any = None, deterministic: bool = True) -> tuple[np.ndarray, Any]:
        """The action for one observation, or one action per observation of a batch.

        Args:
            obs: one observation of the env's observation shape, or a batch ``[N, *shape]`` (always a batch
                when the run had a ``preprocess_fn``).
            state: the recurrent state returned by the previous call (policies without memory ignore it
                and return ``None``).
            deterministic: take the policy's deterministic action (its mode); ``False`` samples.

        Returns:
            ``(action, state)``: one action (no batch axis) for a single observation, else ``[N, ...]``.

        Raises:
            UserError: ``obs`` has neither the observation shape nor a batch of it.
        """
        array = np.asarray(obs)
        shape = tuple(getattr(self.observation_space, "shape", None) or ())
        single = self.preprocess_fn is None and array.shape == shape  # a preprocess_fn takes batches only
        if self.preprocess_fn is None and not single and array.shape[1:] != shape:
            raise UserError(f"predict(obs): got an observation of shape {array.shape}; the policy takes "
                            f"{shape} or a batch (N, {', '.join(map(str, shape))})")
        batch = array[None] if single else array
        dtype = getattr(self.observation_space, "dtype", None)
        if dtype is not None and batch.dtype != dtype:
            batch = batch.astype(dtype)
        out = self.policy.act(self.preprocess(batch), deterministic=deterministic)
        actions = out.env_actions if out.env_actions is not None else out.actions
        return (actions[0] if single else actions), None


def load_policy(path: str | Path, *, best: bool = False, obs_preprocessor: Any = None,
                preprocess_fn: Callable[[np.ndarray], np.ndarray] | None = None) -> LoadedPolicy:
    """The trained policy of a run directory or checkpoint file, with its saved observation preprocessing.

    Args:
        path: a run directory, its ``checkpoints`` directory, or one checkpoint file.
        best: load the checkpoint recorded as best by evaluation instead of the newest.
        obs_preprocessor: the one a run assembled with the builders passed to ``build_data_buffer`` (its
            saved statistics are loaded into it).
        preprocess_fn: the run's ``build_env_group(preprocess_fn=...)``; ``predict`` applies it first.

    Raises:
        UserError: nothing loadable at ``path`` (a missing or empty directory, a refused file: its path is
            named), or the run needs builder-only inputs that were not passed.
    """
    import attrs

    from rlightning_core.env.group import build_env_group
    from rlightning_core.plugins import get_plugins
    from rlightning_core.saved_run import read_saved_run

    saved = read_saved_run(path, best=best, purpose="loading the policy", obs_preprocessor=obs_preprocessor,
                           preprocess_fn=preprocess_fn, caller="load_policy")
    registry = get_plugins().registry
    # One env of the first config tells the spaces (all configs of a run share them).
    env_cfg = attrs.evolve(saved.config.env[0], num_workers=1, num_envs=1)
    group = build_env_group([env_cfg], preprocess_fn, seed=saved.config.seed, registry=registry)
    try:
        observation_space, action_space = group.observation_space, group.action_space
    finally:
        group.close()
    policy = saved.build_policy(observation_space, action_space)
    preprocessors = saved.build_preprocessors(observation_space, registry=registry)
    return LoadedPolicy(policy, preprocessors, observation_space=observation_space, action_space=action_space,
                        config=saved.config, checkpoint=saved.file, preprocess_fn=preprocess_fn)
