"""Asynchronous PPO with V-trace for rlightning (registered as policy ``appo``)."""

from rlightning_appo.params import APPOParams

__all__ = ["APPOParams"]
