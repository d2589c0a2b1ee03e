"""The builtin on-policy buffer: one iteration's ``T x N`` steps, GAE-lambda, shuffled minibatches.

Storage is preallocated as torch tensors shaped ``[T, N, ...]`` (``T`` = ``spec.num_steps``, ``N`` =
``spec.num_envs`` columns). Each rollout worker owns a disjoint range of columns and its chunks are copied
into them whole (``chunk.column .. chunk.column + n - 1``), so workers' chunks can arrive in any order.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from rlightning_core.buffer.base import BufferSpec, Chunk, DataBuffer
from rlightning_core.buffer.params import RolloutBufferParams
from rlightning_core.buffer.storage import Layout, as_tensor, space_layout, torch_dtype

__all__ = ["RolloutBuffer"]

#: Keys :meth:`RolloutBuffer.minibatches` always yields (plus every policy extra).
_BATCH_KEYS = ("obs", "actions", "advantages", "returns")


class RolloutBuffer(DataBuffer):
    """Fixed-size on-policy storage filled once per iteration, then read as shuffled minibatches.

    Stored per step (all ``[T, N, ...]``): ``obs`` (float32; uint8 for uint8 Boxes such as images; int64 for
    Discrete / MultiDiscrete spaces), ``actions`` (int64 for Discrete ``[T, N]`` / MultiDiscrete ``[T, N, k]``;
    float32 for Box), ``rewards``, ``terminated``, ``truncated``, ``bootstrap_values`` (0 where the chunk has
    none), every extra of ``spec.extras_spec``; after :meth:`compute_returns_and_advantages` also ``advantages`` and
    ``returns``. ``last_values`` (``[N]``) holds each column's value of the observation after step ``T-1``.

    :meth:`state_dict` is empty: on-policy data is consumed within the iteration that collected it and is
    stale once the weights change, so checkpoints are taken between iterations and skip it.

    Args:
        params: :class:`~rlightning_core.buffer.params.RolloutBufferParams`.
        spec: spaces, ``num_steps`` (``T``), ``num_envs`` (``N``), policy extras and column labels.
    """

    def __init__(self, params: RolloutBufferParams, *, spec: BufferSpec) -> None:
        super().__init__(params, spec=spec)
        self.num_steps, self.num_envs = int(spec.num_steps), int(spec.num_envs)
        self.device = torch.device(params.storage_device)
        layout: Layout = {
            "obs": space_layout(spec.observation_space, role="obs"),
            "actions": space_layout(spec.action_space, role="actions"),
            "rewards": ((), torch.float32),
            "terminated": ((), torch.bool),
            "truncated": ((), torch.bool),
            "bootstrap_values": ((), torch.float32),
        }
        for name, (shape, dtype) in spec.extras_spec.items():
            layout[name] = (tuple(shape), torch_dtype(dtype))
        layout["advantages"] = ((), torch.float32)
        layout["returns"] = ((), torch.float32)
        self.layout = layout
        shape_tn = (self.num_steps, self.num_envs)
        self.tensors: dict[str, torch.Tensor] = {
            name: torch.zeros((*shape_tn, *shape), dtype=dtype, device=self.device)
            for name, (shape, dtype) in layout.items()
        }
        self.last_values = torch.zeros(self.num_envs, dtype=torch.float32, device=self.device)
        self.column_labels = list(spec.column_labels) or [""] * self.num_envs
        if len(self.column_labels) != self.num_envs:
            raise ValueError(
                f"spec.column_labels has {len(self.column_labels)} labels for {self.num_envs} columns"
            )
        self._filled = np.zeros(self.num_envs, dtype=bool)
        self._has_last_values = np.zeros(self.num_envs, dtype=bool)
        self._computed = False

    def __len__(self) -> int:
        return self.num_steps * int(self._filled.sum())

    def __getitem__(self, key: str) -> torch.Tensor:
        """The storage tensor ``[T, N, ...]`` of one field (a view: do not write to it)."""
        return self.tensors[key]

    # -- insert ----------------------------------------------------------------------------------------------
    def add(self, chunk: Chunk) -> None:
        """Copy a chunk (``T`` steps of ``n`` envs, after ``preprocess_fn``) into its columns.

        Raises:
            ValueError: the chunk's length is not ``T`` or its columns fall outside ``0 .. N-1``.
            KeyError: a field of the layout (e.g. a policy extra) is missing from ``chunk.data``.
        """
        chunk = self._pre(chunk)
        t, n, c0 = chunk.num_steps, chunk.num_envs, int(chunk.column)
        if t != self.num_steps:
            raise ValueError(f"chunk has {t} steps but the rollout buffer holds num_steps={self.num_steps}")
        if c0 < 0 or c0 + n > self.num_envs:
            raise ValueError(f"chunk covers columns {c0}..{c0 + n - 1} but the buffer has {self.num_envs}")
        cols = slice(c0, c0 + n)
        for name, dst in self.tensors.items():
            if name in ("advantages", "returns"):
                continue
            src = chunk.data.get(name)
            if src is None:
                if name == "bootstrap_values":
                    dst[:, cols].zero_()
                    continue
                raise KeyError(
                    f"RolloutBuffer.add(): chunk.data lacks {name!r} (has {sorted(chunk.data)}); the "
                    f"policy's extras_spec promises it"
                )
            dst[:, cols].copy_(as_tensor(src).reshape(t, n, *dst.shape[2:]))
        if chunk.last_values is not None:
            self.last_values[cols].copy_(as_tensor(chunk.last_values).reshape(n))
            self._has_last_values[cols] = True
        if chunk.env_label and not self.spec.column_labels:
            self.column_labels[cols] = [chunk.env_label] * n
        self._filled[cols] = True
        self._computed = False

    def reset(self) -> None:
        """Mark every column empty for the next iteration (storage is reused, not reallocated)."""
        self._filled[:] = False
        self._has_last_values[:] = False
        self._computed = False

    def is_free(self, column: int, num_envs: int) -> bool:
        """Whether columns ``column .. column + num_envs - 1`` are all still empty this iteration."""
        return not bool(self._filled[column: column + num_envs].any())

    @property
    def full(self) -> bool:
        """Whether every column has been filled since the last :meth:`reset`."""
        return bool(self._filled.all())

    # -- advantages ------------------------------------------------------------------------------------------
    def compute_returns_and_advantages(self, gamma: float, gae_lambda: float) -> None:
        r"""Generalized advantage estimation, with truncation handled apart from termination.

        GAE-lambda is from Schulman et al. 2016, "High-Dimensional Continuous Control Using Generalized
        Advantage Estimation". For every step ``t`` and column, with
        :math:`d_t = \text{terminated}_t \lor \text{truncated}_t`:

        .. math::

            V'_t &= \begin{cases} 0 & \text{terminated}_t \\
                                  \text{bootstrap\_values}_t & \text{truncated}_t \\
                                  V_{t+1} & \text{otherwise, } t < T-1 \\
                                  \text{last\_values} & \text{otherwise, } t = T-1 \end{cases} \\
            \delta_t &= r_t + \gamma V'_t - V_t \\
            A_t &= \delta_t + \gamma \lambda (1 - d_t) A_{t+1}, \qquad A_T = 0 \\
            R_t &= A_t + V_t

        A truncated episode is bootstrapped with the value of its true final observation, yet the recursion
        is cut there (the next step belongs to a new episode). ``returns`` :math:`R_t` are the
        TD(:math:`\lambda`) targets of the value function. Computed in numpy float32 over all columns at once
        (a Python loop over ``T`` only), then written into the ``advantages`` / ``returns`` tensors.

        Args:
            gamma: discount factor.
            gae_lambda: GAE's :math:`\lambda` (0: one-step TD error; 1: Monte-Carlo return minus value).

        Raises:
            KeyError: the policy stores no ``value`` extra.
            RuntimeError: some column was not filled, or a chunk came without ``last_values``.
        """
        if "value" not in self.tensors:
            raise KeyError("GAE needs the policy extra 'value' (add it to the policy's extras_spec)")
        if not self._filled.all():
            missing = np.flatnonzero(~self._filled).tolist()
            raise RuntimeError(f"columns {missing} were not filled this iteration")
        if not self._has_last_values.all():
            raise RuntimeError(
                f"columns {np.flatnonzero(~self._has_last_values).tolist()} came without chunk.last_values; "
                f"GAE needs the value of the observation after the last step"
            )
        keys = ("rewards", "terminated", "truncated", "bootstrap_values")
        cpu = {k: self.tensors[k].cpu().numpy() for k in keys}
        values = self.tensors["value"].reshape(self.num_steps, self.num_envs).cpu().numpy().astype(np.float32)
        rewards, terminated, truncated = cpu["rewards"], cpu["terminated"], cpu["truncated"]

        next_values = np.empty_like(values)
        next_values[:-1] = values[1:]
        next_values[-1] = self.last_values.cpu().numpy()
        next_values = np.where(truncated, cpu["bootstrap_values"], next_values)
        next_values = np.where(terminated, np.float32(0.0), next_values)
        deltas = rewards + np.float32(gamma) * next_values - values
        carry = (np.float32(gamma * gae_lambda) * ~(terminated | truncated)).astype(np.float32)

        advantages = np.empty_like(values)
        last = np.zeros(self.num_envs, dtype=np.float32)
        for t in range(self.num_steps - 1, -1, -1):
            last = deltas[t] + carry[t] * last
            advantages[t] = last
        self.tensors["advantages"].copy_(torch.from_numpy(advantages))
        self.tensors["returns"].copy_(torch.from_numpy(advantages + values))
        self._computed = True

    # -- read ------------------------------------------------------------------------------------------------
    def minibatches(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> Iterator[dict[str, torch.Tensor]]:
        """One shuffled pass over the ``T * N`` steps, ``batch_size`` at a time, through ``postprocess_fn``.

        Every step appears exactly once per pass; the last batch is smaller when ``batch_size`` does not
        divide ``T * N`` (it is kept, not dropped). Keys: ``obs``, ``actions``, ``advantages``, ``returns``
        and every policy extra (``log_prob``, ``value``, ...), flattened to ``[B, ...]`` on the storage
        device. When ``batch_size`` covers the whole rollout the single batch is a (read-only) view of the
        storage in storage order: a full-batch gradient does not depend on the order.

        Args:
            batch_size: steps per minibatch.
            generator: torch CPU generator for the permutation (the global RNG when ``None``).
        """
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not self._computed:
            raise RuntimeError("call compute_returns_and_advantages() before minibatches()")
        total = self.num_steps * self.num_envs
        keys = [*_BATCH_KEYS, *self.spec.extras_spec]
        flat = {k: self.tensors[k].reshape(total, *self.tensors[k].shape[2:]) for k in keys}
        if batch_size >= total:  # one batch holds everything: order cannot matter, skip the shuffle and gathers
            yield self._post(flat)
            return
        perm = torch.randperm(total, generator=generator).to(self.device)
        for start in range(0, total, batch_size):
            idx = perm[start : start + batch_size]
            yield self._post({k: torch.index_select(v, 0, idx) for k, v in flat.items()})

    def per_label_columns(self) -> dict[str, torch.Tensor]:
        """Column indices (int64 tensors, on the storage device) of every env label, in first-seen order.

        E.g. ``buffer["rewards"][:, cols].sum()`` for each label's reward in a multi-env-config run.
        """
        out: dict[str, list[int]] = {}
        for col, label in enumerate(self.column_labels):
            out.setdefault(label, []).append(col)
        return {lbl: torch.tensor(cols, dtype=torch.int64, device=self.device) for lbl, cols in out.items()}

    def state_dict(self) -> dict[str, Any]:
        """Nothing: on-policy data is not checkpointed (see the class docstring)."""
        return {}
