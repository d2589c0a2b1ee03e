"""Param classes of the builtin engines (light: no torch)."""

from __future__ import annotations

from attrs import define, field

from rlightning_core.config.validators import ge


@define(frozen=True, kw_only=True)
class SyncEngineParams:
    """Options of the ``sync`` engine (stop rules and eval schedule live in ``engine`` itself)."""

    rollout_steps: int = field(default=128, validator=ge(1))
    """Steps collected per env between two learning phases (``T``; PPO's ``n_steps``)."""
