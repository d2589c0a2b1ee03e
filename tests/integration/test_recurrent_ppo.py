"""Recurrent PPO end to end: bit-exact resume with the env runners' core states, and Ray env runners that keep
their own envs' states."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("rlightning_recurrent_ppo")
pytestmark = pytest.mark.usefixtures("training_plugins")

from tests.integration.conftest import ROOT  # noqa: E402

EXAMPLE = ROOT / "examples" / "cartpole_masked_recurrent_ppo.yaml"
SMALL = ("logging.progress=false", "env.num_envs=4", "policy.params.hidden_size=16", "policy.params.head_sizes=[16]",
         "policy.params.seq_len=16", "policy.params.minibatch_size=32", "policy.params.epochs=2",
         "engine.params.rollout_steps=32", "engine.eval_every=0", "checkpoint.every=0")


def _config(*overrides: str):
    from rlightning_core import load_config

    return load_config(EXAMPLE, [*SMALL, *overrides])


def test_resume_reproduces_the_uninterrupted_run_with_the_core_states(tmp_path, build_run, learner_params):
    """Ctrl-C after iteration 3, resume: the same parameters as never stopping (the runners' states resume too)."""
    from rlightning_core import hookimpl
    from rlightning_core.checkpoint.manager import CheckpointManager, resolve_checkpoint
    from rlightning_core.plugins import get_plugins, load_plugins

    overrides = ("engine.total_steps=768",)
    full = build_run(_config(*overrides))
    full.run(tmp_path / "full")

    class CtrlC:
        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 3:
                raise KeyboardInterrupt

    first = build_run(_config(*overrides))
    first.plugins = load_plugins(extra=[("ctrl-c", CtrlC())])
    stopped = first.run(tmp_path / "split")
    first.plugins = get_plugins()
    assert stopped.stop_reason == "interrupted" and stopped.iterations == 3
    state, _ = CheckpointManager.load(resolve_checkpoint(tmp_path / "split"))
    saved = state["runners"][0]["policy_state"]
    assert saved.shape == (4, 2 * 2 * 16) and np.abs(saved).sum() > 0  # 2 cores x (h, c) x 16, mid-episode

    resumed = build_run(_config(*overrides))
    result = resumed.run(tmp_path / "split", resume_from=tmp_path / "split")
    assert result.env_steps == 768 and result.iterations == full.iteration_count
    pf, pr = learner_params(full), learner_params(resumed)
    assert all(torch.equal(pf[k], pr[k]) for k in pf)


@pytest.mark.ray
def test_ray_env_runners_keep_their_own_core_states(ray_cluster, tmp_path, build_run, at_run_end):
    config = _config("cluster.mode=ray", "env.num_workers=2", "engine.total_steps=512", "engine.eval_episodes=2")
    engine = build_run(config)

    def read(execution):
        actors = execution.env_group.actors
        states = [ray_cluster.get(a.state_dict.remote())["policy_state"] for a in actors]
        starts = []
        for actor in actors:  # the next chunk starts from exactly the state the actor holds
            chunk_ref, _ = actor.collect.options(num_returns=2).remote(4)
            starts.append(ray_cluster.get(chunk_ref).data["core_state"][0])
        return states, starts

    seen = at_run_end(engine, read)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 512 and result.stop_reason == "total_steps"
    states, starts = seen["value"]
    assert all(s.shape == (4, 64) and np.abs(s).sum() > 0 for s in states)
    assert not np.array_equal(states[0], states[1])  # each actor holds its own envs' states
    for state, start in zip(states, starts, strict=True):
        np.testing.assert_array_equal(start, state)


@pytest.mark.ray
def test_the_inference_server_topology_refuses_a_recurrent_policy(ray_cluster, build_run):
    from rlightning_core.errors import ConfigError

    config = _config("cluster.mode=ray", "env.num_workers=2", "cluster.topology=inference_server",
                     "cluster.num_inference_servers=1", "engine.total_steps=256")
    with pytest.raises(ConfigError, match=r"cluster.topology: policy 'recurrent_ppo' is recurrent .* use the "
                                          r"env_runner topology"):
        build_run(config)
