"""The preprocessor contract: transforms between the envs and the policy.

Their state is checkpointed and (on Ray) merged across rollout workers.

A preprocessor component is registered with ``register(name, Class, config=Params)``; the builder calls
``Class(params, observation_space=..., num_envs=...)``. Rollout workers call :meth:`Preprocessor.obs` on every
observation batch before the policy sees it and :meth:`Preprocessor.reward` on every reward batch before it is
stored; ``update=False`` (evaluation) applies the transform without changing statistics.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Preprocessor"]


class Preprocessor:
    """Identity by default; subclasses override what they transform."""

    def __init__(self, params: Any = None, *, observation_space: Any = None, num_envs: int = 1) -> None:
        self.params = params
        self.observation_space = observation_space
        self.num_envs = num_envs

    def obs(self, obs: np.ndarray, *, update: bool = True) -> np.ndarray:
        """Transform a batch of observations ``[N, ...]``."""
        return obs

    def reward(self, reward: np.ndarray, done: np.ndarray, *, update: bool = True) -> np.ndarray:
        """Transform a batch of rewards ``[N]``; ``done`` marks episodes that ended on this step."""
        return reward

    def export_module(self) -> Any:
        """A torch module computing :meth:`obs` with ``update=False`` on a tensor batch (``rlightning export``).

        The base class's identity when the subclass leaves observations alone (a reward preprocessor);
        a subclass that transforms observations overrides it, else exporting its run is refused.

        Raises:
            UserError: this preprocessor transforms observations and provides no torch version.
        """
        if type(self).obs is Preprocessor.obs:
            from torch import nn

            return nn.Identity()
        from rlightning_core.errors import UserError

        cls = type(self)
        raise UserError(f"preprocessor {cls.__qualname__} (from {cls.__module__}) transforms observations but "
                        "provides no export_module(), so a policy trained with it cannot be exported")

    def state_dict(self) -> dict[str, Any]:
        """Statistics to checkpoint and sync (numpy arrays / plain numbers)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def merge(self, states: list[dict[str, Any]]) -> None:
        """Combine statistics gathered by several rollout workers into this instance."""
