"""The buffer contract, and :class:`Chunk`: the unit of collected experience that moves around the loop.

A buffer component is registered with ``register(name, BufferClass, config=Params)``; the builder calls
``BufferClass(params, spec=BufferSpec(...))`` once the envs and policy are known. Rollout workers produce
:class:`Chunk` objects (``T`` steps of ``N`` envs); the engine hands them to :meth:`DataBuffer.add`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

__all__ = ["BufferSpec", "Chunk", "DataBuffer"]


@attrs.define(slots=True)
class Chunk:
    """``T`` consecutive steps of ``N`` envs from one rollout worker, as numpy arrays.

    ``data`` keys (arrays shaped ``[T, N, ...]``):

    - ``obs``: observations acted on (after preprocessing); ``actions``; ``rewards`` (float32, after reward
      preprocessing); ``terminated`` / ``truncated`` (bool);
    - ``next_obs``: the true next observation (``final_obs`` where an episode ended) — present when the buffer
      asks for it (:attr:`BufferSpec.needs_next_obs`);
    - ``bootstrap_values``: value of the true final observation where ``truncated``, else 0 — present when the
      policy estimates values;
    - one array per policy extra (e.g. ``log_prob``, ``value``).
    """

    data: dict[str, np.ndarray]
    last_obs: np.ndarray
    """Observations after the last step, ``[N, ...]`` (where the next chunk starts)."""
    last_values: np.ndarray | None = None
    """Values of ``last_obs`` (``[N]``) for bootstrapping at the chunk's end, when the policy has values."""
    weight_version: int = 0
    """Version of the weights the chunk was collected with."""
    column: int = 0
    """First buffer column (env slot) of this chunk: worker ``w`` owns columns ``column .. column+N-1``."""
    env_label: str = ""
    """The env config the chunk came from."""

    @property
    def num_steps(self) -> int:
        """``T``."""
        return int(self.data["rewards"].shape[0])

    @property
    def num_envs(self) -> int:
        """``N``."""
        return int(self.data["rewards"].shape[1])


@attrs.define(kw_only=True)
class BufferSpec:
    """What a buffer needs to know to preallocate storage."""

    observation_space: Any
    action_space: Any
    num_envs: int
    """Total env slots (columns) across all rollout workers."""
    num_steps: int
    """Steps per env per iteration (``T`` of on-policy rollouts); off-policy buffers may ignore it."""
    extras_spec: dict[str, tuple[tuple[int, ...], Any]] = attrs.Factory(dict)
    """Policy extras to store: name -> (per-env shape, numpy dtype)."""
    column_labels: list[str] = attrs.Factory(list)
    """Env-config label of every column (multi-env-config runs)."""
    device: str = "cpu"
    seed: int = 0


class DataBuffer(ABC):
    """Base of buffers: chunks in, batches out, state for checkpoints.

    ``preprocess_fn`` (applied to every chunk before storing) and ``postprocess_fn`` (applied to every batch
    handed to the learner) are the seed's hook points; both default to identity.
    """

    #: Whether chunks must carry ``next_obs`` (off-policy replay needs it; on-policy GAE does not).
    needs_next_obs: bool = False

    def __init__(self, params: Any, *, spec: BufferSpec) -> None:
        self.params = params
        self.spec = spec
        self.preprocess_fn: Callable[[Chunk], Chunk] | None = None
        self.postprocess_fn: Callable[[dict[str, Any]], dict[str, Any]] | None = None

    @abstractmethod
    def add(self, chunk: Chunk) -> None:
        """Store a chunk (after ``preprocess_fn``)."""

    @abstractmethod
    def __len__(self) -> int:
        """Transitions currently stored."""

    def state_dict(self) -> dict[str, Any]:
        """Buffer contents for checkpoints (tensors and plain types); empty when not worth saving."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""

    def _pre(self, chunk: Chunk) -> Chunk:
        return self.preprocess_fn(chunk) if self.preprocess_fn is not None else chunk

    def _post(self, batch: dict[str, Any]) -> dict[str, Any]:
        return self.postprocess_fn(batch) if self.postprocess_fn is not None else batch
