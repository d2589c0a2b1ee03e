"""Param classes of the builtin preprocessors (light: no torch)."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import gt, in_range


@define(frozen=True, kw_only=True)
class NormalizeObsParams:
    """Options of ``normalize_obs``."""

    clip: float = field(default=10.0, validator=gt(0))
    """Clip normalized observations to ``[-clip, clip]``."""
    epsilon: float = field(default=1e-8, validator=gt(0))
    """Added to the variance before the square root."""


@define(frozen=True, kw_only=True)
class ScaleRewardParams:
    """Options of ``scale_reward``."""

    gamma: float = field(default=0.99, validator=in_range(0, 1))
    """Discount of the running return whose std scales rewards (match the algorithm's)."""
    clip: float = field(default=10.0, validator=gt(0))
    """Clip scaled rewards to ``[-clip, clip]``."""
    epsilon: float = field(default=1e-8, validator=gt(0))
    """Added to the variance before the square root."""


@define(frozen=True, kw_only=True)
class ClipObsParams:
    """Options of ``clip_obs``."""

    low: float = -10.0
    """Lower bound."""
    high: float = 10.0
    """Upper bound."""


@define(frozen=True, kw_only=True)
class ClipRewardParams:
    """Options of ``clip_reward``."""

    low: float = -1.0
    """Lower bound."""
    high: float = 1.0
    """Upper bound."""
