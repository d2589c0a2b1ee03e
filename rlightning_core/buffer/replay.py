r"""The builtin off-policy buffer: circular replay with uniform or prioritized sampling and n-step returns.

Composed like TorchRL's replay buffers from two swappable pieces (pass your own to the constructor):

- a :class:`~rlightning_core.buffer.storage.Storage` — where transitions live and the circular writer
  (default :class:`~rlightning_core.buffer.storage.TensorStorage`, preallocated on ``params.storage_device``);
- a :class:`~rlightning_core.buffer.samplers.Sampler` — which indices a batch reads and their importance
  weights (default :class:`~rlightning_core.buffer.samplers.PrioritizedSampler` when ``params.prioritized``,
  else :class:`~rlightning_core.buffer.samplers.UniformSampler`).

n-step returns (Sutton & Barto 2018, §7.1; Rainbow, Hessel et al. 2018). Each stored transition is

.. math::

    R_t = \sum_{k=0}^{m-1} \gamma^k r_{t+k}, \qquad
    \text{next\_obs} = s'_{t+m-1}, \qquad
    \text{terminated} = \text{term}_{t+m-1}, \qquad
    \text{discount} = \gamma^m,

where ``m = n`` unless the episode ends (terminated or truncated) at step ``t+m-1 < t+n-1``; so the learner's
target is ``rewards + discount * (1 - terminated) * Q(next_obs)`` whatever ``n`` is, and a truncated episode
still bootstraps from its true final observation. Windows reach across chunk boundaries: for every column
(env slot) the buffer keeps the last ``n-1`` raw steps, and transitions whose window is not complete yet are
written when the next chunk for that column arrives (so up to ``n-1`` transitions per column wait, and those
pending at the very end of training are never stored). With ``n_step == 1`` chunks are written directly.

With ``params.share_next_obs`` (the default for ``uint8`` observations) ``next_obs`` is not stored apart
where it is the ``obs`` of a transition written with it: :mod:`rlightning_core.buffer.frames`.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import torch

from rlightning_core.buffer.base import BufferSpec, Chunk, DataBuffer
from rlightning_core.buffer.frames import NextObsPool, successors_equal
from rlightning_core.buffer.params import ReplayBufferParams
from rlightning_core.buffer.samplers import PrioritizedSampler, Sampler, UniformSampler
from rlightning_core.buffer.storage import Layout, Storage, TensorStorage, space_layout, torch_dtype

log = logging.getLogger("rlightning")

__all__ = ["ReplayBuffer"]

_RAW_KEYS = ("obs", "actions", "rewards", "terminated", "truncated", "next_obs")


class ReplayBuffer(DataBuffer):
    """Circular replay of (n-step) transitions.

    Args:
        params: :class:`~rlightning_core.buffer.params.ReplayBufferParams`.
        spec: spaces, number of columns and policy extras (stored per transition, taken at its first step).
        storage: a storage to use instead of a :class:`TensorStorage` of ``params.capacity``; it must accept
            the fields of :meth:`layout`.
        sampler: a sampler to use instead of the one ``params.prioritized`` selects.
    """

    needs_next_obs = True

    def __init__(
        self,
        params: ReplayBufferParams,
        *,
        spec: BufferSpec,
        storage: Storage | None = None,
        sampler: Sampler | None = None,
    ) -> None:
        super().__init__(params, spec=spec)
        self.gamma = float(params.gamma)
        self.n_step = int(params.n_step)
        obs_shape, obs_dtype = space_layout(spec.observation_space, role="obs")
        share = params.share_next_obs
        #: ``next_obs`` kept as references (see :mod:`rlightning_core.buffer.frames`); only with the builtin
        #: circular storage, whose overwrite order the references rely on.
        self.share_next_obs = storage is None and (obs_dtype == torch.uint8 if share is None else bool(share))
        self.storage: Storage = storage if storage is not None else TensorStorage(
            params.capacity, self.layout(spec, share_next_obs=self.share_next_obs), params.storage_device
        )
        if self.share_next_obs:
            self.pool = NextObsPool(obs_shape, obs_dtype, self.storage.device)
            #: Per storage row: the row whose obs is its next_obs (>= 0), or ``-(pool slot + 1)``.
            self.next_ref = np.zeros(self.storage.capacity, dtype=np.int64)
        if sampler is None:
            sampler = (
                PrioritizedSampler(
                    self.storage.capacity, alpha=params.alpha, beta=params.beta, eps=params.priority_eps
                )
                if params.prioritized
                else UniformSampler()
            )
        self.sampler: Sampler = sampler
        self.generator = torch.Generator().manual_seed(int(spec.seed))
        # n-step look-ahead: the last n-1 raw steps of every column, and how many of them are still pending
        self._tails: dict[str, np.ndarray] = {}
        self._pending = np.zeros(spec.num_envs, dtype=np.int64)

    @staticmethod
    def layout(spec: BufferSpec, *, share_next_obs: bool = False) -> Layout:
        """Fields stored per transition: obs, actions, rewards, next_obs, terminated, discount, extras.

        With ``share_next_obs`` the storage holds no ``next_obs`` (the buffer keeps references beside it).
        """
        obs = space_layout(spec.observation_space, role="obs")
        layout: Layout = {
            "obs": obs,
            "actions": space_layout(spec.action_space, role="actions"),
            "rewards": ((), torch.float32),
            "next_obs": obs,
            "terminated": ((), torch.float32),
            "discount": ((), torch.float32),
        }
        if share_next_obs:
            del layout["next_obs"]
        for name, (shape, dtype) in spec.extras_spec.items():
            layout[name] = (tuple(shape), torch_dtype(dtype))
        return layout

    def __len__(self) -> int:
        return len(self.storage)

    # -- insert ----------------------------------------------------------------------------------------------
    def add(self, chunk: Chunk) -> None:
        """Insert a chunk's ``T x N`` steps (n-step windows complete across chunks: see the module doc).

        Transitions are written time-major (all columns of step ``t`` before step ``t+1``), so each env's
        transitions stay in time order and overwriting evicts the oldest steps first.
        """
        chunk = self._pre(chunk)
        data = chunk.data
        needed = [*_RAW_KEYS, *self.spec.extras_spec]
        missing = [k for k in needed if k not in data]
        if missing:
            raise KeyError(
                f"ReplayBuffer.add(): chunk.data lacks {missing} (has {sorted(data)}); replay needs "
                f"'next_obs' (ReplayBuffer.needs_next_obs) and every extra of the BufferSpec"
            )
        c0, nc = int(chunk.column), chunk.num_envs
        if c0 < 0 or c0 + nc > self.spec.num_envs:
            raise ValueError(
                f"chunk covers columns {c0}..{c0 + nc - 1} but the buffer has {self.spec.num_envs} columns"
            )
        out = self._one_step(data) if self.n_step == 1 else self._n_step(data, c0, nc)
        succ = out.pop("succ")
        if not self.share_next_obs:
            indices = self.storage.write(out)
        else:
            next_obs = out.pop("next_obs")
            indices = self.storage.write(out)
            self._write_next_obs(indices, out["obs"], next_obs, succ)
        self.sampler.on_write(indices)

    def _write_next_obs(self, indices: np.ndarray, obs: np.ndarray, next_obs: np.ndarray, succ: np.ndarray) -> None:
        """References for the rows just written at ``indices`` (the last ``len(indices)`` rows of the batch)."""
        skip = len(obs) - len(indices)
        old = self.next_ref[indices]
        self.pool.release(-old[old < 0] - 1)  # the overwritten transitions' own next_obs
        shared = successors_equal(obs, next_obs, succ)[skip:]
        refs = np.empty(len(indices), dtype=np.int64)
        refs[shared] = indices[succ[skip:][shared] - skip]
        apart = np.flatnonzero(~shared)
        refs[apart] = -self.pool.alloc(next_obs[skip:][apart]) - 1
        self.next_ref[indices] = refs

    def _one_step(self, data: dict[str, np.ndarray]) -> dict[str, Any]:
        t, n = data["rewards"].shape[:2]
        keys = ("obs", "actions", "rewards", "next_obs")
        out = {k: data[k].reshape(t * n, *data[k].shape[2:]) for k in keys}
        rows = np.arange(t * n, dtype=np.int64)
        out["succ"] = np.where(rows + n < t * n, rows + n, -1)  # the same env's next step
        out["terminated"] = data["terminated"].reshape(t * n)
        out["discount"] = np.full(t * n, self.gamma, dtype=np.float32)
        for name in self.spec.extras_spec:
            out[name] = data[name].reshape(t * n, *data[name].shape[2:])
        return out

    def _n_step(self, data: dict[str, np.ndarray], c0: int, nc: int) -> dict[str, Any]:
        n, m1 = self.n_step, self.n_step - 1
        keys = [*_RAW_KEYS, *self.spec.extras_spec]
        if not self._tails:
            self._tails = {
                k: np.zeros((m1, self.spec.num_envs, *data[k].shape[2:]), dtype=data[k].dtype) for k in keys
            }
        cols = slice(c0, c0 + nc)
        # S = [last n-1 steps of these columns] + chunk: windows of pending steps can now be completed
        seq = {k: np.concatenate([self._tails[k][:, cols], data[k].astype(self._tails[k].dtype, copy=False)])
               for k in keys}
        length = seq["rewards"].shape[0]
        rewards = seq["rewards"].astype(np.float64)
        done = seq["terminated"].astype(bool) | seq["truncated"].astype(bool)
        pos = np.arange(length)[:, None]
        valid = pos >= (m1 - self._pending[cols])[None, :]  # real, not-yet-written steps of each column

        ret = np.zeros(rewards.shape, dtype=np.float64)
        steps = np.zeros(rewards.shape, dtype=np.int64)
        end = np.broadcast_to(pos, rewards.shape).copy()
        alive = np.ones(rewards.shape, dtype=bool)
        ended = np.zeros(rewards.shape, dtype=bool)
        for i in range(n):  # n is small: loop over the window, vectorized over all steps and columns
            shifted = np.minimum(np.arange(length) + i, length - 1)
            use = alive & (pos + i < length)
            ret += np.where(use, self.gamma**i * rewards[shifted], 0.0)
            steps += use
            end = np.where(use, pos + i, end)
            ended |= use & done[shifted]
            alive = use & ~done[shifted]
        complete = ended | (pos + m1 < length)
        emit = valid & complete
        self._pending[cols] = (valid & ~complete).sum(axis=0)
        for k in keys:
            self._tails[k][:, cols] = seq[k][length - m1 :]

        ts, js = np.nonzero(emit)  # row-major: time-major order
        last = end[ts, js]
        row_of = np.full((length, nc), -1, dtype=np.int64)
        row_of[ts, js] = np.arange(len(ts))
        after = last + 1  # the step whose obs may be this transition's next_obs, when written with it
        succ = np.where(after < length, row_of[np.minimum(after, length - 1), js], -1)
        out: dict[str, np.ndarray] = {
            "succ": succ,
            "obs": seq["obs"][ts, js],
            "actions": seq["actions"][ts, js],
            "rewards": ret[ts, js].astype(np.float32),
            "next_obs": seq["next_obs"][last, js],
            "terminated": seq["terminated"][last, js],
            "discount": (self.gamma ** steps[ts, js]).astype(np.float32),
        }
        for name in self.spec.extras_spec:
            out[name] = seq[name][ts, js]
        return out

    # -- sample ----------------------------------------------------------------------------------------------
    def sample(
        self, batch_size: int, generator: torch.Generator | None = None, *, beta: float | None = None
    ) -> dict[str, torch.Tensor]:
        """A batch of ``batch_size`` transitions, on the storage device, through ``postprocess_fn``.

        Keys: ``obs``, ``actions``, ``rewards`` (n-step return), ``next_obs``, ``terminated`` (float),
        ``discount`` (``gamma**m``), the extras, ``indices`` (for :meth:`update_priorities`) and ``weights``
        (importance weights; ones when uniform).

        Args:
            batch_size: transitions per batch (drawn with replacement).
            generator: torch CPU generator for the draw; defaults to the buffer's own, seeded from
                ``spec.seed`` and saved in :meth:`state_dict`.
            beta: importance-sampling exponent overriding the sampler's annealed one (prioritized only).
        """
        size = len(self.storage)
        if size == 0:
            raise RuntimeError("ReplayBuffer.sample() called on an empty buffer; add chunks first")
        indices, weights = self.sampler.sample(batch_size, size, generator or self.generator, beta)
        device = self.storage.device
        indices = indices.to(device)
        batch = self.storage.get(indices)
        if self.share_next_obs:
            batch["next_obs"] = self._read_next_obs(indices)
        batch["indices"] = indices
        batch["weights"] = weights.to(device)
        return self._post(batch)

    def _read_next_obs(self, indices: torch.Tensor) -> torch.Tensor:
        """``next_obs`` of the rows at ``indices``: the referenced rows' obs, or the pool's items."""
        refs = self.next_ref[indices.cpu().numpy()]
        stored = self.storage.tensors["obs"]  # type: ignore[attr-defined]  (sharing needs TensorStorage)
        out = torch.index_select(stored, 0, torch.from_numpy(np.maximum(refs, 0)).to(stored.device))
        apart = np.flatnonzero(refs < 0)
        if apart.size:
            out[torch.from_numpy(apart).to(out.device)] = self.pool.get(torch.from_numpy(-refs[apart] - 1))
        return out

    def update_priorities(
        self, indices: torch.Tensor | np.ndarray, td_errors: torch.Tensor | np.ndarray
    ) -> None:
        """New priorities ``(|td_error| + eps) ** alpha`` for the transitions of a sampled batch."""
        self.sampler.update_priorities(_numpy(indices), _numpy(td_errors))

    def set_progress(self, progress: float) -> None:
        """Fraction of training done (anneals the prioritized sampler's beta towards 1)."""
        self.sampler.set_progress(progress)

    # -- state -----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Storage contents, sampler state, n-step look-ahead, generator state, shared ``next_obs`` refs."""
        state = {
            "storage": self.storage.state_dict(),
            "sampler": self.sampler.state_dict(),
            "pending": torch.from_numpy(self._pending.copy()),
            "tails": {k: torch.from_numpy(v.copy()) for k, v in self._tails.items()},
            "generator": self.generator.get_state(),
        }
        if self.share_next_obs:
            state["next_ref"] = torch.from_numpy(self.next_ref.copy())
            state["next_obs_pool"] = self.pool.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        self.storage.load_state_dict(state["storage"])
        self.sampler.load_state_dict(state["sampler"])
        if self.share_next_obs:
            if "next_ref" not in state:
                raise KeyError("the checkpointed replay buffer stores next_obs apart; set "
                               "buffer.params.share_next_obs: false to resume it")
            self.next_ref = state["next_ref"].numpy().copy()
            self.pool.load_state_dict(state["next_obs_pool"])
        pending = state["pending"].numpy().copy()
        if pending.shape == self._pending.shape:
            self._pending = pending
            self._tails = {k: v.numpy().copy() for k, v in state["tails"].items()}
        else:  # saved with another number of envs (a resume with more or fewer workers): the n-step tails of
            # the episodes in flight are dropped with those episodes, the stored transitions are kept
            log.warning("replay buffer: the checkpoint has %d env columns, this run %d; the last %d step(s) of "
                        "each episode in flight are dropped", len(pending), len(self._pending),
                        int(pending.max(initial=0)))
        self.generator.set_state(state["generator"])


def _numpy(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)
