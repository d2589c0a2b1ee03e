"""The ``pettingzoo`` env passes rlightning's conformance kit, and its task passes PettingZoo's own API test."""

from __future__ import annotations

from functools import partial

from rlightning_pettingzoo.params import PettingZooParams
from rlightning_pettingzoo.worker import PettingZooWorker


def test_simple_spread_conforms(conformance):
    report = conformance.check_env("pettingzoo", {"env": "mpe2.simple_spread_v3", "kwargs": {"max_cycles": 10}},
                                   num_envs=6, steps=40)
    assert not report.notes, report


def test_env_with_early_finishing_agents_conforms(conformance, relay_env):
    """Agents that finish early (then idle until their copy resets) keep the env contract."""

    def factory(params=None, *, num_envs, seed, worker_index=0, render_mode=None):
        return PettingZooWorker(PettingZooParams(env="mpe2.simple_spread_v3"), num_envs=num_envs, seed=seed,
                                env_fn=partial(_relay, relay_env))

    report = conformance.check_env(factory, num_envs=6, steps=30)
    assert not report.notes, report


def _relay(cls, render_mode):
    return cls(render_mode=render_mode)


def test_simple_spread_passes_pettingzoo_parallel_api_test():
    from mpe2 import simple_spread_v3
    from pettingzoo.test import parallel_api_test

    parallel_api_test(simple_spread_v3.parallel_env(max_cycles=10), num_cycles=30)
