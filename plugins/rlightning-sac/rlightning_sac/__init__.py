"""Soft Actor-Critic for rlightning (registered as policy ``sac``)."""

from rlightning_sac.params import SACParams

__all__ = ["SACParams"]
