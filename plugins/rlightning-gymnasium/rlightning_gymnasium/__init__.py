"""Gymnasium envs for rlightning (registered as env ``gymnasium``).

Importing this package is light; :class:`GymnasiumWorker` and :func:`make_single_env` import Gymnasium on
first access.
"""

from __future__ import annotations

from rlightning_core.lazy import lazy_getattr
from rlightning_gymnasium.params import GymnasiumParams, WrapperSpec

_LAZY = {"GymnasiumWorker": "rlightning_gymnasium.worker", "make_single_env": "rlightning_gymnasium.worker"}

__all__ = ["GymnasiumParams", "GymnasiumWorker", "WrapperSpec", "make_single_env"]


__getattr__ = lazy_getattr(__name__, _LAZY, globals())
