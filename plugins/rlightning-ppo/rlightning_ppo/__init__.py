"""PPO for rlightning (registered as policy ``ppo``)."""

from rlightning_ppo.params import PPOParams

__all__ = ["PPOParams"]
