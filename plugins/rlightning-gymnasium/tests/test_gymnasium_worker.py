"""GymnasiumWorker: the EnvWorker contract on real Gymnasium envs."""

from __future__ import annotations

import threading
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env
from rlightning_gymnasium.params import GymnasiumParams
from rlightning_gymnasium.worker import GymnasiumWorker, make_single_env

from rlightning_core.env.base import EnvWorker, StepBatch

#: Advice Gymnasium gives on envs that are fine: bounds of -inf/inf (ClipAction makes the action space
#: unbounded, which also earns "use a symmetric space"), "this env is wrapped", and RescaleAction building its
#: float32 Box from float64 bounds (YAML floats).
BENIGN_CHECKER_WARNINGS = ("infinity", "different from the unwrapped version", "precision lowered",
                           "recommend using a symmetric and normalized space")


def make_worker(num_envs: int = 4, seed: int = 0, **params: object) -> GymnasiumWorker:
    params.setdefault("id", "CartPole-v1")
    return GymnasiumWorker(GymnasiumParams(**params), num_envs=num_envs, seed=seed, worker_index=0)


def random_actions(worker: GymnasiumWorker, steps: int, seed: int = 0) -> np.ndarray:
    space = worker.action_space
    rng = np.random.default_rng(seed)
    if isinstance(space, gymnasium.spaces.Discrete):
        return rng.integers(0, space.n, size=(steps, worker.num_envs))
    return rng.uniform(space.low, space.high, size=(steps, worker.num_envs, *space.shape)).astype(space.dtype)


@pytest.mark.parametrize("params", [
    {"id": "CartPole-v1"},
    {"id": "CartPole-v1", "max_episode_steps": 5,
     "wrappers": [{"type": "ClipReward", "kwargs": {"min_reward": 0.0, "max_reward": 0.5}}]},
    {"id": "Pendulum-v1", "wrappers": [
        {"type": "gymnasium.wrappers.RescaleAction", "kwargs": {"min_action": -1.0, "max_action": 1.0}},
        {"type": "ClipAction"},
    ]},
    {"id": "MountainCarContinuous-v0", "wrappers": [{"type": "TimeAwareObservation"}]},
])
def test_gymnasium_env_checker_passes_on_the_single_envs(params: dict) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = make_single_env(GymnasiumParams(**params))
        check_env(env, skip_render_check=True)
    messages = [str(w.message) for w in caught]
    unexpected = [m for m in messages if not any(b in m for b in BENIGN_CHECKER_WARNINGS)]
    assert not unexpected
    env.close()


def test_worker_honours_the_contract() -> None:
    with make_worker(num_envs=3) as w:
        assert isinstance(w, EnvWorker)
        assert w.observation_space == gymnasium.spaces.Box(-np.inf, np.inf, (4,), np.float32) or \
            w.observation_space.shape == (4,)
        assert w.action_space == gymnasium.spaces.Discrete(2)
        obs = w.reset()
        assert obs.shape == (3, 4) and obs.dtype == np.float32
        batch = w.step(np.zeros(3, dtype=np.int64))
        assert isinstance(batch, StepBatch)
        assert batch.obs.shape == (3, 4)
        assert batch.reward.dtype == np.float32 and batch.reward.shape == (3,)
        assert batch.terminated.dtype == np.bool_ and batch.truncated.dtype == np.bool_
        assert batch.final_obs is None and batch.episodes == [] and batch.metrics == {}


def test_step_before_reset_is_a_clear_error() -> None:
    with make_worker() as w, pytest.raises(RuntimeError, match=r"reset\(\) before step\(\)"):
        w.step(np.zeros(4, dtype=np.int64))


def test_returned_observations_are_not_overwritten_by_later_steps() -> None:
    with make_worker() as w:
        first = w.reset(seed=1)
        kept = first.copy()
        b1 = w.step(np.ones(4, dtype=np.int64))
        kept_b1 = b1.obs.copy()
        w.step(np.ones(4, dtype=np.int64))
        np.testing.assert_array_equal(first, kept)
        np.testing.assert_array_equal(b1.obs, kept_b1)


def rollout(w: GymnasiumWorker, actions: np.ndarray, seed: int | None) -> list[np.ndarray]:
    out = [w.reset(seed=seed)]
    for a in actions:
        b = w.step(a)
        out += [b.obs, b.reward, b.terminated, b.truncated]
    return out


def test_same_seed_same_sequence_and_env_i_gets_seed_plus_i() -> None:
    actions = random_actions(make_worker(), 60)
    with make_worker() as a, make_worker() as b, make_worker() as c:
        ra, rb, rc = rollout(a, actions, 7), rollout(b, actions, 7), rollout(c, actions, 8)
    for x, y in zip(ra, rb, strict=True):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(ra[0], rc[0])
    single = make_single_env(GymnasiumParams(id="CartPole-v1"))
    for i in range(4):
        np.testing.assert_array_equal(ra[0][i], single.reset(seed=7 + i)[0])


def test_first_unseeded_reset_uses_the_worker_seed() -> None:
    with make_worker(seed=11) as a, make_worker(seed=11) as b, make_worker(seed=12) as c:
        np.testing.assert_array_equal(a.reset(), b.reset())
        assert not np.array_equal(a.reset(seed=None), c.reset())
    with make_worker(seed=11) as d, make_worker() as e:
        np.testing.assert_array_equal(d.reset(), e.reset(seed=11))


def test_truncation_fills_final_obs_with_the_real_last_observation() -> None:
    n, horizon = 4, 5
    with make_worker(num_envs=n, max_episode_steps=horizon) as w:
        actions = random_actions(w, 3 * horizon, seed=3)
        obs = w.reset(seed=0)
        seen_truncation = False
        for t, a in enumerate(actions):
            prev = obs
            b = w.step(a)
            obs = b.obs
            done = b.terminated | b.truncated
            if not done.any():
                assert b.final_obs is None
                continue
            assert b.final_obs is not None and b.final_obs.shape == b.obs.shape
            for i in np.flatnonzero(done):
                # the real last observation is a CartPole step away from the previous one, not a reset state
                assert not np.array_equal(b.final_obs[i], b.obs[i])
                assert np.abs(b.final_obs[i] - prev[i]).max() < 0.5
                assert np.abs(b.obs[i]).max() <= 0.05  # CartPole resets uniformly in [-0.05, 0.05]
            np.testing.assert_array_equal(b.final_obs[~done], b.obs[~done])
            if b.truncated.any():
                seen_truncation = True
                assert not (b.truncated & b.terminated).any()
                assert (t + 1) % horizon == 0
        assert seen_truncation


def manual_episodes(params: GymnasiumParams, seed: int, actions: np.ndarray) -> list[tuple[float, int]]:
    """Episodes of one env stepped by hand with a column of actions (reset seeded once, like the vector)."""
    env = make_single_env(params)
    env.reset(seed=seed)
    episodes, ret, length = [], 0.0, 0
    for a in actions:
        _, r, term, trunc, _ = env.step(a)
        ret += float(r)
        length += 1
        if term or trunc:
            episodes.append((ret, length))
            ret, length = 0.0, 0
            env.reset()
    return episodes


@pytest.mark.parametrize("params", [{"id": "CartPole-v1", "max_episode_steps": 30},
                                    {"id": "MountainCarContinuous-v0", "max_episode_steps": 20}])
def test_episode_stats_match_a_manual_single_env_loop(params: dict) -> None:
    p = GymnasiumParams(**params)
    n, steps, seed = 3, 120, 5
    with GymnasiumWorker(p, num_envs=n, seed=0) as w:
        actions = random_actions(w, steps, seed=1)
        w.reset(seed=seed)
        got: dict[int, list[tuple[float, int]]] = {i: [] for i in range(n)}
        for a in actions:
            for ep in w.step(a).episodes:
                got[ep.env_index].append((ep.episode_return, ep.length))
    for i in range(n):
        expected = manual_episodes(p, seed + i, actions[:, i])
        assert expected, "the test needs finished episodes"
        assert [n for _, n in got[i]] == [n for _, n in expected]
        assert [r for r, _ in got[i]] == pytest.approx([r for r, _ in expected])


def test_reset_restarts_the_running_episode_stats() -> None:
    with make_worker(num_envs=2, max_episode_steps=4) as w:
        w.reset(seed=0)
        w.step(np.zeros(2, dtype=np.int64))
        w.reset(seed=0)
        eps = []
        for _ in range(4):
            eps += w.step(np.zeros(2, dtype=np.int64)).episodes
        assert all(e.length <= 4 for e in eps)


def test_info_metrics_are_collected_by_name(metrics_env_id: str) -> None:
    n = 3
    with make_worker(num_envs=n, id=metrics_env_id, kwargs={"reset_metrics": True}) as w:
        w.reset(seed=0)
        for t in range(1, 7):
            b = w.step(np.zeros(n, dtype=np.int64))
            # every env reports each step, including the step that ends its episode (from final_info);
            # the reset info of the next episode ({"foo": -100}) is not a step metric
            assert b.metrics["foo"] == [1.0] * n
            assert b.metrics["nested/bar"] == [2.0] * n
            assert b.metrics["t"] == [float((t - 1) % 3 + 1)] * n
            assert b.terminated.all() == (t % 3 == 0)
            assert all(isinstance(v, float) for v in b.metrics["foo"])


def test_non_numeric_metrics_are_an_error(metrics_env_id: str) -> None:
    with make_worker(num_envs=2, id=metrics_env_id, kwargs={"bad_metric": True}) as w:
        w.reset(seed=0)
        with pytest.raises(TypeError, match=r"info\[\"metrics\"\]\['name'\] must be a number"):
            w.step(np.zeros(2, dtype=np.int64))


def test_async_vectorization_matches_sync() -> None:
    actions = random_actions(make_worker(num_envs=2), 40, seed=2)
    with make_worker(num_envs=2, vectorization="async", max_episode_steps=10) as a, \
            make_worker(num_envs=2, max_episode_steps=10) as s:
        ra, rs = rollout(a, actions, 3), rollout(s, actions, 3)
        assert a.vector_env.__class__.__name__ == "AsyncVectorEnv"
    for x, y in zip(ra, rs, strict=True):
        np.testing.assert_array_equal(x, y)


def test_close_is_idempotent() -> None:
    w = make_worker(vectorization="async", num_envs=2)
    w.reset()
    w.close()
    w.close()


def test_dict_observations_get_final_obs_too() -> None:
    params = GymnasiumParams(id="CartPole-v1", max_episode_steps=2,
                             wrappers=[{"type": "TimeAwareObservation", "kwargs": {"flatten": False}}])
    with GymnasiumWorker(params, num_envs=2, seed=0) as w:
        assert isinstance(w.observation_space, gymnasium.spaces.Dict)
        w.reset(seed=0)
        w.step(np.zeros(2, dtype=np.int64))
        b = w.step(np.zeros(2, dtype=np.int64))
        assert b.truncated.all()
        np.testing.assert_array_equal(b.final_obs["time"], [[2], [2]])
        np.testing.assert_array_equal(b.obs["time"], [[0], [0]])
        np.testing.assert_array_equal(b.final_obs["obs"][0] == b.obs["obs"][0], [False] * 4)


def checkpoint_round_trip(state: dict) -> dict:
    """What a checkpoint does: numpy -> torch tensors -> ``torch.load(weights_only=True)`` -> numpy."""
    torch = pytest.importorskip("torch")
    import io

    from rlightning_core.checkpoint.manager import to_numpy_tree, to_tensor_tree

    buf = io.BytesIO()
    torch.save(to_tensor_tree(state), buf)
    buf.seek(0)
    return to_numpy_tree(torch.load(buf, weights_only=True))


@pytest.mark.parametrize("params", [
    {"id": "CartPole-v1", "max_episode_steps": 20, "wrappers": [{"type": "NormalizeObservation"}]},
    {"id": "Pendulum-v1", "max_episode_steps": 15},
])
def test_state_dict_restores_the_envs_exactly(params: dict) -> None:
    p = GymnasiumParams(**params)
    with GymnasiumWorker(p, num_envs=3, seed=0) as a, GymnasiumWorker(p, num_envs=3, seed=99) as b:
        actions = random_actions(a, 80, seed=4)
        a.reset(seed=1)
        for act in actions[:30]:
            a.step(act)
        state = a.state_dict()
        assert state is not None
        b.load_state_dict(checkpoint_round_trip(state))
        for act in actions[30:]:
            x, y = a.step(act), b.step(act)
            np.testing.assert_array_equal(x.obs, y.obs)
            np.testing.assert_array_equal(x.reward, y.reward)
            np.testing.assert_array_equal(x.truncated, y.truncated)
            assert [(e.env_index, e.episode_return, e.length) for e in x.episodes] == \
                [(e.env_index, e.episode_return, e.length) for e in y.episodes]


def test_state_dict_is_none_when_it_cannot_be_exact(metrics_env_id: str) -> None:
    with make_worker(num_envs=2) as fresh:
        assert fresh.state_dict() is None  # never reset
    with make_worker(num_envs=2, vectorization="async") as remote:
        remote.reset()
        assert remote.state_dict() is None  # envs live in subprocesses
    with make_worker(num_envs=2, id=metrics_env_id) as w:
        w.reset()
        w.vector_env.envs[1].unwrapped.handle = threading.Lock()  # state that is not data
        assert w.state_dict() is None
