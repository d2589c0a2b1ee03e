"""Env state for checkpoints, without pickle: a snapshot of each env's attributes as arrays and plain values.

A Gymnasium env keeps its state in Python attributes of the env and its wrappers. Examples are CartPole's
``state`` and ``steps_beyond_terminated``, ``TimeLimit``'s ``_elapsed_steps``, the ``np_random`` generator,
and ``NormalizeObservation``'s running statistics. :func:`env_state` walks the wrapper chain and records every
attribute that is data:

- ``None``, bools, numbers and strings;
- numpy arrays and scalars;
- numpy ``Generator`` bit-generator states;
- lists, tuples and string-keyed dicts of the above;
- plain Python objects made of the above.

It skips what is configuration, not state: spaces, the ``EnvSpec``, ``metadata`` and functions. An attribute
of any other kind makes the env unsaveable. For example, MuJoCo's ``MjData`` or Box2D worlds are C objects
whose state is not visible. Such an env gets ``None`` plus a log line that names the attribute, and a resumed
run resets it. The env is never half restored.
"""

from __future__ import annotations

import logging
import types
from typing import Any

import gymnasium
import numpy as np
from gymnasium.envs.registration import EnvSpec

__all__ = ["EnvStateError", "env_state", "load_env_state"]

log = logging.getLogger("rlightning.gymnasium")

_SKIP_NAMES = frozenset({"env", "spec", "_cached_spec", "metadata", "_metadata"})
_SKIP_TYPES = (gymnasium.Space, EnvSpec, types.FunctionType, types.BuiltinFunctionType, types.MethodType,
               type, types.ModuleType)
_MAX_DEPTH = 6
_GEN, _SCALAR, _OBJ = "__generator__", "__numpy_scalar__", "__object__"


class EnvStateError(ValueError):
    """An env's state cannot be saved or restored; the message names the attribute."""


def _layers(env: Any) -> list[Any]:
    out = [env]
    while isinstance(getattr(out[-1], "env", None), gymnasium.Env):
        out.append(out[-1].env)
    return out


def _snap(value: Any, path: str, depth: int) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise EnvStateError(f"{path} is an object array")
        return value.copy()
    if isinstance(value, np.generic):
        return {_SCALAR: np.asarray(value)}
    if isinstance(value, np.random.Generator):
        return {_GEN: value.bit_generator.state}
    if depth >= _MAX_DEPTH:
        raise EnvStateError(f"{path} is nested too deeply")
    if isinstance(value, list | tuple):
        items = [_snap(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        return items if isinstance(value, list) else tuple(items)
    if type(value) is dict:
        if not all(isinstance(k, str) for k in value):
            raise EnvStateError(f"{path} is a dict with non-string keys")
        return {k: _snap(v, f"{path}[{k!r}]", depth + 1) for k, v in value.items()}
    if hasattr(value, "__dict__") and not hasattr(type(value), "__slots__"):
        return {_OBJ: _attrs(value, path, depth + 1)}
    raise EnvStateError(f"{path} is a {type(value).__module__}.{type(value).__qualname__}")


def _attrs(obj: Any, path: str, depth: int) -> dict[str, Any]:
    return {
        name: _snap(value, f"{path}.{name}", depth)
        for name, value in vars(obj).items()
        if name not in _SKIP_NAMES and not isinstance(value, _SKIP_TYPES)
    }


def env_state(env: gymnasium.Env) -> list[dict[str, Any]] | None:
    """The state of ``env`` and its wrappers (outermost first), or ``None`` if some of it is not data."""
    try:
        return [_attrs(layer, type(layer).__name__, 0) for layer in _layers(env)]
    except EnvStateError as exc:
        reason = (type(env.unwrapped).__qualname__, str(exc))
        if reason not in _REPORTED:  # once per env type and reason, not at every checkpoint
            _REPORTED.add(reason)
            log.info("cannot save the state of %s: %s (a resumed run resets it)", env, exc)
        return None


_REPORTED: set[tuple[str, str]] = set()


def _restore(current: Any, saved: Any, path: str) -> Any:
    if isinstance(saved, dict) and len(saved) == 1:
        ((key, inner),) = saved.items()
        if key == _GEN:
            gen = current if isinstance(current, np.random.Generator) else \
                np.random.Generator(getattr(np.random, inner["bit_generator"])())
            gen.bit_generator.state = inner
            return gen
        if key == _SCALAR:
            return np.asarray(inner)[()]
        if key == _OBJ:
            if current is None or not hasattr(current, "__dict__"):
                raise EnvStateError(f"{path}: the env has no object to restore into")
            fields = vars(current)
            for name, value in inner.items():
                fields[name] = _restore(fields.get(name), value, f"{path}.{name}")
            return current
    if isinstance(saved, np.ndarray):
        return saved.copy()
    if isinstance(saved, list | tuple):
        same = isinstance(current, list | tuple) and len(current) == len(saved)
        cur = current if same else [None] * len(saved)
        items = [_restore(c, s, f"{path}[{i}]") for i, (c, s) in enumerate(zip(cur, saved, strict=True))]
        return items if isinstance(saved, list) else tuple(items)
    if type(saved) is dict:
        cur = current if isinstance(current, dict) else {}
        return {k: _restore(cur.get(k), v, f"{path}[{k!r}]") for k, v in saved.items()}
    return saved


def load_env_state(env: gymnasium.Env, state: list[dict[str, Any]]) -> None:
    """Restore :func:`env_state` into an env built from the same params.

    Raises:
        EnvStateError: the wrapper chain differs from the saved one, or an object to restore into is missing.
    """
    layers = _layers(env)
    if len(layers) != len(state):
        raise EnvStateError(f"the saved env has {len(state)} wrapper layers, this one {len(layers)}: "
                            "was it built with other params?")
    for layer, saved in zip(layers, state, strict=True):
        name, fields = type(layer).__name__, vars(layer)
        for attr, value in saved.items():
            fields[attr] = _restore(fields.get(attr), value, f"{name}.{attr}")
