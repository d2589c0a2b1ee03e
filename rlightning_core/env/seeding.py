"""Seed derivation: one run seed, a stable independent seed for every RNG of the run.

Every seed rlightning hands out is ``derive_seed(run_seed, *keys)``: numpy's ``SeedSequence`` hashes the run
seed and a key path into a well-mixed 31-bit value, so neighbouring keys give unrelated seeds (unlike
``seed + worker``), the result depends neither on the platform nor on the order in which workers are built,
and any RNG (``random``, numpy, torch, gymnasium) accepts it.

The first key names the consumer; the following keys locate it. Conventions (use the constants):

=========================================  ======================================  ======================
Consumer                                   Call                                    Constant
=========================================  ======================================  ======================
training env worker ``w`` of env config    ``derive_seed(seed, 1, c, w)``; its     ``ENV_KEY``
``c`` (``w`` counts within config ``c``)   env ``i`` is seeded with that ``+ i``
evaluation env worker ``w`` of config      ``derive_seed(seed, 2, c, w)``          ``EVAL_ENV_KEY``
``c`` (an evaluator re-seeding its ``k``-  (``derive_seed(seed, 2, c, k)``)
th evaluation uses ``k`` in place of w)
learner (train) policy of rank ``r``       ``derive_seed(seed, 3, r)``             ``TRAIN_POLICY_KEY``
rollout (eval) policy copy ``r``           ``derive_seed(seed, 4, r)``             ``ROLLOUT_POLICY_KEY``
env worker ``w`` re-seeded when a run      ``derive_seed(seed, 5, w, iteration)``  ``ENV_RESUME_KEY``
resumes at ``iteration``
=========================================  ======================================  ======================

First keys ``6``-``99`` are reserved for core; plugins pick a first key of ``100`` or more and document it.
"""

from __future__ import annotations

import operator

import numpy as np

__all__ = [
    "ENV_KEY",
    "ENV_RESUME_KEY",
    "EVAL_ENV_KEY",
    "MAX_SEED",
    "ROLLOUT_POLICY_KEY",
    "TRAIN_POLICY_KEY",
    "derive_seed",
]

ENV_KEY = 1
"""Training env workers: ``derive_seed(seed, ENV_KEY, config_index, worker_index)``."""
EVAL_ENV_KEY = 2
"""Evaluation env workers: ``derive_seed(seed, EVAL_ENV_KEY, config_index, worker_index)``."""
TRAIN_POLICY_KEY = 3
"""Learner policies: ``derive_seed(seed, TRAIN_POLICY_KEY, rank)``."""
ROLLOUT_POLICY_KEY = 4
"""Rollout policy copies: ``derive_seed(seed, ROLLOUT_POLICY_KEY, index)``."""
ENV_RESUME_KEY = 5
"""Env workers re-seeded on resume: ``derive_seed(seed, ENV_RESUME_KEY, worker, iteration)``."""

MAX_SEED = 2**31 - 1
"""Largest value :func:`derive_seed` returns (seeds are non-negative and fit a signed 32-bit int)."""


def _check(name: str, value: object) -> int:
    try:
        number = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{name} must be >= 0, got {number}")
    return number


def derive_seed(run_seed: int, *keys: int) -> int:
    """A seed in ``[0, 2**31 - 1]`` derived from ``run_seed`` and a key path, stable across runs and machines.

    ``derive_seed(s)`` with no keys is the root of the tree; ``derive_seed(s, *keys)`` equals the seed of
    ``numpy.random.SeedSequence(s).spawn(...)`` followed along ``keys``, so it composes with numpy's own
    spawning.

    Args:
        run_seed: the run's seed (``MainConfig.seed``), a non-negative int.
        *keys: non-negative ints naming the consumer, e.g. ``1, config_index, worker_index`` for an env worker
            (see the module docstring for the conventions).

    Returns:
        A non-negative int below ``2**31``.

    Raises:
        TypeError: a seed or key is not an int.
        ValueError: a seed or key is negative.

    Example::

        >>> derive_seed(0, 1, 0, 0) == derive_seed(0, 1, 0, 0)
        True
        >>> derive_seed(0, 1, 0, 0) != derive_seed(0, 1, 0, 1)
        True
    """
    entropy = _check("run_seed", run_seed)
    spawn_key = tuple(_check(f"key {i}", k) for i, k in enumerate(keys))
    state = np.random.SeedSequence(entropy, spawn_key=spawn_key).generate_state(1, dtype=np.uint32)
    return int(state[0]) & MAX_SEED
