"""The spaces PPO supports (torch-free: the numpy rollout copy checks them too).

Action spaces and the distribution PPO puts on each (:class:`ActionSpec`):

- ``Discrete(n, start)``: a categorical over ``n`` logits; the env gets ``start + index``.
- ``MultiDiscrete(nvec, start)``: one categorical per dimension, factorised: the policy head has ``sum(nvec)``
  logits, split per dimension; the log-probability and the entropy are the sums over dimensions. Only 1-D
  ``nvec``. The env gets ``start + index`` per dimension; the buffer stores the index (``0 .. nvec - 1``).
- ``MultiBinary(n)``: one independent Bernoulli per bit (``n`` logits); log-probability and entropy summed over
  bits. Only 1-D (``MultiBinary(n)`` or ``MultiBinary([n])``).
- 1-D ``Box``: a diagonal Gaussian, unsquashed. The sample is what the buffer stores (its log-probability is
  exact); what the env gets is that sample clipped to ``[low, high]`` (infinite bounds: not clipped).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from attrs import define

from rlightning_core.errors import unsupported_space

#: The action spaces PPO supports, as :func:`rlightning_core.testing.space_envs.standard_action_spaces` names them.
SUPPORTED_ACTION_SPACES = ("discrete", "multi_discrete", "multi_binary", "box")

_SUPPORTED = "Discrete, MultiDiscrete (1-D nvec), MultiBinary (1-D) and 1-D Box"


@define(frozen=True)
class ActionSpec:
    """How PPO acts in an action space.

    Attributes:
        kind: ``categorical``, ``multi_categorical``, ``bernoulli`` or ``gaussian``.
        out_dim: width of the policy head (logits, or Gaussian means).
        nvec: categories per dimension (``categorical``: one entry; ``multi_categorical``: one per dimension).
        start: added to each sampled index to give the env's action (categorical kinds; zeros otherwise).
    """

    kind: str
    out_dim: int
    nvec: tuple[int, ...] = ()
    start: tuple[int, ...] = ()

    @property
    def discrete(self) -> bool:
        """Integer actions (every kind but ``gaussian``)."""
        return self.kind != "gaussian"


def action_spec(action_space: Any, plugin: str = "ppo") -> ActionSpec:
    """The :class:`ActionSpec` of ``action_space``.

    Raises:
        UnsupportedSpaceError: any other space (a config error naming the space and ``plugin``).
    """
    from gymnasium import spaces

    if isinstance(action_space, spaces.Discrete):
        return ActionSpec("categorical", int(action_space.n), (int(action_space.n),), (int(action_space.start),))
    if isinstance(action_space, spaces.MultiDiscrete) and action_space.nvec.ndim == 1:
        nvec = tuple(int(k) for k in action_space.nvec)
        return ActionSpec("multi_categorical", sum(nvec), nvec, tuple(int(s) for s in action_space.start))
    if isinstance(action_space, spaces.MultiBinary) and len(action_space.shape) == 1:
        return ActionSpec("bernoulli", int(action_space.shape[0]))
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return ActionSpec("gaussian", int(action_space.shape[0]))
    hint = "wrap the env so that its actions are one of these, e.g. a Tuple of Discretes as a MultiDiscrete"
    raise unsupported_space(f"policy {plugin!r}", "action", action_space, _SUPPORTED, hint)


def check_observation_space(observation_space: Any, plugin: str = "ppo") -> int:
    """The flat observation size; an ``UnsupportedSpaceError`` for a non-Box observation space."""
    from gymnasium import spaces

    if not isinstance(observation_space, spaces.Box):
        raise unsupported_space(f"policy {plugin!r}", "observation", observation_space,
                                "Box (vectors, or (C, H, W) uint8 images)",
                                "flatten composite observations with gymnasium.wrappers.FlattenObservation")
    return int(np.prod(observation_space.shape))


def space_info(observation_space: Any, action_space: Any, plugin: str = "ppo") -> tuple[int, int, bool]:
    """``(flat observation size, action size or count, discrete)`` for Discrete and 1-D Box actions only.

    For policies with a categorical or Gaussian head only (recurrent PPO); an ``UnsupportedSpaceError`` naming
    ``plugin`` for any other space.
    """
    from gymnasium import spaces

    obs_dim = check_observation_space(observation_space, plugin)
    if isinstance(action_space, spaces.Discrete) and int(action_space.start) == 0:
        return obs_dim, int(action_space.n), True
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        return obs_dim, int(action_space.shape[0]), False
    raise unsupported_space(f"policy {plugin!r}", "action", action_space, "Discrete (start 0) and 1-D Box",
                            "the ppo policy also takes MultiDiscrete and MultiBinary actions")


def check_action_mask(observation_space: Any, action_space: Any, plugin: str = "ppo") -> None:
    """A Dict observation's ``action_mask`` key needs a Discrete action space and one entry per action."""
    from gymnasium import spaces

    from rlightning_core.spaces import ACTION_MASK, FlatDict

    if not (isinstance(observation_space, FlatDict) and observation_space.has_action_mask):
        return
    if not isinstance(action_space, spaces.Discrete):
        raise unsupported_space(f"policy {plugin!r}", "action", action_space, "Discrete",
                                f"action masking (the observation key {ACTION_MASK!r}) is for Discrete actions")
    size = observation_space.layout[ACTION_MASK][1]
    if size != int(action_space.n):
        raise unsupported_space(f"policy {plugin!r}", "observation", observation_space.dict_space,
                                f"an {ACTION_MASK!r} key with one entry per action ({int(action_space.n)})",
                                f"its {ACTION_MASK!r} key has {size} entries")
