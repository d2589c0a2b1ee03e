"""Dict observations as flat vectors: :class:`FlatDict`, a ``Box`` that remembers its ``Dict`` layout.

Dict observations travel flat, so the runner, buffers, Ray transport and checkpoints need no change: an env
worker whose observation space is a ``gymnasium.spaces.Dict`` is wrapped (:mod:`rlightning_core.env.dict_obs`)
so that it reports ``flat_dict_space(dict_space)`` and returns ``space.flatten(obs)`` batches. Policies that
understand the layout (``ppo``: one encoder per key; ``ppo`` / ``dqn``: the ``action_mask`` key) read it from
the space; the others see a plain vector or refuse it (:func:`refuse_flat_dict`).

Keys are laid out in sorted order, each one flattened (C order). The flat dtype is ``uint8`` when every key is
``uint8`` and ``float32`` otherwise. Keys may be ``Box`` or ``MultiBinary`` spaces; nested ``Dict`` / ``Tuple``
spaces are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["ACTION_MASK", "FlatDict", "flat_dict_space", "is_flat_dict", "refuse_flat_dict"]

#: The reserved Dict key holding the legal-action mask (``1`` legal, ``0`` illegal; one entry per action).
ACTION_MASK = "action_mask"


class FlatDict(spaces.Box):
    """A flat ``Box`` holding a ``Dict`` space's observations; ``.dict_space`` and the layout come with it.

    Args:
        dict_space: the env's ``Dict`` observation space (keys: ``Box`` or ``MultiBinary``).

    Raises:
        TypeError: not a ``Dict``, or a key whose space cannot be flattened here (nested ``Dict`` / ``Tuple``,
            ``Discrete`` ...), named with the key.
    """

    def __init__(self, dict_space: spaces.Dict) -> None:
        if not isinstance(dict_space, spaces.Dict):
            raise TypeError(f"FlatDict needs a gymnasium Dict space, got {dict_space}")
        self.dict_space = dict_space
        self.keys: tuple[str, ...] = tuple(sorted(dict_space.spaces))
        lows, highs, layout, offset = [], [], {}, 0
        for key in self.keys:
            sub = dict_space.spaces[key]
            if isinstance(sub, spaces.MultiBinary):
                shape, dtype = tuple(np.atleast_1d(sub.n).tolist()), np.dtype(np.int8)
                low, high = np.zeros(shape), np.ones(shape)
            elif isinstance(sub, spaces.Box):
                shape, dtype, low, high = tuple(sub.shape), np.dtype(sub.dtype), sub.low, sub.high
            else:
                raise TypeError(f"observation key {key!r}: {sub} cannot be flattened (Dict observations may hold "
                                "Box or MultiBinary keys; nested Dict/Tuple and Discrete keys are not supported)")
            size = int(np.prod(shape))
            layout[key] = (offset, size, shape, dtype)
            lows.append(np.asarray(low, np.float64).reshape(-1))
            highs.append(np.asarray(high, np.float64).reshape(-1))
            offset += size
        if not self.keys:
            raise TypeError("FlatDict needs a Dict space with at least one key")
        self.layout: dict[str, tuple[int, int, tuple[int, ...], np.dtype]] = layout
        """``key -> (offset, size, shape, dtype)`` in the flat vector."""
        flat = np.uint8 if all(d == np.uint8 for *_, d in layout.values()) else np.float32
        super().__init__(np.concatenate(lows).astype(flat), np.concatenate(highs).astype(flat), (offset,), flat)

    def flatten(self, obs: dict[str, Any]) -> np.ndarray:
        """A batch ``{key: [B, *shape]}`` as ``[B, n]`` (one observation ``{key: shape}`` as ``[n]``)."""
        first = np.asarray(obs[self.keys[0]])
        batched = first.ndim > len(self.layout[self.keys[0]][2])
        lead = (first.shape[0],) if batched else ()
        out = np.empty((*lead, self.shape[0]), dtype=self.dtype)
        for key in self.keys:
            off, size, _, _ = self.layout[key]
            out[..., off:off + size] = np.asarray(obs[key]).reshape(*lead, size)
        return out

    def unflatten(self, flat: np.ndarray) -> dict[str, np.ndarray]:
        """``[B, n]`` (or ``[n]``) back to ``{key: [B, *shape]}`` in each key's dtype."""
        flat = np.asarray(flat)
        lead = flat.shape[:-1]
        return {key: flat[..., off:off + size].reshape(*lead, *shape).astype(dtype)
                for key, (off, size, shape, dtype) in self.layout.items()}

    def columns(self, key: str) -> slice:
        """The flat columns of ``key``."""
        off, size, _, _ = self.layout[key]
        return slice(off, off + size)

    @property
    def has_action_mask(self) -> bool:
        """Whether the ``action_mask`` key is present."""
        return ACTION_MASK in self.layout

    def image_keys(self) -> list[str]:
        """Keys that are channels-first ``uint8`` images ``(C, H, W)``."""
        return [k for k, (_, _, shape, dtype) in self.layout.items() if len(shape) == 3 and dtype == np.uint8]

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return FlatDict, (self.dict_space,)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FlatDict) and other.dict_space == self.dict_space

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"FlatDict({self.dict_space})"


def flat_dict_space(dict_space: spaces.Dict) -> FlatDict:
    """The :class:`FlatDict` of ``dict_space``."""
    return FlatDict(dict_space)


def is_flat_dict(space: Any) -> bool:
    """Whether ``space`` is a :class:`FlatDict`."""
    return isinstance(space, FlatDict)


def refuse_flat_dict(space: Any, plugin: str, *, allow_plain: bool = False) -> None:
    """Raise a clear error when a policy plugin cannot use the Dict observations ``space`` carries.

    Args:
        space: the observation space the policy is built for.
        plugin: the policy's name, for the message.
        allow_plain: accept a FlatDict without image keys and without an ``action_mask`` (the plugin then
            treats it as the flat vector it is).

    Raises:
        UnsupportedSpaceError: ``space`` is a FlatDict the plugin cannot use (a config error).
    """
    if not isinstance(space, FlatDict):
        return
    from rlightning_core.errors import unsupported_space

    if allow_plain and not space.has_action_mask and not space.image_keys():
        return
    what = ("an action_mask key" if space.has_action_mask else
            f"image keys {space.image_keys()}" if space.image_keys() else "Dict observations")
    supported = "Box and Dict (without image keys or an action_mask key)" if allow_plain else "Box"
    raise unsupported_space(f"policy {plugin!r}", "observation", space.dict_space, supported,
                            f"this one has {what}; use ppo (Dict encoders, action masking) or dqn (action masking), "
                            "see docs/dict-observations.md")
