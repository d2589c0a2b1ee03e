"""The conformance kit (rlightning_core.testing): core's components pass, broken ones fail with the fix."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from rlightning_core.env.base import StepBatch
from rlightning_core.preprocess.base import Preprocessor
from rlightning_core.testing import (
    ConformanceError,
    check_buffer,
    check_component,
    check_engine,
    check_env,
    check_logger,
    check_policy,
    check_preprocessor,
)
from rlightning_core.testing.doubles import (
    HookRecorder,
    RecordingLogger,
    SpaceEnv,
    SpaceEnvParams,
    TinyPolicy,
    TinyPolicyParams,
    default_spaces,
    make_space_env,
)

# -- broken components (module level, like the doubles) ---------------------------------------------------------


class Float64Rewards(SpaceEnv):
    def step(self, actions):
        batch = super().step(actions)
        batch.reward = batch.reward.astype(np.float64)
        return batch


class NoFinalObs(SpaceEnv):
    def step(self, actions):
        batch = super().step(actions)
        batch.final_obs = None
        return batch


class Unseeded(SpaceEnv):
    def reset(self, seed=None):
        return super().reset(seed=None if seed is None else int(np.random.default_rng().integers(1 << 30)))


class WrongShape(SpaceEnv):
    def reset(self, seed=None):
        return super().reset(seed)[:, :2]


class WrongReturn(SpaceEnv):
    """Reports episode returns that are not the sum of the episode's rewards."""

    def step(self, actions):
        batch = super().step(actions)
        for ep in batch.episodes:
            ep.episode_return += 0.5
        return batch


class StaleLengths(SpaceEnv):
    """Counts episode lengths from reset() and never restarts the count (an autoreset that forgets a counter)."""

    def reset(self, seed=None):
        self.since_reset = np.zeros(self.num_envs, dtype=np.int64)
        return super().reset(seed)

    def step(self, actions):
        batch = super().step(actions)
        self.since_reset += 1
        for ep in batch.episodes:
            ep.length = int(self.since_reset[ep.env_index])
        return batch


class NextStepCartPole:
    """CartPole in a Gymnasium vector env left in its default NEXT_STEP autoreset mode, converted naively: on the
    step an episode ends, ``obs`` is still the final observation, and the env resets one step later."""

    def __init__(self, *, num_envs, seed):
        import gymnasium as gym

        self._env = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1") for _ in range(num_envs)])
        self.num_envs = num_envs
        self.observation_space = self._env.single_observation_space
        self.action_space = self._env.single_action_space
        self._seed = seed
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._ret = np.zeros(num_envs)

    def reset(self, seed=None):
        self._t[:], self._ret[:] = 0, 0.0
        return self._env.reset(seed=self._seed if seed is None else seed)[0]

    def step(self, actions):
        from rlightning_core.env.base import EpisodeStats

        obs, reward, terminated, truncated, _ = self._env.step(actions)
        self._t += 1
        self._ret += reward
        done = terminated | truncated
        episodes = [EpisodeStats(env_index=i, episode_return=float(self._ret[i]), length=int(self._t[i]))
                    for i in np.flatnonzero(done)]
        self._t[done], self._ret[done] = 0, 0.0
        return StepBatch(obs=obs, reward=reward.astype(np.float32), terminated=terminated, truncated=truncated,
                         final_obs=obs.copy() if done.any() else None, episodes=episodes)

    def close(self):
        self._env.close()


class ConstantBandit:
    """One-step episodes whose only observation is 0: the first and the final observation are the same."""

    def __init__(self, *, num_envs, seed):
        from gymnasium import spaces

        self.num_envs = num_envs
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, seed=None):
        return np.zeros((self.num_envs, 1), dtype=np.float32)

    def step(self, actions):
        from rlightning_core.env.base import EpisodeStats

        reward = (np.asarray(actions) == 1).astype(np.float32)
        obs = np.zeros((self.num_envs, 1), dtype=np.float32)
        return StepBatch(obs=obs, reward=reward, terminated=np.ones(self.num_envs, dtype=bool),
                         truncated=np.zeros(self.num_envs, dtype=bool), final_obs=obs.copy(),
                         episodes=[EpisodeStats(env_index=i, episode_return=float(r), length=1)
                                   for i, r in enumerate(reward)])

    def close(self):
        pass


def env_factory(cls):
    def factory(*, num_envs, seed, worker_index=0, render_mode=None):
        obs, act = default_spaces()
        return cls(obs, act, num_envs=num_envs, seed=seed)

    return factory


class Float64Extras(TinyPolicy):
    def act(self, obs, *, deterministic=False):
        out = super().act(obs, deterministic=deterministic)
        out.extras["value"] = out.extras["value"].astype(np.float64)
        return out


class NeverLearns(TinyPolicy):
    def learn(self, buffer, *, progress=0.0):
        return {"loss/policy": 0.0}


class NumpyState(TinyPolicy):
    def extra_state(self):
        return {"counts": np.zeros(3)}


class SyncsAStranger(TinyPolicy):
    def rollout_modules(self):
        return {**self.modules(), "stranger": self.modules()[next(iter(self.modules()))]}


class ForgetfulStats(Preprocessor):
    """Normalizes with a running mean but updates it even when update=False."""

    def __init__(self, params=None, *, observation_space=None, num_envs=1):
        super().__init__(params, observation_space=observation_space, num_envs=num_envs)
        self.mean = np.zeros(observation_space.shape)

    def obs(self, obs, *, update=True):
        self.mean = 0.9 * self.mean + 0.1 * obs.mean(0)
        return (obs - self.mean).astype(np.float32)

    def state_dict(self):
        return {"mean": self.mean.copy()}

    def load_state_dict(self, state):
        self.mean = state["mean"].copy()


class SkipsHookPoints:
    """A buffer that stores chunks without passing them through preprocess_fn."""

    needs_next_obs = False

    def __init__(self, *, spec):
        self.chunks = []
        self.preprocess_fn = self.postprocess_fn = None

    def add(self, chunk):
        self.chunks.append(chunk)

    def __len__(self):
        return sum(c.num_steps * c.num_envs for c in self.chunks)

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


class BrokenLogger(RecordingLogger):
    def log(self, step, metrics):
        if any(v != v for v in metrics.values()):
            raise ValueError("cannot log NaN")
        super().log(step, metrics)


# -- what passes ------------------------------------------------------------------------------------------------


def test_doubles_pass_and_reports_list_what_was_checked():
    report = check_env(make_space_env, {"continuous": True}, config=SpaceEnvParams)
    assert "env make_space_env: 10 checks passed" in str(report)
    assert not report.notes
    check_policy(TinyPolicy, config=TinyPolicyParams, action_space=default_spaces(continuous=True)[1])


@pytest.mark.parametrize("kind, name, params", [
    ("buffer", "rollout", None),
    ("buffer", "replay", {"n_step": 3, "prioritized": True}),
    ("preprocessor", "normalize_obs", None),
    ("preprocessor", "scale_reward", {"gamma": 0.9}),
    ("preprocessor", "clip_obs", None),
    ("preprocessor", "clip_reward", None),
    ("logger", "jsonl", None),
])
def test_core_components_conform(kind, name, params):
    check_component(kind, name, params)


def test_sync_engine_conforms_and_resumes(tmp_path):
    report = check_engine("sync", {"rollout_steps": 8}, run_dir=tmp_path / "run")
    assert any("resuming continues from 64 to 128" in line for line in report.passed), report
    assert (tmp_path / "run" / "checkpoints").is_dir()


def test_doubles_pickle_by_reference():
    env = SpaceEnv(*default_spaces(), num_envs=2)
    blob = pickle.dumps(env)
    assert b"rlightning_core.testing.doubles" in blob and b"SpaceEnv" in blob
    assert pickle.loads(blob).num_envs == 2
    recorder = pickle.loads(pickle.dumps(HookRecorder()))
    assert recorder.names() == []


def test_params_are_structured_like_a_config_file():
    with pytest.raises(ConformanceError, match=r"invalid params:\n  env.params.obs_dim: must be >= 1, got 0"):
        check_env(make_space_env, {"obs_dim": 0}, config=SpaceEnvParams)


# -- what fails, and how it says so -----------------------------------------------------------------------------


@pytest.mark.parametrize("cls, message", [
    (Float64Rewards, r"reward has dtype float64, expected float32\n  fix: convert with np.asarray\(reward"),
    (NoFinalObs, r"ended but final_obs is None\n  fix: set final_obs to the real last observations"),
    (Unseeded, r"two workers built with seed=0 and reset with reset\(seed=0\) differ at the reset observations"),
    (WrongShape, r"reset\(\) observations have shape \(2, 2\), expected \(num_envs, \*observation_space.shape\)"),
])
def test_broken_envs_are_reported_with_the_fix(cls, message):
    with pytest.raises(ConformanceError, match=message) as info:
        check_env(env_factory(cls))
    assert str(info.value).startswith("env env_factory.<locals>.factory: ")


def test_episode_returns_that_are_not_the_sum_of_rewards_fail():
    with pytest.raises(ConformanceError, match=r"env \d's EpisodeStats say episode_return=\S+, but the rewards of its "
                                               r"\d+ steps sum to \S+\n  fix: report the undiscounted sum"):
        check_env(env_factory(WrongReturn))


def test_episode_lengths_that_do_not_restart_fail():
    with pytest.raises(ConformanceError, match=r"env \d's EpisodeStats say length=\d+, but only \d+ steps were "
                                               r"taken since reset\(\) or since its previous episode ended"):
        check_env(env_factory(StaleLengths))


def test_a_gymnasium_vector_env_in_next_step_mode_fails_the_autoreset_check():
    with pytest.raises(ConformanceError, match=r"episode ends obs held the episode's final observation .*: the envs "
                                               r"are not reset when an episode ends\n  fix: reset an env as soon as "
                                               r".*autoreset_mode=AutoresetMode.SAME_STEP"):
        check_env(lambda **kw: NextStepCartPole(num_envs=kw["num_envs"], seed=kw["seed"]))


def test_an_env_whose_first_and_final_observations_coincide_passes():
    report = check_env(lambda **kw: ConstantBandit(num_envs=kw["num_envs"], seed=kw["seed"]))
    assert any(line.startswith("autoreset: after each of the 400 episode ends") for line in report.passed)


@pytest.mark.parametrize("cls, message", [
    (Float64Extras, r"extras\['value'\] has dtype float64, extras_spec promises float32"),
    (NeverLearns, r"learn\(\) on 1 batch\(es\) of 16 x 4 transitions left every parameter unchanged"),
    (NumpyState, r"state_dict\(\) cannot be loaded with torch.load\(weights_only=True\)"),
    (SyncsAStranger, r"rollout_modules\(\) must name a non-empty subset of modules\(\), got \[.*'stranger'\] "
                     r"\(\['stranger'\] are not in modules\(\)\)"),
])
def test_broken_policies_are_reported_with_the_fix(cls, message):
    with pytest.raises(ConformanceError, match=message):
        check_policy(cls, config=TinyPolicyParams)


def test_broken_preprocessor_buffer_and_logger_are_reported():
    with pytest.raises(ConformanceError, match=r"update=False changed state_dict\(\)\n  fix: update statistics"):
        check_preprocessor(ForgetfulStats)
    with pytest.raises(ConformanceError, match=r"add\(chunk\) called preprocess_fn 0 times, expected once"):
        check_buffer(SkipsHookPoints)
    with pytest.raises(ConformanceError, match=r"log\(128, \{...4 metrics\}\) raised ValueError: cannot log NaN"):
        check_logger(BrokenLogger)


def test_a_factory_that_raises_is_named():
    def factory(**kwargs):
        raise RuntimeError("gridworld needs pygame")

    with pytest.raises(ConformanceError, match=r"the factory \(num_envs=2, seed=0, worker_index=0\) raised "
                                               r"RuntimeError: gridworld needs pygame") as info:
        check_env(factory)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_unknown_names_fail_like_a_config_does():
    from rlightning_core.errors import UnknownComponentError

    with pytest.raises(UnknownComponentError, match="Did you mean 'rollout'"):
        check_buffer("rolout")


def test_step_batch_type_is_required():
    class Tuples(SpaceEnv):
        def step(self, actions):
            b = super().step(actions)
            return b.obs, b.reward, b.terminated, b.truncated, {}

    assert StepBatch  # the fix names it
    with pytest.raises(ConformanceError, match=r"returned a tuple\n  fix: return rlightning_core.env.base.StepBatch"):
        check_env(env_factory(Tuples))


def test_pytest_fixtures_are_offered(conformance, rlightning_registry):
    assert "rollout" in rlightning_registry.names("buffer")
    conformance.check("preprocessor", "clip_obs", {"low": -1.0, "high": 1.0})


class WritesIntoObs(TinyPolicy):
    """Scales its input in place: fails on the read-only batches Ray hands over."""

    def act(self, obs, *, deterministic=False):
        obs //= 2
        return super().act(obs, deterministic=deterministic)


def test_the_image_check_passes_a_policy_on_uint8_images_and_fails_one_writing_into_them():
    report = check_policy(TinyPolicy, config=TinyPolicyParams, image=True)
    assert "act() takes read-only uint8 image batches" in str(report)
    assert "the buffer stores image observations as uint8" in str(report)
    with pytest.raises(ConformanceError, match="read-only uint8 obs"):
        check_policy(WritesIntoObs, config=TinyPolicyParams, image=True)
