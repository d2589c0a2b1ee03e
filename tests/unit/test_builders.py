"""The builders' optional arguments: what they accept, and the mistakes they refuse when the run is built."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rlightning_core.builders import build_data_buffer, build_env_group, build_policy_group
from rlightning_core.config.schema import ClusterConfig, EnvConfig, PolicyConfig
from rlightning_core.errors import ConfigError
from rlightning_core.plugins import load_plugins
from rlightning_core.preprocess.builtins import NormalizeObs
from rlightning_core.testing import plugin as testing_plugin


@pytest.fixture
def registry():
    """Core plus the test doubles (``testing-env``, ``testing-policy``)."""
    return load_plugins(allow=[], deny=[], extra=[("rlightning-testing", testing_plugin)]).registry


# -- build_data_buffer(obs_preprocessor=..., reward_preprocessor=...) ----------------------------------------


def test_plain_functions_become_stateless_preprocessors(registry) -> None:
    handle = build_data_buffer("rollout", {}, obs_preprocessor=lambda obs: obs * 2,
                               reward_preprocessor=lambda reward: reward - 1, registry=registry)
    obs_pre, reward_pre = handle.preprocessors
    obs = np.ones((3, 2), dtype=np.float32)
    assert np.array_equal(obs_pre.obs(obs), obs * 2) and np.array_equal(obs_pre.reward(obs[:, 0], obs[:, 0]), obs[:, 0])
    assert np.array_equal(reward_pre.reward(np.ones(3), np.zeros(3, bool)), np.zeros(3))
    assert np.array_equal(reward_pre.obs(obs), obs)
    assert obs_pre.state_dict() == {} and reward_pre.state_dict() == {}


def test_a_preprocessor_instance_is_kept_as_it_is(registry) -> None:
    pre = NormalizeObs()
    assert build_data_buffer("rollout", {}, obs_preprocessor=pre, registry=registry).preprocessors == [pre]


@pytest.mark.parametrize(("value", "message"), [
    (NormalizeObs, r"obs_preprocessor=.*the class NormalizeObs; pass an instance"),
    (42, r"obs_preprocessor=.*expected a Preprocessor .* or a function obs -> obs, got int"),
])
def test_what_is_not_a_preprocessor_is_refused_when_the_buffer_is_built(registry, value, message) -> None:
    with pytest.raises(TypeError, match=message):
        build_data_buffer("rollout", {}, obs_preprocessor=value, registry=registry)


def test_a_reward_preprocessor_that_is_not_callable_names_its_argument(registry) -> None:
    with pytest.raises(TypeError, match=r"reward_preprocessor=.*reward -> reward, got str"):
        build_data_buffer("rollout", {}, reward_preprocessor="scale", registry=registry)


# -- build_env_group(preprocess_fn=...) ----------------------------------------------------------------------


def _envs(n: int) -> list[EnvConfig]:
    return [EnvConfig(type="testing-env", params={}, name=f"e{i}") for i in range(n)]


def test_a_wrong_number_of_preprocess_fns_is_refused_in_ray_mode_before_ray_starts(registry) -> None:
    ray = pytest.importorskip("ray")
    started = ray.is_initialized()
    with pytest.raises(ValueError, match="got 1 functions for 2 env configs"):
        build_env_group(_envs(2), [lambda o: o], cluster=ClusterConfig(mode="ray"), registry=registry)
    assert ray.is_initialized() == started


def test_a_preprocess_fn_ray_cannot_pickle_is_refused_before_ray_starts(registry) -> None:
    ray = pytest.importorskip("ray")
    started = ray.is_initialized()
    lock = threading.Lock()

    def locked(obs):
        with lock:
            return obs

    with pytest.raises(TypeError, match=r"preprocess_fn for env\[1\] \(.*locked\) cannot be pickled.*lock"):
        build_env_group(_envs(2), [None, locked], cluster=ClusterConfig(mode="ray"), registry=registry)
    assert ray.is_initialized() == started


def test_the_group_reports_each_configs_preprocess_fn(registry) -> None:
    def f(obs):
        return obs

    cfgs = [EnvConfig(type="testing-env", params={}, num_workers=2), EnvConfig(type="testing-env", params={})]
    with build_env_group(cfgs, [None, f], registry=registry) as group:
        assert group.config_preprocess_fns == [None, f]
        assert group.preprocess_fns == [None, None, f]
        obs = group.reset(seed=0)
        assert [o.shape for o in obs] == [(1, 4)] * 3


# -- build_policy_group(is_colocated=...) --------------------------------------------------------------------


def test_is_colocated_means_placement_colocate(registry) -> None:
    group = build_policy_group("testing-policy", PolicyConfig(type="testing-policy"), ClusterConfig(mode="ray"),
                               is_colocated=True, registry=registry)
    assert group.is_colocated and group.cluster_cfg.placement == "colocate"
    plain = build_policy_group("testing-policy", PolicyConfig(type="testing-policy"), ClusterConfig(mode="ray"),
                               registry=registry)
    assert not plain.is_colocated and plain.cluster_cfg.placement == "default"


def test_is_colocated_contradicting_an_explicit_placement_is_refused(registry) -> None:
    with pytest.raises(ConfigError, match=r"cluster\.placement: 'disaggregate', but build_policy_group\(is_colocated"):
        build_policy_group("testing-policy", PolicyConfig(type="testing-policy"),
                           ClusterConfig(mode="ray", placement="disaggregate"), is_colocated=True, registry=registry)


def test_build_engine_refuses_a_colocated_policy_group_in_a_run_placed_otherwise(registry) -> None:
    from rlightning_core.builders import build_engine
    from rlightning_core.config.schema import MainConfig

    config = MainConfig(env=[EnvConfig(type="testing-env", params={})], policy=PolicyConfig(type="testing-policy"),
                        cluster=ClusterConfig(mode="ray", placement="disaggregate"))
    group = build_policy_group("testing-policy", config.policy, ClusterConfig(mode="ray"), is_colocated=True,
                               registry=registry)
    with pytest.raises(ConfigError, match=r"cluster\.placement: 'disaggregate', but the policy group was built with "
                                          r"is_colocated=True"):
        build_engine(config, None, group, None, registry=registry)
