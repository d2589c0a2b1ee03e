"""Gymnasium envs for rlightning (registered as env ``gymnasium``).

Importing this package is light; :class:`GymnasiumWorker` and :func:`make_single_env` import Gymnasium on
first access.
"""

from __future__ import annotations

import importlib
from typing import Any

from rlightning_gymnasium.params import GymnasiumParams, WrapperSpec

_LAZY = {"GymnasiumWorker": "rlightning_gymnasium.worker", "make_single_env": "rlightning_gymnasium.worker"}

__all__ = ["GymnasiumParams", "GymnasiumWorker", "WrapperSpec", "make_single_env"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'rlightning_gymnasium' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
