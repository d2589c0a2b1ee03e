"""EnvGroup, build_env_group, define_env_instance_cfgs and derive_seed, with the real gymnasium plugin."""

from __future__ import annotations

from typing import Any

import attrs
import gymnasium
import numpy as np
import pytest

from rlightning_core.config.schema import EnvConfig
from rlightning_core.env.base import EpisodeStats, StepBatch
from rlightning_core.env.group import EnvGroup, build_env_group, define_env_instance_cfgs
from rlightning_core.env.seeding import ENV_KEY, EVAL_ENV_KEY, MAX_SEED, derive_seed
from rlightning_core.errors import ConfigError
from rlightning_core.plugins import load_plugins
from rlightning_core.registry import ComponentSpec, Registry

pytest.importorskip("rlightning_gymnasium", reason="needs `pip install -e plugins/rlightning-gymnasium`")


@pytest.fixture
def registry() -> Registry:
    """Core plus the installed gymnasium plugin only (strict: a broken install fails the test)."""
    return load_plugins(allow=["rlightning-gymnasium"], deny=[], strict=True).registry


def cartpole(**kw: Any) -> EnvConfig:
    params = {"id": "CartPole-v1", **kw.pop("params", {})}
    return EnvConfig(type="gymnasium", params=params, **kw)


def zeros(group: EnvGroup) -> list[np.ndarray]:
    return [np.zeros(n, dtype=np.int64) for n in group.num_envs_per_worker]


# -- derive_seed ---------------------------------------------------------------------------------------------


def test_derive_seed_is_stable_in_range_and_spreads() -> None:
    assert derive_seed(0, 1, 0, 0) == derive_seed(0, 1, 0, 0)
    seeds = {derive_seed(s, k, c, w) for s in range(3) for k in (1, 2) for c in range(4) for w in range(8)}
    assert len(seeds) == 3 * 2 * 4 * 8
    assert all(0 <= s <= MAX_SEED for s in seeds)
    assert derive_seed(0, 1) != derive_seed(0, 1, 0)


def test_derive_seed_follows_numpy_spawn_tree() -> None:
    child = np.random.SeedSequence(42).spawn(2)[1].spawn(4)[3]
    assert derive_seed(42, 1, 3) == int(child.generate_state(1, dtype=np.uint32)[0]) & MAX_SEED


@pytest.mark.parametrize(("args", "error"), [((-1,), ValueError), ((0, -2), ValueError), ((1.5,), TypeError),
                                             ((0, "a"), TypeError)])
def test_derive_seed_rejects_bad_input(args: tuple, error: type) -> None:
    with pytest.raises(error):
        derive_seed(*args)


# -- define_env_instance_cfgs --------------------------------------------------------------------------------


def test_define_env_instance_cfgs_makes_independent_single_worker_copies() -> None:
    cfg = cartpole(num_workers=3, num_envs=4, name="cp", params={"kwargs": {"sutton_barto_reward": True}})
    copies = define_env_instance_cfgs(cfg, num_workers=3)
    assert len(copies) == 3
    for c in copies:
        assert c.num_workers == 1
        assert attrs.evolve(c, num_workers=3) == cfg
    copies[0].params["kwargs"]["sutton_barto_reward"] = False
    assert cfg.params["kwargs"]["sutton_barto_reward"] is True
    assert copies[1].params["kwargs"]["sutton_barto_reward"] is True
    assert define_env_instance_cfgs(cfg) == [copies[1]]
    with pytest.raises(ValueError, match="num_workers"):
        define_env_instance_cfgs(cfg, 0)


# -- building ------------------------------------------------------------------------------------------------


def test_two_configs_expand_into_workers_with_labels(registry: Registry) -> None:
    cfgs = [cartpole(num_workers=2, num_envs=3), cartpole(num_envs=2, params={"max_episode_steps": 5})]
    with build_env_group(cfgs, registry=registry) as group:
        assert group.num_workers == 3
        assert group.config_indices == [0, 0, 1]
        assert group.worker_indices == [0, 1, 0]
        assert group.num_envs_per_worker == [3, 3, 2]
        assert group.total_envs == 8
        # two unnamed configs share the label CartPole-v1: each gets its config index
        assert group.labels == ["CartPole-v1[0]", "CartPole-v1[0]", "CartPole-v1[1]"]
        assert group.observation_space.shape == (4,)
        assert group.action_space == gymnasium.spaces.Discrete(2)
        assert [w.seed for w in group.workers] == [derive_seed(0, 1, 0, 0), derive_seed(0, 1, 0, 1),
                                                   derive_seed(0, 1, 1, 0)]
        assert "CartPole-v1[0] x2" in repr(group)


def test_names_are_labels_and_one_config_is_accepted(registry: Registry) -> None:
    with build_env_group(cartpole(name="short", num_workers=2), registry=registry) as group:
        assert group.labels == ["short", "short"]
    with build_env_group([cartpole(name="a"), cartpole(name="b")], registry=registry) as group:
        assert group.labels == ["a", "b"]


def test_space_mismatch_names_the_env_configs(registry: Registry) -> None:
    cfgs = [cartpole(), EnvConfig(type="gymnasium", params={"id": "Acrobot-v1"})]
    with pytest.raises(ConfigError) as info:
        build_env_group(cfgs, registry=registry)
    msg = str(info.value)
    assert "observation_space differs between env configs" in msg
    assert "env[0] (CartPole-v1)" in msg and "env[1] (Acrobot-v1)" in msg
    assert "one policy serves every env of a group" in msg


def test_dict_params_are_structured_and_errors_carry_paths(registry: Registry) -> None:
    bad = [cartpole(params={"max_episode_steps": 0}),
           EnvConfig(type="gymnasum", params={"id": "CartPole-v1"})]
    with pytest.raises(ConfigError) as info:
        build_env_group(bad, registry=registry)
    problems = info.value.problems
    assert problems[0] == "env[0].params.max_episode_steps: must be >= 1, got 0"
    assert problems[1].startswith("env[1].type: unknown env 'gymnasum'. Did you mean 'gymnasium'?")


def test_structured_params_of_the_wrong_class_are_an_error(registry: Registry) -> None:
    @attrs.define
    class Other:
        id: str = "CartPole-v1"

    with pytest.raises(ConfigError, match=r"env\[0\]\.params: env 'gymnasium' takes GymnasiumParams, got"):
        build_env_group(EnvConfig(type="gymnasium", params=Other()), registry=registry)


def test_default_registry_is_the_process_plugins() -> None:
    with build_env_group(cartpole()) as group:
        assert group.num_workers == 1


def test_preprocess_fns_are_paired_per_worker(registry: Registry) -> None:
    def f(x: Any) -> Any:
        return x

    def g(x: Any) -> Any:
        return x

    cfgs = [cartpole(num_workers=2), cartpole(num_envs=2)]
    with build_env_group(cfgs, f, registry=registry) as group:
        assert group.preprocess_fns == [f, f, f]
    with build_env_group(cfgs, [f, g], registry=registry) as group:
        assert group.preprocess_fns == [f, f, g]
    with build_env_group(cfgs, registry=registry) as group:
        assert group.preprocess_fns == [None, None, None]
    with pytest.raises(ValueError, match="one per env config"):
        build_env_group(cfgs, [f], registry=registry)


# -- stepping ------------------------------------------------------------------------------------------------


def test_step_async_step_wait_and_their_misuse(registry: Registry) -> None:
    with build_env_group([cartpole(num_workers=2, num_envs=2)], registry=registry) as group:
        obs = group.reset(seed=0)
        assert [o.shape for o in obs] == [(2, 4), (2, 4)]
        with pytest.raises(RuntimeError, match="without a pending step_async"):
            group.step_wait()
        group.step_async(zeros(group))
        with pytest.raises(RuntimeError, match="called twice"):
            group.step_async(zeros(group))
        with pytest.raises(RuntimeError, match="step_wait"):
            group.reset()
        batches = group.step_wait()
        assert len(batches) == 2 and all(isinstance(b, StepBatch) for b in batches)
        with pytest.raises(RuntimeError, match="without a pending"):
            group.step_wait()
        with pytest.raises(ValueError, match="one action array per worker"):
            group.step_async(zeros(group)[:1])
        assert len(group.step(zeros(group))) == 2


def trajectory(group: EnvGroup, seed: int | None, steps: int = 30) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    out = list(group.reset(seed=seed))
    for _ in range(steps):
        batches = group.step([rng.integers(0, 2, size=n) for n in group.num_envs_per_worker])
        out += [b.obs for b in batches] + [b.reward for b in batches]
    return out


def test_reset_seeding_is_deterministic_and_derived(registry: Registry) -> None:
    cfgs = [cartpole(num_workers=2, num_envs=2), cartpole(num_envs=3, params={"max_episode_steps": 7})]
    with build_env_group(cfgs, registry=registry) as a, \
            build_env_group(cfgs, seed=99, registry=registry) as b:
        ta, tb = trajectory(a, seed=5), trajectory(b, seed=5)
        for x, y in zip(ta, tb, strict=True):
            np.testing.assert_array_equal(x, y)
        # worker w of config c is reset with derive_seed(seed, 1, c, w), its env i with that + i
        single = gymnasium.make("CartPole-v1")
        obs = a.reset(seed=5)
        for k, (c, w) in enumerate(zip(a.config_indices, a.worker_indices, strict=True)):
            for i in range(a.num_envs_per_worker[k]):
                expected, _ = single.reset(seed=derive_seed(5, ENV_KEY, c, w) + i)
                np.testing.assert_array_equal(obs[k][i], expected)
        assert not np.array_equal(a.reset(seed=6)[0], obs[0])


def test_build_seed_makes_unseeded_resets_reproducible(registry: Registry) -> None:
    cfg = cartpole(num_workers=2, num_envs=2)
    with build_env_group(cfg, seed=3, registry=registry) as a, \
            build_env_group(cfg, seed=3, registry=registry) as b, \
            build_env_group(cfg, seed=3, registry=registry, seed_offset_key=EVAL_ENV_KEY) as e:
        first = a.reset()
        for x, y in zip(first, b.reset(), strict=True):
            np.testing.assert_array_equal(x, y)
        # the build seed and an explicit reset seed agree (same derivation)
        for x, y in zip(first, a.reset(seed=3), strict=True):
            np.testing.assert_array_equal(x, y)
        assert not np.array_equal(e.reset()[0], first[0])
        assert e.seed_key == EVAL_ENV_KEY
        for x, y in zip(e.reset(seed=3), e.reset(seed=3), strict=True):
            np.testing.assert_array_equal(x, y)


def test_episode_stats_are_collected_per_label(registry: Registry) -> None:
    cfgs = [cartpole(name="long", num_envs=2),
            cartpole(name="short", num_envs=3, params={"max_episode_steps": 4})]
    with build_env_group(cfgs, registry=registry) as group:
        group.reset(seed=0)
        for _ in range(4):
            group.step(zeros(group))
        stats = group.pop_episode_stats()
        assert "short" in stats
        assert all(isinstance(e, EpisodeStats) for e in stats["short"])
        assert sorted(e.env_index for e in stats["short"]) == [0, 1, 2]
        assert all(e.length == 4 and e.episode_return == 4.0 for e in stats["short"])
        assert group.pop_episode_stats() == {}
        assert group.pop_metrics() == {}


# -- contracts with any plugin (a stand-in env registered in a private registry) -----------------------------


@attrs.define
class FakeWorker:
    num_envs: int
    observation_space: Any = attrs.Factory(lambda: gymnasium.spaces.Box(-1.0, 1.0, (2,), np.float32))
    action_space: Any = attrs.Factory(lambda: gymnasium.spaces.Discrete(3))
    closed: int = 0
    seeds: list = attrs.Factory(list)
    fail_close: bool = False

    def reset(self, seed: int | None = None) -> np.ndarray:
        self.seeds.append(seed)
        return np.zeros((self.num_envs, 2), np.float32)

    def step(self, actions: np.ndarray) -> StepBatch:
        n = self.num_envs
        return StepBatch(obs=np.zeros((n, 2), np.float32), reward=np.ones(n, np.float32),
                         terminated=np.ones(n, bool), truncated=np.zeros(n, bool),
                         final_obs=np.zeros((n, 2), np.float32),
                         episodes=[EpisodeStats(i, 1.0, 1) for i in range(n)],
                         metrics={"score": [float(a) for a in actions]})

    def close(self) -> None:
        self.closed += 1
        if self.fail_close:
            raise OSError("cannot close")


@attrs.define(frozen=True, kw_only=True)
class FakeParams:
    id: str = "Fake-v0"
    space: int = 2
    kind: str = "worker"


def fake_registry(built: list) -> Registry:
    def factory(params: FakeParams, *, num_envs: int, seed: int, worker_index: int) -> Any:
        if params.kind == "object":
            built.append(object())
            return built[-1]
        if params.kind == "wrong_n":
            num_envs += 1
        space = gymnasium.spaces.Box(-1.0, 1.0, (params.space,), np.float32)
        w = FakeWorker(num_envs, observation_space=space)
        built.append(w)
        return w

    reg = Registry()
    reg.add(ComponentSpec(kind="env", name="fake", factory=factory, config=FakeParams, description="",
                          plugin="fake", distribution="fake-dist", version="1"))
    return reg


def test_metrics_are_collected_per_label_and_render_mode_only_when_given() -> None:
    built: list = []
    cfgs = [EnvConfig(type="fake", num_envs=2, num_workers=2), EnvConfig(type="fake", name="b")]
    with build_env_group(cfgs, registry=fake_registry(built)) as group:
        assert group.labels == ["fake", "fake", "b"]  # dict params without an id: the type is the label
        group.reset(seed=1)
        assert [w.seeds for w in built] == [[derive_seed(1, 1, 0, 0)], [derive_seed(1, 1, 0, 1)],
                                            [derive_seed(1, 1, 1, 0)]]
        group.step([np.array([1, 2]), np.array([3, 4]), np.array([5])])
        group.step([np.array([6, 7]), np.array([8, 9]), np.array([0])])
        assert group.pop_metrics() == {"fake": {"score": [1.0, 2.0, 3.0, 4.0, 6.0, 7.0, 8.0, 9.0]},
                                       "b": {"score": [5.0, 0.0]}}
        assert [len(v) for v in group.pop_episode_stats().values()] == [8, 2]
    assert [w.closed for w in built] == [1, 1, 1]
    group.close()  # idempotent
    assert [w.closed for w in built] == [1, 1, 1]
    # render_mode reaches the factory only when given (this factory does not take it)
    with pytest.raises(TypeError, match="render_mode"):
        build_env_group(EnvConfig(type="fake"), registry=fake_registry([]), render_mode="rgb_array")


def test_failed_builds_close_what_was_built() -> None:
    built: list = []
    cfgs = [EnvConfig(type="fake", num_workers=2), EnvConfig(type="fake", params={"space": 3})]
    with pytest.raises(ConfigError, match="observation_space differs"):
        build_env_group(cfgs, registry=fake_registry(built))
    assert [w.closed for w in built] == [1, 1, 1]

    built.clear()
    cfgs = [EnvConfig(type="fake"), EnvConfig(type="fake", params={"kind": "object"})]
    with pytest.raises(TypeError, match=r"env\[1\]: env 'fake' from fake-dist 1 returned object, not an env"):
        build_env_group(cfgs, registry=fake_registry(built))
    assert built[0].closed == 1

    with pytest.raises(TypeError, match="built 2 envs, the config asks for num_envs=1"):
        build_env_group(EnvConfig(type="fake", params={"kind": "wrong_n"}), registry=fake_registry([]))


def test_close_closes_every_worker_even_if_one_fails() -> None:
    workers = [FakeWorker(1, fail_close=True), FakeWorker(1), FakeWorker(1, fail_close=True)]
    group = EnvGroup(workers)
    with pytest.raises(OSError, match="cannot close") as info:
        group.close()
    assert [w.closed for w in workers] == [1, 1, 1]
    assert any("also failed" in note for note in getattr(info.value, "__notes__", []))


def test_group_defaults_and_validation() -> None:
    group = EnvGroup([FakeWorker(2), FakeWorker(3)])
    assert group.labels == ["env", "env"]
    assert group.config_indices == [0, 0] and group.worker_indices == [0, 1]
    assert group.total_envs == 5
    with pytest.raises(ValueError, match="at least one worker"):
        EnvGroup([])
    with pytest.raises(ValueError, match="labels: expected one entry per worker"):
        EnvGroup([FakeWorker(1)], labels=["a", "b"])
    with pytest.raises(ConfigError, match="action_space differs"):
        EnvGroup([FakeWorker(1), FakeWorker(1, action_space=gymnasium.spaces.Discrete(4))],
                 config_indices=[0, 1], labels=["x", "y"])


def test_render_mode_reaches_the_gymnasium_envs(registry: Registry) -> None:
    with build_env_group(cartpole(num_envs=2), registry=registry, render_mode="rgb_array") as group:
        (worker,) = group.workers
        assert worker.render_mode == "rgb_array"
        assert [e.render_mode for e in worker.vector_env.envs] == ["rgb_array", "rgb_array"]
