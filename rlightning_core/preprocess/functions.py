"""Preprocessors given to the builders: plain functions wrapped, and how a manifest names them.

``build_data_buffer(obs_preprocessor=fn, reward_preprocessor=fn)`` accepts plain functions.

A function has no statistics, so its preprocessor is stateless (empty ``state_dict``, nothing to merge). Like
every preprocessor it follows the constructor contract ``Class(params, observation_space=..., num_envs=...)``,
with the function as ``params``: that is how a Ray env runner builds its own copy.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rlightning_core.errors import PreprocessFnError
from rlightning_core.preprocess.base import Preprocessor

__all__ = ["ObsFunction", "RewardFunction", "as_preprocessor", "describe_preprocessor"]

_METHODS = ("obs", "reward", "state_dict", "load_state_dict", "merge")


def _name(fn: Any) -> str:
    from rlightning_core.env.preprocess_fn import callable_name

    return callable_name(fn)


class ObsFunction(Preprocessor):
    """``params(obs) -> obs`` on every observation batch (``update`` is ignored: there is nothing to update)."""

    def obs(self, obs: np.ndarray, *, update: bool = True) -> np.ndarray:
        """Apply the function."""
        try:
            return self.params(obs)
        except Exception as exc:
            raise PreprocessFnError(f"obs_preprocessor {_name(self.params)} raised: {type(exc).__name__}: "
                                    f"{exc}") from exc


class RewardFunction(Preprocessor):
    """``params(reward) -> reward`` on every reward batch ``[num_envs]`` (``done`` is not passed)."""

    def reward(self, reward: np.ndarray, done: np.ndarray, *, update: bool = True) -> np.ndarray:
        """Apply the function."""
        try:
            return self.params(reward)
        except Exception as exc:
            raise PreprocessFnError(f"reward_preprocessor {_name(self.params)} raised: {type(exc).__name__}: "
                                    f"{exc}") from exc


def as_preprocessor(value: Any, argument: str, caller: str = "build_data_buffer") -> Preprocessor | None:
    """``value`` as a preprocessor: a :class:`Preprocessor` as it is, a plain function wrapped, ``None`` kept.

    Args:
        value: what was passed as ``argument``.
        argument: ``obs_preprocessor`` or ``reward_preprocessor`` (decides how a function is applied).
        caller: the function whose argument it is, for messages.

    Raises:
        TypeError: a class instead of an instance, or something that is neither a preprocessor nor callable.
    """
    if value is None or isinstance(value, Preprocessor):
        return value
    if isinstance(value, type):
        raise TypeError(f"{caller}({argument}=...): got the class {value.__qualname__}; pass an instance "
                        f"({value.__qualname__}(params, observation_space=..., num_envs=...)) or a function "
                        f"{'obs -> obs' if argument == 'obs_preprocessor' else 'reward -> reward'}")
    if all(callable(getattr(value, m, None)) for m in _METHODS):  # a preprocessor that does not inherit the base
        return value
    if callable(value):
        cls = ObsFunction if argument == "obs_preprocessor" else RewardFunction
        return cls(value)
    raise TypeError(f"{caller}({argument}=...): expected a Preprocessor (rlightning_core.preprocess.base) "
                    f"or a function {'obs -> obs' if argument == 'obs_preprocessor' else 'reward -> reward'}, got "
                    f"{type(value).__name__}")


def describe_preprocessor(p: Any) -> dict[str, Any]:
    """How a checkpoint manifest names a preprocessor given to the builders (not built from the config).

    ``{"type": "function", "applies_to": "obs"|"reward", "function": "module.qualname"}`` for a plain function,
    else ``{"type": "module.Class", "params": {...}}`` (params when they are an attrs instance).
    """
    if isinstance(p, ObsFunction | RewardFunction):
        return {"type": "function", "applies_to": "obs" if isinstance(p, ObsFunction) else "reward",
                "function": _name(p.params)}
    import attrs

    cls = type(p)
    out: dict[str, Any] = {"type": f"{cls.__module__}.{cls.__qualname__}"}
    params = getattr(p, "params", None)
    if params is not None and attrs.has(type(params)):
        from rlightning_core.config.structuring import unstructure

        out["params"] = unstructure(params)
    return out
