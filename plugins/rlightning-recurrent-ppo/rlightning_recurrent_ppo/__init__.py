"""Recurrent PPO for rlightning (registered as policy ``recurrent_ppo``)."""

from rlightning_recurrent_ppo.params import RecurrentPPOParams

__all__ = ["RecurrentPPOParams"]
