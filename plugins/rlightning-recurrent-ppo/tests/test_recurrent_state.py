"""The core state: carried per env by the env runner, reset at episode starts, replayed exactly by ``learn``."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from rlightning_gymnasium.params import GymnasiumParams
from rlightning_gymnasium.worker import GymnasiumWorker
from rlightning_recurrent_ppo.params import RecurrentPPOParams
from rlightning_recurrent_ppo.policy import RecurrentPPOPolicy

from rlightning_core.buffer.base import BufferSpec
from rlightning_core.buffer.params import RolloutBufferParams
from rlightning_core.buffer.rollout import RolloutBuffer
from rlightning_core.env.runner import EnvRunner
from rlightning_core.policy.base import PolicyRole
from rlightning_core.testing.pomdp_env import ENV_ID, MaskVelocity

ENV = f"rlightning_core.testing.pomdp_env:{ENV_ID}"


def _worker(n: int = 4) -> GymnasiumWorker:
    return GymnasiumWorker(GymnasiumParams(id=ENV), num_envs=n, seed=0)


def _policy(worker: GymnasiumWorker, role: PolicyRole = PolicyRole.ROLLOUT, **params: object) -> RecurrentPPOPolicy:
    kwargs = {"hidden_sizes": [16], "hidden_size": 8, "seq_len": 8, "minibatch_size": 16, **params}
    return RecurrentPPOPolicy(RecurrentPPOParams(**kwargs), observation_space=worker.observation_space,
                              action_space=worker.action_space, role=role, seed=1)


def test_the_env_sees_positions_only():
    import gymnasium

    env = gymnasium.make(ENV)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2,) and env.observation_space.shape == (2,)
    assert isinstance(env.unwrapped, gymnasium.envs.classic_control.CartPoleEnv)
    full = np.array([0.1, 0.2, 0.3, 0.4], np.float32)
    np.testing.assert_array_equal(MaskVelocity(gymnasium.make("CartPole-v1")).observation(full), full[[0, 2]])


@pytest.mark.parametrize("core", ["lstm", "gru"])
def test_state_is_carried_per_env_and_reset_at_episode_starts(core):
    worker = _worker()
    policy = _policy(worker, core=core)
    runner = EnvRunner(worker, policy)
    runner.reset(seed=0)
    chunk, _ = runner.collect(40)  # random CartPole episodes last ~10-40 steps: several end in the chunk
    state = chunk.data["core_state"]  # [T, N, S]: the state each step started from
    done = chunk.data["terminated"] | chunk.data["truncated"]
    assert done.any(), "no episode ended; the test needs some"
    assert not state[0].any()  # a fresh reset starts from zeros
    starts = np.zeros_like(done)
    starts[1:] = done[:-1]
    assert not state[starts].any()  # every step after an episode's end starts from the zero state
    assert np.abs(state[~starts][1:]).min(axis=-1).max() > 0  # and the others carry a state
    # the state carried is the one act returned: replay step t by hand from the stored state and observation
    for t in (5, 17):
        out = policy.act(chunk.data["obs"][t], state=state[t], deterministic=True)
        np.testing.assert_allclose(out.extras["value"], chunk.data["value"][t], rtol=0, atol=0)
        keep = ~done[t]
        np.testing.assert_array_equal(out.state[keep], state[t + 1][keep])
    # across chunks: the next chunk starts from the state the last one ended with
    nxt, _ = runner.collect(4)
    last = policy.act(chunk.data["obs"][-1], state=state[-1], deterministic=True).state
    last[done[-1]] = 0.0
    np.testing.assert_array_equal(nxt.data["core_state"][0], last)
    worker.close()


def test_one_rollout_copy_serves_several_runners_with_their_own_states():
    """Runners sharing one rollout copy (as in one process) each continue from their own envs' states."""
    workers = [_worker(2), _worker(2)]
    shared = _policy(workers[0])
    runners = [EnvRunner(w, shared) for w in workers]
    for i, r in enumerate(runners):
        r.reset(seed=10 + i)
    ends = []
    for r in runners:  # interleaved, as LocalExecution steps its runners
        chunk, _ = r.collect(6)
        end = shared.act(chunk.data["obs"][-1], state=chunk.data["core_state"][-1], deterministic=True).state
        end[chunk.data["terminated"][-1] | chunk.data["truncated"][-1]] = 0.0
        ends.append(end)
    assert not np.array_equal(ends[0], ends[1])
    for r, end in zip(runners, ends, strict=True):
        np.testing.assert_array_equal(r.collect(2)[0].data["core_state"][0], end)
    for w in workers:
        w.close()


@pytest.mark.parametrize("params", [
    {"core": "lstm", "seq_len": 8, "minibatch_size": 16},
    {"core": "gru", "seq_len": 16, "minibatch_size": 64, "shared_core": False, "head_sizes": [8]},
], ids=["lstm-shuffled", "gru-separate-cores"])
def test_sequence_replay_reproduces_rollout_log_probs_and_values(params):
    worker = _worker()
    learner = _policy(worker, PolicyRole.LEARNER, **params)
    rollout = _policy(worker, **params)
    rollout.set_weights(learner.get_weights())
    runner = EnvRunner(worker, rollout)
    runner.reset(seed=3)
    runner.collect(5)  # so the rollout below starts mid-episode, from non-zero states
    chunk, _ = runner.collect(32)
    buffer = RolloutBuffer(RolloutBufferParams(), spec=BufferSpec(
        observation_space=worker.observation_space, action_space=worker.action_space, num_envs=4, num_steps=32,
        extras_spec=dict(learner.extras_spec)))
    buffer.add(chunk)
    assert (chunk.data["terminated"] | chunk.data["truncated"]).any()
    logp, value = learner.replay(buffer)
    seqs = learner.sequences(buffer)
    assert seqs["starts"][1:].any()  # resets inside sequences are exercised
    assert seqs["state0"].abs().sum() > 0  # and sequences starting from stored non-zero states
    # to float32 rounding: the rollout's one-step batches of 4 envs and the replay's batches of whole sequences
    # take different matmul kernels on some CPUs (seen: 7e-9 apart), not different arithmetic
    torch.testing.assert_close(logp, seqs["log_prob"], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(value, seqs["value"], rtol=1e-5, atol=1e-6)
    # the unreset replay (the zero state at every sequence start) differs: the stored states matter
    seqs["state0"].zero_()
    _, v_zero = learner.net.unroll(seqs["obs"], seqs["state0"], seqs["starts"])
    assert not torch.allclose(v_zero.reshape(value.shape), value, atol=1e-4)
    worker.close()


def test_seq_len_must_divide_the_rollout():
    from rlightning_core.errors import UserError

    worker = _worker()
    learner = _policy(worker, PolicyRole.LEARNER, seq_len=8, minibatch_size=16)
    runner = EnvRunner(worker, learner)
    runner.reset(seed=0)
    chunk, _ = runner.collect(12)
    buffer = RolloutBuffer(RolloutBufferParams(), spec=BufferSpec(
        observation_space=worker.observation_space, action_space=worker.action_space, num_envs=4, num_steps=12,
        extras_spec=dict(learner.extras_spec)))
    buffer.add(chunk)
    with pytest.raises(UserError, match=r"seq_len \(8\) must divide engine.params.rollout_steps \(12\)"):
        learner.learn(buffer)
    worker.close()


def test_evaluation_carries_the_state_per_env_and_resets_it_at_episode_ends():
    from rlightning_core import load_config
    from rlightning_core.engine.evaluation import Evaluator

    class Recording(RecurrentPPOPolicy):
        """The real policy, remembering the states it was given and returned."""

        calls: list = []

        def act(self, obs, *, deterministic=False, state=None):
            out = super().act(obs, deterministic=deterministic, state=state)
            self.calls.append((state.copy(), out.state.copy()))
            return out

    example = Path(__file__).resolve().parents[3] / "examples" / "cartpole_masked_recurrent_ppo.yaml"
    cfg = load_config(example)
    worker = _worker(1)
    policy = Recording(RecurrentPPOParams(hidden_size=8, seq_len=8, minibatch_size=16),
                       observation_space=worker.observation_space, action_space=worker.action_space,
                       role=PolicyRole.ROLLOUT, seed=1)
    worker.close()
    evaluator = Evaluator(cfg.env, policy, episodes=3, seed=0)
    try:
        metrics = evaluator.evaluate()
    finally:
        evaluator.close()
    assert metrics["eval/episode_return_mean"] > 0
    calls = policy.calls
    assert len(calls) > 5 and not calls[0][0].any()  # zeros at the start
    carried = reset = 0
    for (_, given_out), (given_next, _) in itertools.pairwise(calls):
        same = (given_next == given_out).all(-1)
        zeroed = ~given_next.any(-1)
        assert (same | zeroed).all()  # each env continues from its own state, or restarts from zeros
        carried += int(same.sum())
        reset += int((zeroed & ~same).sum())
    assert carried > 0 and reset > 0
