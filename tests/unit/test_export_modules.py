"""The torch modules ``rlightning export`` is built from: preprocessors compute what ``obs(update=False)`` does,
and a policy or preprocessor without one is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from gymnasium import spaces

from rlightning_core.errors import UserError
from rlightning_core.policy.base import BasePolicy, PolicyOutput, PolicyRole
from rlightning_core.preprocess.base import Preprocessor
from rlightning_core.preprocess.builtins import ClipObs, NormalizeObs, ScaleReward
from rlightning_core.preprocess.params import ClipObsParams, NormalizeObsParams


def test_normalize_obs_module_equals_the_frozen_numpy_transform():
    space = spaces.Box(-np.inf, np.inf, (5,), np.float32)
    pre = NormalizeObs(NormalizeObsParams(clip=3.0), observation_space=space)
    rng = np.random.default_rng(0)
    pre.obs((rng.normal(size=(256, 5)) * [1, 10, 100, 0.01, 5] + 7).astype(np.float32))  # statistics
    obs = (rng.normal(size=(1000, 5)) * 40).astype(np.float32)
    out = pre.export_module()(torch.from_numpy(obs)).numpy()
    expected = pre.obs(obs, update=False)
    assert out.dtype == np.float32 and np.array_equal(out, expected)
    assert (np.abs(expected) == 3.0).any()  # the clip is exercised


def test_clip_obs_module_equals_the_numpy_transform():
    pre = ClipObs(ClipObsParams(low=-0.5, high=2.0))
    obs = np.linspace(-3, 3, 60, dtype=np.float32).reshape(20, 3)
    assert np.array_equal(pre.export_module()(torch.from_numpy(obs)).numpy(), pre.obs(obs, update=False))


def test_a_reward_preprocessor_exports_as_identity():
    obs = torch.randn(4, 3)
    assert torch.equal(ScaleReward(num_envs=4).export_module()(obs), obs)


class _Shift(Preprocessor):
    def obs(self, obs, *, update=True):
        return obs + 1


class _Fixed(BasePolicy):
    def act(self, obs, *, deterministic=False):
        return PolicyOutput(actions=np.zeros(len(obs), dtype=np.int64))

    def learn(self, buffer, *, progress=0.0):
        return {}

    def modules(self):
        return {}


def test_an_observation_preprocessor_without_a_module_is_refused_by_name():
    with pytest.raises(UserError, match=r"preprocessor _Shift \(from \S*test_export_modules\) transforms observations"):
        _Shift().export_module()


def test_a_policy_without_export_module_is_refused_naming_it_and_its_plugin():
    policy = _Fixed(None, observation_space=spaces.Box(-1, 1, (2,)), action_space=spaces.Discrete(2),
                    role=PolicyRole.ROLLOUT)
    with pytest.raises(UserError, match=r"policy _Fixed \(from the plugin module \S*test_export_modules\) does not "
                                        r"provide export_module\(\)"):
        policy.export_module()
