"""``check_preprocessor``: does a preprocessor honour :class:`~rlightning_core.preprocess.base.Preprocessor`?"""

from __future__ import annotations

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

__all__ = ["check_preprocessor"]


def check_preprocessor(component: str | Callable[..., Any], params: Any = None, *, config: type | None = None,
                       registry: Any = None, observation_space: Any = None, num_envs: int = 4, steps: int = 20,
                       seed: int = 0) -> ConformanceReport:
    """Check a preprocessor: shapes kept, ``update=False`` leaves state alone, state round trip, ``merge``.

    Args:
        component: a registered preprocessor name, or the factory (class) itself.
        params: its params (a mapping as in a config file, an instance, or ``None`` for the defaults).
        config: the params class when ``component`` is a factory.
        registry: the registry to resolve a name against.
        observation_space: single-env observation space (default ``Box(-1, 1, (4,))``).
        num_envs: envs per batch.
        steps: batches fed with ``update=True`` before the state checks.
        seed: seed of the random batches.

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    from rlightning_core.preprocess.base import Preprocessor
    from rlightning_core.testing.doubles import SpaceEnv, default_spaces

    s = resolve_subject("preprocessor", component, params, config=config, registry=registry)
    space = observation_space if observation_space is not None else default_spaces()[0]

    def build() -> Any:
        p = s.build("the factory (observation_space=, num_envs=)", observation_space=space, num_envs=num_envs)
        if not isinstance(p, Preprocessor):
            s.fail(f"the factory built a {type(p).__name__}, which does not derive from Preprocessor",
                   "subclass rlightning_core.preprocess.base.Preprocessor and override obs() and/or reward()")
        return p

    pre = build()
    s.ok("builds with (params, observation_space=, num_envs=)")
    env = SpaceEnv(space, default_spaces()[1], num_envs=num_envs, seed=seed)
    rng = np.random.default_rng(seed)
    obs = env.reset(seed=seed)
    for t in range(steps):
        out = s.call(f"obs(batch, update=True) at batch {t}", pre.obs, obs, update=True)
        _check_array(s, out, obs.shape, f"obs(batch) at batch {t}")
        reward = (rng.standard_normal(num_envs) * 3).astype(np.float32)
        done = rng.random(num_envs) < 0.2
        rout = s.call(f"reward(rewards, done, update=True) at batch {t}", pre.reward, reward, done, update=True)
        _check_array(s, rout, (num_envs,), f"reward(rewards, done) at batch {t}")
        obs = env.step(np.zeros(num_envs, dtype=np.int64)).obs
    s.ok(f"obs() and reward() keep shapes and stay finite over {steps} batches")

    before = _state(s, pre)
    probe_obs = obs * 2
    probe_reward = np.linspace(-3, 3, num_envs).astype(np.float32)
    probe_done = np.zeros(num_envs, dtype=bool)

    def transform(p: Any) -> tuple[np.ndarray, np.ndarray]:
        return (np.asarray(s.call("obs(batch, update=False)", p.obs, probe_obs, update=False)),
                np.asarray(s.call("reward(rewards, done, update=False)", p.reward, probe_reward, probe_done,
                                  update=False)))

    expected = transform(pre)
    if not trees_equal(before, _state(s, pre)):
        s.fail("obs()/reward() with update=False changed state_dict()",
               "update statistics only when update=True (evaluation passes update=False)")
    s.ok("update=False applies the transform without changing the state")

    from rlightning_core.checkpoint.manager import to_numpy_tree, to_tensor_tree

    saved = to_numpy_tree(checkpoint_round_trip(s, to_tensor_tree(before), "state_dict()"))
    restored = build()
    s.call("load_state_dict(state)", restored.load_state_dict, saved)
    if not _same(transform(restored), expected):
        s.fail("a preprocessor restored with load_state_dict(state_dict()) transforms differently",
               "save in state_dict() everything the transform depends on (numpy arrays and plain values)")
    s.ok("state_dict() survives a checkpoint and load_state_dict reproduces the transform")

    merged = build()
    s.call("merge([state])", merged.merge, [_state(s, pre)])
    if not _same(transform(merged), expected):
        s.fail("merge([state]) into a fresh instance does not reproduce the transform of the instance that "
               "produced the state",
               "fold the statistics of other workers' state_dict() into this instance in merge() (Ray mode "
               "merges rollout workers' statistics this way)")
    s.ok("merge([state]) into a fresh instance reproduces the transform")
    return s.report


def _state(s: Subject, p: Any) -> Any:
    state = s.call("state_dict()", p.state_dict)
    if not isinstance(state, dict):
        s.fail(f"state_dict() returned a {type(state).__name__}", "return a dict (empty when stateless)")
    import copy

    return copy.deepcopy(state)


def _check_array(s: Subject, out: Any, shape: tuple[int, ...], what: str) -> None:
    if not isinstance(out, np.ndarray) or out.shape != shape:
        s.fail(f"{what} returned {type(out).__name__} of shape {getattr(out, 'shape', None)}, expected {shape}",
               "return a numpy array of the input's shape")
    if out.dtype.kind == "f" and not np.isfinite(out).all():
        s.fail(f"{what} returned non-finite values", "guard divisions (add an epsilon to variances)")


def _same(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> bool:
    return all(x.shape == y.shape and np.allclose(x, y, rtol=1e-6, atol=1e-6) for x, y in zip(a, b, strict=True))
