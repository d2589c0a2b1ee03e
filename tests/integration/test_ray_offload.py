"""cluster.offload: a colocated learner moves its idle model and optimizer state off the GPU.

On CPU it is a logged no-op (checked here in-process, no cluster needed); the GPU path runs where CUDA is.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest

pytestmark = [pytest.mark.usefixtures("training_plugins")]


def test_offload_is_a_logged_noop_on_cpu(cartpole_learner_actor, caplog):
    import rlightning_core.distributed.offload as offload

    offload._logged = False
    actor = cartpole_learner_actor("cpu", "cluster.offload=true", offload=True)
    before = actor.get_weights()
    with caplog.at_level(logging.INFO, logger="rlightning"):
        assert actor.offload_idle() is False
    assert not actor.offloaded
    assert any("nothing to move off a GPU (no-op)" in r.getMessage() for r in caplog.records)
    after = actor.get_weights()
    assert all(np.array_equal(before[k], after[k]) for k in before)


@pytest.mark.gpu
def test_offload_moves_model_and_optimizer_state_to_host_and_back(cartpole_learner_actor):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from rlightning_core.weights.buckets import named_tensors

    actor = cartpole_learner_actor("cuda", "cluster.offload=true", offload=True)
    policy = actor.policy
    loss = sum(p.sum() for p in policy.net.parameters())
    loss.backward()
    policy.optimizer.step()  # optimizer state exists on the GPU
    weights = actor.get_weights()
    used = torch.cuda.memory_allocated()
    assert actor.offload_idle() is True
    assert all(t.device.type == "cpu" for t in named_tensors(policy.modules()).values())
    assert all(v.device.type == "cpu" for s in policy.optimizer.state.values() for k, v in s.items()
               if isinstance(v, torch.Tensor) and k != "step")
    assert torch.cuda.memory_allocated() < used
    actor._before_learn()
    assert all(t.device.type == "cuda" for t in named_tensors(policy.modules()).values())
    again = actor.get_weights()
    assert all(np.array_equal(weights[k], again[k]) for k in weights)
    policy.optimizer.step()  # and the optimizer still works on the moved state


@pytest.mark.ray
def test_a_ray_run_with_offload_on_cpu_trains_unchanged(ray_cluster, tmp_path, cartpole_config, build_run):
    """The driver's offload calls (learners after each sync, rollout copies before each learn) are no-ops here."""
    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                             "cluster.offload=true", "engine.total_steps=768", "engine.eval_every=0",
                             "engine.eval_episodes=2")
    engine = build_run(config)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps == 768


def test_rollout_offload_is_a_noop_for_a_cpu_copy(cartpole_config):
    from rlightning_core.distributed.actors import EnvRunnerActor
    from rlightning_core.plugins import get_plugins

    config = cartpole_config()
    actor = EnvRunnerActor(config.env[0], selection=get_plugins().selection(), num_envs=2, seed=0, worker_index=0,
                           label="CartPole-v1", column=0)
    actor.setup_rollout(config.policy, [], policy_seed=0, needs_next_obs=False)
    actor.set_offload(True)
    assert actor.offload_idle() is False and not actor._rollout_offloaded
    _, stats = actor.collect(4)
    assert stats.steps == 8
    actor.close()


@pytest.mark.gpu
def test_a_gpu_rollout_copy_leaves_the_gpu_while_idle_and_acts_there_again(cartpole_config):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from rlightning_core.distributed.actors import EnvRunnerActor
    from rlightning_core.plugins import get_plugins
    from rlightning_core.weights.buckets import named_tensors

    config = cartpole_config("policy.rollout_device=cuda")
    actor = EnvRunnerActor(config.env[0], selection=get_plugins().selection(), num_envs=2, seed=0, worker_index=0,
                           label="CartPole-v1", column=0)
    actor.setup_rollout(config.policy, [], policy_seed=0, needs_next_obs=False)
    policy = actor.runner.policy
    weights = actor.get_weights()
    actor.set_offload(True)
    assert actor.offload_idle() is True
    assert all(t.device.type == "cpu" for t in named_tensors(policy.modules()).values())
    _, stats = actor.collect(4)  # back on the GPU before acting
    assert stats.steps == 8
    assert all(t.device.type == "cuda" for t in named_tensors(policy.modules()).values())
    again = actor.get_weights()
    assert all(np.array_equal(weights[k], again[k]) for k in weights)
    actor.close()
