"""The inference server's batching, in this process (no Ray): a half's ``act`` calls become one forward pass.

Events, not timing: a pass starts when the last member of a half has asked, or when ``max_wait_s`` has passed
since the first did. The calls run on one asyncio loop here, so which of the two ends a batch is fixed by the
test, not by how fast anything runs.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

pytestmark = pytest.mark.usefixtures("training_plugins")


def _server(cartpole_config, half_sizes, max_wait_s):
    import gymnasium as gym

    from rlightning_core.distributed.inference import InferenceServerActor
    from rlightning_core.plugins import get_plugins

    env = gym.make("CartPole-v1")
    try:
        return InferenceServerActor(cartpole_config().policy, selection=get_plugins().selection(), seed=0,
                                    observation_space=env.observation_space, action_space=env.action_space,
                                    half_sizes=half_sizes, max_wait_s=max_wait_s)
    finally:
        env.close()


def _ask(server, *calls):
    """Answers to ``server.act(obs, half)`` for every ``(obs, half)``, all asked at once."""
    async def ask():
        return await asyncio.wait_for(asyncio.gather(*(server.act(obs, half) for obs, half in calls)), 600)

    return asyncio.run(ask())


def test_each_half_is_answered_in_one_pass_once_all_its_env_actors_asked(cartpole_config):
    server = _server(cartpole_config, [2, 2], max_wait_s=3600.0)  # no deadline: only a complete half runs
    obs = [np.random.default_rng(i).normal(size=(3, 4)).astype(np.float32) for i in range(4)]
    answers = _ask(server, (obs[0], 0), (obs[1], 1), (obs[2], 0), (obs[3], 1))
    assert server.stats()["requests"] == 4 and server.stats()["batches"] == 2
    assert [out.actions.shape for out, _ in answers] == [(3,)] * 4  # each actor gets its own rows back


def test_a_half_still_waiting_for_a_member_is_answered_after_max_wait_s(cartpole_config):
    server = _server(cartpole_config, [2, 1], max_wait_s=0.01)  # the other member of half 0 never asks
    [(out, version)] = _ask(server, (np.zeros((3, 4), np.float32), 0))
    assert out.actions.shape == (3,) and server.stats()["batches"] == 1
    assert version == server.weight_version()
