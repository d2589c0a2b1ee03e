"""Ray-mode start-up: what each actor imports before the first env step, and that nothing changes after it.

The env-runner and learner classes are plain classes, so these run in fresh interpreters (what a new actor
process is) without a cluster; one test checks a real Ray run end to end.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.usefixtures("training_plugins")]

ROOT = Path(__file__).resolve().parents[2]

_PRELUDE = """
import json, sys
from rlightning_core import load_config
from rlightning_core.builders import build_policy_group
from rlightning_core.plugins import get_plugins

config = load_config(sys.argv[1], ["logging.progress=false", "cluster.mode=ray"])
selection = get_plugins().selection()
"""


def _fresh_python(body: str) -> dict:
    """Run ``body`` in a new interpreter (as a new actor process would); it prints one JSON object last."""
    code = _PRELUDE + textwrap.dedent(body)
    out = subprocess.run([sys.executable, "-c", code, str(ROOT / "examples" / "cartpole_ppo.yaml")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_an_env_runner_reports_its_spaces_before_importing_torch_and_uses_the_prebuilt_copy():
    result = _fresh_python("""
        from rlightning_core.distributed.actors import EnvRunnerActor

        actor = EnvRunnerActor(config.env[0], selection=selection, num_envs=2, seed=0, worker_index=0,
                               label="CartPole-v1", column=0, num_threads=1)
        obs_space, act_space, n = actor.spaces()
        torch_at_spaces = "torch" in sys.modules
        actor.build_rollout_policy(config.policy, policy_seed=5)
        prebuilt = actor._prebuilt[1]
        actor.setup_rollout(config.policy, [], policy_seed=5, needs_next_obs=False)
        import torch

        same = actor.runner.policy is prebuilt
        actor.build_rollout_policy(config.policy, policy_seed=5)
        other = actor._prebuilt[1]
        actor.setup_rollout(config.policy, [], policy_seed=6, needs_next_obs=False)  # another seed: rebuilt
        rebuilt = actor.runner.policy is not other and actor._prebuilt is None
        actor.reset(0)
        _, stats = actor.collect(4)
        print(json.dumps({"torch_at_spaces": torch_at_spaces, "n": n, "same": same, "rebuilt": rebuilt,
                          "threads": torch.get_num_threads(), "steps": stats.steps}))
    """)
    assert result == {"torch_at_spaces": False, "n": 2, "same": True, "rebuilt": True, "threads": 1, "steps": 8}


def test_the_learner_s_optimizer_state_round_trips():
    result = _fresh_python("""
        import gymnasium as gym
        import numpy as np

        from rlightning_core.distributed.actors import EnvRunnerActor
        from rlightning_core.distributed.learner import LearnerActor
        from rlightning_core.buffer.base import BufferSpec

        group = build_policy_group(config.policy.type, config.policy, config.cluster)
        env = gym.make("CartPole-v1")
        learner = LearnerActor(group.policy_cfg, selection=selection, seed=3)
        extras = learner.build(env.observation_space, env.action_space)
        import torch

        spec = BufferSpec(observation_space=env.observation_space, action_space=env.action_space, num_envs=2,
                          num_steps=8, extras_spec=extras, column_labels=["CartPole-v1"] * 2, device="cpu", seed=0)
        learner.bind_buffer(config.buffer.type, config.buffer.params, spec)
        runner = EnvRunnerActor(config.env[0], selection=selection, num_envs=2, seed=0, worker_index=0,
                                label="CartPole-v1", column=0)
        runner.setup_rollout(group.policy_cfg, [], policy_seed=1, needs_next_obs=False)
        runner.set_weights(learner.get_weights(), 1)
        runner.reset(0)
        chunk, _ = runner.collect(8)
        metrics = learner.learn(0.0, chunk)
        import copy

        state = copy.deepcopy(learner.state_dict())  # as a checkpoint would hold it: no tensor shared with the learner
        twin = LearnerActor(group.policy_cfg, selection=selection, seed=99)
        twin.build(env.observation_space, env.action_space)
        twin.bind_buffer(config.buffer.type, config.buffer.params, spec)
        twin.load_state_dict(state)
        a, b = learner.policy.optimizers(), twin.policy.optimizers()
        same_opt = sorted(a) == sorted(b) and all(
            torch.equal(x, y)
            for name in a for p, q in zip(a[name].state_dict()["state"].values(),
                                          b[name].state_dict()["state"].values())
            for x, y in zip(p.values(), q.values()))
        wa, wb = learner.get_weights(), twin.get_weights()
        same_w = all(np.array_equal(wa[k], wb[k]) for k in wa)
        # both take the same next step from the same state
        runner.reset(1)
        chunk2, _ = runner.collect(8)
        learner.learn(0.5, chunk2)
        twin.learn(0.5, chunk2)
        wa, wb = learner.get_weights(), twin.get_weights()
        same_after = all(np.array_equal(wa[k], wb[k]) for k in wa)
        print(json.dumps({"finite": bool(np.isfinite(
                              [v for v in metrics.values()]).all()), "opt_entries": len(a),
                          "same_opt": same_opt, "same_w": same_w, "same_after": same_after}))
    """)
    assert result == {"finite": True, "opt_entries": 1, "same_opt": True, "same_w": True, "same_after": True}


@pytest.mark.ray
def test_a_ray_run_with_auto_sync_needs_no_process_group_and_keeps_weights_bitwise(ray_cluster, tmp_path,
                                                                                   cartpole_config, build_run):
    """``weight_sync: auto`` with a small CPU policy: no gloo group; every sync still lands bit for bit, versioned."""
    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=2", "checkpoint.every=0",
                             "engine.total_steps=256", "engine.eval_every=0", "engine.eval_episodes=1")
    assert config.cluster.weight_sync == "auto"
    engine = build_run(config)
    ex = engine.execution
    ray = ex.ray

    def assert_in_sync(version):
        learner = ray.get(ex.learner.get_weights.remote())
        for actor in ex.env_group.actors:
            copy = ray.get(actor.get_weights.remote())
            assert ray.get(actor.weight_version.remote()) == ex.version == version
            assert copy.keys() == learner.keys() and all(np.array_equal(learner[k], copy[k]) for k in learner)

    assert_in_sync(1)  # the first sync happens before any rollout
    # the runners act with the policy class itself (torch), holding the learner's weights
    assert ray.get([a.__ray_call__.remote(lambda self: type(self.runner.policy).__name__)
                    for a in ex.env_group.actors]) == ["PPOPolicy", "PPOPolicy"]
    members = [ex.learner, *ex.env_group.actors]
    assert not any(ray.get([m.__ray_call__.remote(lambda self: self._group_ready) for m in members]))
    assert set(ex.startup) >= {"env_actors_s", "learner_s", "rollout_setup_s", "first_sync_s", "total_s"}
    assert ex.startup["total_s"] >= ex.startup["ray_init_s"] + ex.startup["env_actors_s"]
    for version in (2, 3):
        ex.collect(32)
        ex.learn(0.0)
        _, metrics = ex.sync()
        ex.weight_sync.finish()  # queued ahead of the next collect; wait here to compare
        assert metrics["sync/bytes"] > 0
        assert_in_sync(version)
    chunk_ref, _ = ex.env_group.actors[0].collect.options(num_returns=2).remote(4)
    assert ray.get(chunk_ref).weight_version == 3  # data carries the version it was collected with
    result = engine.run(tmp_path / "run")
    assert result.env_steps == 256
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("loss/policy" in r for r in rows)


def test_an_env_runner_process_never_imports_the_config_loader(tmp_path):
    """A new env-runner process unpickles its config sections and plugin selection, then builds and collects.

    It needs the schema's classes but not cattrs or yaml (the config loader), which only the driver uses.
    """
    from rlightning_core import load_config
    from rlightning_core.plugins import get_plugins

    config = load_config(ROOT / "examples" / "cartpole_ppo.yaml", ["logging.progress=false", "cluster.mode=ray"])
    blob = tmp_path / "sections.pkl"
    blob.write_bytes(pickle.dumps((config.env[0], config.policy, get_plugins().selection())))
    code = textwrap.dedent("""
        import json, pickle, sys
        env_cfg, policy_cfg, selection = pickle.loads(open(sys.argv[1], "rb").read())
        from rlightning_core.distributed.actors import EnvRunnerActor

        actor = EnvRunnerActor(env_cfg, selection=selection, num_envs=2, seed=0, worker_index=0,
                               label="CartPole-v1", column=0, num_threads=1)
        actor.spaces()
        actor.setup_rollout(policy_cfg, [], policy_seed=5, needs_next_obs=False)
        actor.reset(0)
        _, stats = actor.collect(4)
        loaded = [m for m in ("cattrs", "yaml", "rlightning_core.config.loading",
                              "rlightning_core.config.structuring") if m in sys.modules]
        print(json.dumps({"steps": stats.steps, "loaded": loaded}))
    """)
    out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"steps": 8, "loaded": []}
