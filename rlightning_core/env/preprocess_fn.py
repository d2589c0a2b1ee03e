"""Per-env-config observation functions: ``build_env_group(env_cfgs, preprocess_fn=...)``.

A preprocess fn is ``fn(obs) -> obs`` on one worker's batch ``[num_envs, *observation_space.shape]``. It belongs
to an env config (one fn for all configs, or one per config) and is applied where that config's observations
leave the env: :class:`PreprocessedWorker` wraps each of its workers, so every observation — after ``reset``,
after ``step``, and the true final observation of an episode — is transformed before anything else sees it:
the run's ``preprocessors`` (normalization …), the policy, the buffer, evaluation and videos. In Ray mode the
wrapper runs inside each env actor (the fn travels there pickled by Ray).

The fn keeps the observation's shape (the policy and the buffer are sized from the env's observation space);
a result of another dtype of the same kind (float64 for float32) is cast back to the env's dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from rlightning_core.env.base import StepBatch
from rlightning_core.errors import PreprocessFnError

__all__ = ["PreprocessFn", "PreprocessedWorker", "callable_name", "per_config", "with_preprocess_fn"]

PreprocessFn = Callable[[np.ndarray], np.ndarray]
"""``obs -> obs`` on one env worker's observation batch ``[num_envs, ...]``."""


def callable_name(fn: Any) -> str:
    """``module.qualname`` of a function (or of a callable object's class); how manifests and errors name it."""
    target = fn if hasattr(fn, "__qualname__") else type(fn)
    inner = getattr(fn, "func", None)  # functools.partial
    if inner is not None and not hasattr(fn, "__qualname__"):
        return f"functools.partial({callable_name(inner)})"
    return f"{getattr(target, '__module__', '?')}.{target.__qualname__}"


def per_config(preprocess_fn: Any, n_configs: int) -> list[PreprocessFn | None]:
    """One fn (or ``None``) per env config: ``preprocess_fn`` is one callable for all, or a list of one per config.

    Raises:
        ValueError: a list whose length is not the number of env configs (both counts are named).
        TypeError: an entry that is neither callable nor ``None``.
    """
    if preprocess_fn is None or callable(preprocess_fn):
        return [preprocess_fn] * n_configs
    if isinstance(preprocess_fn, str | bytes) or not isinstance(preprocess_fn, Sequence):
        raise TypeError(f"preprocess_fn must be a callable, a list of one callable (or None) per env config, or "
                        f"None; got {type(preprocess_fn).__name__}")
    fns = list(preprocess_fn)
    if len(fns) != n_configs:
        raise ValueError(f"preprocess_fn: got {len(fns)} functions for {n_configs} env configs; pass one "
                         "callable for all, or one per env config")
    for i, fn in enumerate(fns):
        if fn is not None and not callable(fn):
            raise TypeError(f"preprocess_fn[{i}] must be callable or None, got {fn!r}")
    return fns


class PreprocessedWorker:
    """An env worker whose observations pass through ``fn``; everything else is the wrapped worker's.

    Args:
        worker: the env worker to wrap.
        fn: ``obs -> obs`` (see the module docstring).
        where: who the worker is, for error messages (e.g. ``env[1] (pendulum) worker 0``).
    """

    def __init__(self, worker: Any, fn: PreprocessFn, *, where: str) -> None:
        self.worker = worker
        self.fn = fn
        self.where = where
        self.num_envs = worker.num_envs
        self.observation_space = worker.observation_space
        self.action_space = worker.action_space

    def _apply(self, obs: np.ndarray, phase: str) -> np.ndarray:
        try:
            out = self.fn(obs)
        except Exception as exc:
            raise PreprocessFnError(f"{self.where}: preprocess_fn {callable_name(self.fn)} raised on the "
                                    f"observations from {phase}(): {type(exc).__name__}: {exc}") from exc
        out = np.asarray(out)
        raw = np.asarray(obs)
        if out.shape != raw.shape:
            raise PreprocessFnError(f"{self.where}: preprocess_fn {callable_name(self.fn)} returned observations "
                                    f"of shape {out.shape} for a batch of shape {raw.shape} (from {phase}()); it "
                                    "must keep the shape: the policy and the buffer are sized from the env's "
                                    "observation space (change the space with a wrapper in the env instead)")
        if out.dtype != raw.dtype:
            if not np.can_cast(out.dtype, raw.dtype, casting="same_kind"):
                raise PreprocessFnError(f"{self.where}: preprocess_fn {callable_name(self.fn)} returned {out.dtype} "
                                        f"observations for the env's {raw.dtype} ones (from {phase}()); storing "
                                        "them would change their values: return the env's dtype")
            out = out.astype(raw.dtype)
        return out

    def reset(self, seed: int | None = None) -> np.ndarray:
        """Reset the wrapped worker; returns its observations transformed."""
        return self._apply(self.worker.reset(seed=seed), "reset")

    def step(self, actions: np.ndarray) -> StepBatch:
        """Step the wrapped worker; ``obs`` and ``final_obs`` come back transformed."""
        step = self.worker.step(actions)
        final = None if step.final_obs is None else self._apply(step.final_obs, "step")
        return attrs.evolve(step, obs=self._apply(step.obs, "step"), final_obs=final)

    def close(self) -> None:
        """Close the wrapped worker."""
        self.worker.close()

    def __getattr__(self, name: str) -> Any:
        # optional parts of a worker (state_dict, render, kill, ...) are the wrapped worker's
        if name in ("worker", "fn", "where"):
            raise AttributeError(name)
        return getattr(self.worker, name)

    def __repr__(self) -> str:
        return f"PreprocessedWorker({self.worker!r}, {callable_name(self.fn)})"


def with_preprocess_fn(worker: Any, fn: PreprocessFn | None, where: str) -> Any:
    """``worker`` wrapped by :class:`PreprocessedWorker` when there is a ``fn`` (else ``worker`` itself)."""
    if fn is None or (isinstance(worker, PreprocessedWorker) and worker.fn is fn):
        return worker
    return PreprocessedWorker(worker, fn, where=where)
