"""``check_buffer``: does a buffer component honour :class:`~rlightning_core.buffer.base.DataBuffer`?"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning_core.testing._common import (
    ConformanceReport,
    Subject,
    checkpoint_round_trip,
    resolve_subject,
    trees_equal,
)

__all__ = ["check_buffer", "make_chunk"]

_MEMBERS = ("add", "__len__", "state_dict", "load_state_dict", "needs_next_obs")


def make_chunk(spec: Any, *, seed: int = 0, column: int = 0, num_envs: int | None = None) -> Any:
    """A :class:`~rlightning_core.buffer.base.Chunk` of ``spec.num_steps`` random steps that fits ``spec``.

    Observations and actions are sampled from the spaces; every step of ``data`` is filled (``obs``,
    ``actions``, ``rewards``, ``terminated``, ``truncated``, ``next_obs``, ``bootstrap_values`` and each
    extra of ``spec.extras_spec``), plus ``last_obs`` and ``last_values``.
    """
    import copy

    from rlightning_core.buffer.base import Chunk

    rng = np.random.default_rng(seed)
    t, n = int(spec.num_steps), int(num_envs if num_envs is not None else spec.num_envs)
    obs_space, act_space = copy.deepcopy(spec.observation_space), copy.deepcopy(spec.action_space)
    obs_space.seed(seed)
    act_space.seed(seed + 1)

    def sample(space: Any, lead: tuple[int, ...]) -> np.ndarray:
        count = int(np.prod(lead))
        return np.stack([np.asarray(space.sample()) for _ in range(count)]).reshape(*lead, *space.shape)

    terminated = rng.random((t, n)) < 0.1
    data = {
        "obs": sample(obs_space, (t, n)),
        "actions": sample(act_space, (t, n)),
        "rewards": rng.standard_normal((t, n)).astype(np.float32),
        "terminated": terminated,
        "truncated": (rng.random((t, n)) < 0.05) & ~terminated,
        "next_obs": sample(obs_space, (t, n)),
        "bootstrap_values": np.zeros((t, n), dtype=np.float32),
    }
    for key, (shape, dtype) in spec.extras_spec.items():
        data[key] = rng.standard_normal((t, n, *shape)).astype(dtype)
    return Chunk(data=data, last_obs=sample(obs_space, (n,)), last_values=rng.standard_normal(n).astype(np.float32),
                 column=column, env_label="env")


def check_buffer(component: str | Callable[..., Any], params: Any = None, *, config: type | None = None,
                 registry: Any = None, observation_space: Any = None, action_space: Any = None,
                 extras_spec: dict[str, tuple[tuple[int, ...], Any]] | None = None, num_envs: int = 4,
                 num_steps: int = 8, batch_size: int = 8, seed: int = 0) -> ConformanceReport:
    """Check a buffer: add, len, hook points, sampling and a state round trip.

    Verifies ``add`` / ``len``, the ``preprocess_fn`` / ``postprocess_fn`` hook points, sampling
    (``sample(batch_size)`` or ``minibatches(batch_size)``) and a state round trip through a checkpoint.

    Args:
        component: a registered buffer name, or the factory (class) itself.
        params: its params (a mapping as in a config file, an instance, or ``None`` for the defaults).
        config: the params class when ``component`` is a factory.
        registry: the registry to resolve a name against.
        observation_space: single-env observation space (default ``Box(-1, 1, (4,))``).
        action_space: single-env action space (default ``Discrete(2)``).
        extras_spec: policy extras to store (default ``log_prob`` and ``value``, float32 scalars).
        num_envs: columns of the :class:`~rlightning_core.buffer.base.BufferSpec`.
        num_steps: steps per chunk (``T``).
        batch_size: transitions per sampled batch.
        seed: seed of the random chunks and the spec.

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    from rlightning_core.buffer.base import BufferSpec
    from rlightning_core.testing.doubles import default_spaces

    s = resolve_subject("buffer", component, params, config=config, registry=registry)
    d_obs, d_act = default_spaces()
    spec = BufferSpec(observation_space=observation_space if observation_space is not None else d_obs,
                      action_space=action_space if action_space is not None else d_act, num_envs=num_envs,
                      num_steps=num_steps, column_labels=["env"] * num_envs, seed=seed,
                      extras_spec=dict(extras_spec if extras_spec is not None else
                                       {"log_prob": ((), np.float32), "value": ((), np.float32)}))
    buf = _build(s, spec)
    if len(buf) != 0:
        s.fail(f"a new buffer has len() == {len(buf)}", "start empty")
    seen: list[Any] = []

    def pre(chunk: Any) -> Any:
        seen.append(chunk)
        return chunk

    buf.preprocess_fn = pre
    chunk = make_chunk(spec, seed=seed)
    s.call("add(chunk)", buf.add, chunk)
    if len(seen) != 1:
        s.fail(f"add(chunk) called preprocess_fn {len(seen)} times, expected once",
               "pass every chunk through self._pre(chunk) (DataBuffer) before storing it")
    size = len(buf)
    total = num_steps * num_envs
    if not 0 < size <= total:
        s.fail(f"after adding one chunk of {num_steps} x {num_envs} steps, len() == {size}",
               "len() counts the transitions stored")
    if size != total:
        s.note(f"len() is {size} after adding {total} transitions")
    s.ok(f"add(chunk) goes through preprocess_fn and stores {size} transitions")
    _check_sampling(s, buf, batch_size, total)
    state = s.call("state_dict()", buf.state_dict)
    if not isinstance(state, dict):
        s.fail(f"state_dict() returned a {type(state).__name__}", "return a dict (empty when nothing is saved)")
    loaded = checkpoint_round_trip(s, state, "state_dict()")
    if not state:
        s.note("state_dict() is empty: the buffer's contents are not checkpointed")
        s.ok("state_dict() is checkpoint-safe")
        return s.report
    other = _build(s, spec)
    s.call("load_state_dict(state)", other.load_state_dict, loaded)
    if len(other) != len(buf):
        s.fail(f"a buffer restored from state_dict() has len() {len(other)}, the original {len(buf)}",
               "save and restore everything len() depends on")
    if not trees_equal(state, other.state_dict()):
        s.fail("state_dict() of a restored buffer differs from the one it was restored from",
               "restore every entry of state_dict() in load_state_dict")
    if hasattr(buf, "sample") and "generator" in inspect.signature(buf.sample).parameters:
        import torch

        a = buf.sample(batch_size, generator=torch.Generator().manual_seed(1))
        b = other.sample(batch_size, generator=torch.Generator().manual_seed(1))
        if not trees_equal(dict(a), dict(b)):
            s.fail("the restored buffer samples different batches than the original with the same generator",
                   "restore storage and sampler state in load_state_dict")
    s.ok("state_dict() survives torch.load(weights_only=True) and restores an equal buffer")
    return s.report


def _build(s: Subject, spec: Any) -> Any:
    buf = s.build("the factory (spec=BufferSpec(...))", spec=spec)
    missing = [m for m in _MEMBERS if not hasattr(buf, m)]
    if missing:
        s.fail(f"the factory returned a {type(buf).__name__}, which lacks {', '.join(missing)}",
               "subclass rlightning_core.buffer.base.DataBuffer and implement add() and __len__()")
    return buf


def _check_sampling(s: Subject, buf: Any, batch_size: int, total: int) -> None:
    marker = "_conformance_postprocessed"
    buf.postprocess_fn = lambda batch: {**batch, marker: True}
    if hasattr(buf, "sample"):
        batch = s.call(f"sample({batch_size})", buf.sample, batch_size)
        _check_batch(s, batch, f"sample({batch_size})", marker, {batch_size})
        s.ok(f"sample({batch_size}) returns obs/actions batches through postprocess_fn")
    elif hasattr(buf, "minibatches"):
        if hasattr(buf, "compute_returns_and_advantages"):
            s.call("compute_returns_and_advantages(0.99, 0.95)", buf.compute_returns_and_advantages, 0.99, 0.95)
        batches = list(s.call(f"minibatches({batch_size})", buf.minibatches, batch_size))
        rows = 0
        for batch in batches:
            _check_batch(s, batch, f"minibatches({batch_size})", marker, set(range(1, batch_size + 1)))
            rows += len(batch["obs"])
        if rows != total:
            s.fail(f"one pass of minibatches({batch_size}) yielded {rows} rows for {total} stored steps",
                   "yield every stored step exactly once per pass")
        s.ok(f"minibatches({batch_size}) covers every stored step once, through postprocess_fn")
    else:
        s.note("the buffer has neither sample() nor minibatches(): reading was not checked")
    buf.postprocess_fn = None


def _check_batch(s: Subject, batch: Any, what: str, marker: str, sizes: set[int]) -> None:
    if not hasattr(batch, "keys") or "obs" not in batch or "actions" not in batch:
        s.fail(f"{what} returned {type(batch).__name__} without 'obs' and 'actions'",
               "return a dict of arrays/tensors with at least 'obs' and 'actions'")
    if marker not in batch:
        s.fail(f"{what} did not pass the batch through postprocess_fn",
               "return self._post(batch) (DataBuffer) for every batch")
    if len(batch["obs"]) not in sizes:
        s.fail(f"{what} returned {len(batch['obs'])} rows", f"return batches of the requested size {max(sizes)}")
