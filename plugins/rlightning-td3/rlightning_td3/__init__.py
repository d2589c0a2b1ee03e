"""Twin Delayed DDPG for rlightning (registered as policy ``td3``)."""

from rlightning_td3.params import TD3Params

__all__ = ["TD3Params"]
