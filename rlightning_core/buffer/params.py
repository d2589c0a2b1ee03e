"""Param classes of the builtin buffers (light: no torch), registered by the builtin plugin."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge, gt, in_range


@define(frozen=True, kw_only=True)
class RolloutBufferParams:
    """Options of the ``rollout`` buffer (GAE's gamma and lambda belong to the algorithm)."""

    storage_device: str = "cpu"
    """Device of the preallocated storage tensors."""


@define(frozen=True, kw_only=True)
class ReplayBufferParams:
    """Options of the ``replay`` buffer."""

    capacity: int = field(default=1_000_000, validator=ge(1))
    """Transitions kept; the oldest are overwritten (circular)."""
    prioritized: bool = False
    """Sample proportionally to priority (sum tree, Schaul et al. 2016) instead of uniformly."""
    alpha: float = field(default=0.6, validator=ge(0))
    """Priority exponent (0: uniform)."""
    beta: float = field(default=0.4, validator=in_range(0, 1))
    """Initial importance-sampling exponent, annealed to 1 over training."""
    priority_eps: float = field(default=1e-6, validator=gt(0))
    """Added to |TD error| so no transition has zero probability."""
    n_step: int = field(default=1, validator=ge(1))
    """Store n-step discounted returns (truncated at episode ends)."""
    gamma: float = field(default=0.99, validator=in_range(0, 1))
    """Discount used for n-step returns."""
    storage_device: str = "cpu"
    """Device of the preallocated storage (the learner's, to sample without host copies)."""
    share_next_obs: bool | None = None
    """Store each ``next_obs`` that is the ``obs`` of a later transition as a reference to it (checked byte
    for byte), keeping apart only the others (episode ends, a chunk's last step): about half the memory for
    images. ``null``: on for ``uint8`` observations, off otherwise. Only with the builtin storage."""
