"""Deep Q-Networks for rlightning (registered as policy ``dqn``)."""

from rlightning_dqn.params import DQNParams

__all__ = ["DQNParams"]
