"""``appo_rollout``: the rollout buffer plus each step's true next observation, for learner-side bootstrapping.

The builtin ``rollout`` buffer keeps the bootstrap values the rollout copy computed when it collected (after the
last step, and at time-limit truncations); under the async engine they come from weights some versions older than
the learner's. This buffer asks the env runners for ``next_obs`` (the observation after every step, the true
final one where an episode ended) and stores it, so :class:`rlightning_appo.policy.APPOPolicy` can compute those
bootstrap values with the learner's current weights, like every other value in its V-trace targets. It costs a
second copy of the observations.
"""

from __future__ import annotations

from typing import Any

from rlightning_core.buffer.base import BufferSpec
from rlightning_core.buffer.rollout import RolloutBuffer

__all__ = ["APPORolloutBuffer"]


class APPORolloutBuffer(RolloutBuffer):
    """:class:`~rlightning_core.buffer.rollout.RolloutBuffer` that also stores ``next_obs`` ``[T, N, ...]``."""

    needs_next_obs = True

    def __init__(self, params: Any, *, spec: BufferSpec) -> None:
        super().__init__(params, spec=spec)
        shape, dtype = self.layout["obs"]
        self.layout["next_obs"] = (shape, dtype)
        self.tensors["next_obs"] = self.tensors["obs"].new_zeros(self.tensors["obs"].shape, dtype=dtype)
