"""Every shipped algorithm trains with its learner and rollout copy on a GPU, and its checkpoint resumes on CPU.

The ``cuda`` cases run where CUDA is (``pytest -m gpu``); the ``cpu`` cases run everywhere and keep the test's
own mechanics checked. Buffers keep their data in host memory, so these runs cross the host/GPU boundary on
every act and every learn.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: name -> (example, policy, overrides): short runs that make several learner updates.
CASES = {
    "ppo-discrete": ("cartpole_ppo", "ppo", ("engine.total_steps=1024", "engine.params.rollout_steps=32")),
    "ppo-continuous": ("cartpole_ppo", "ppo", ("env.params.id=Pendulum-v1", "engine.total_steps=1024",
                                               "engine.params.rollout_steps=32")),
    "ppo-image": ("pattern_image_ppo", "ppo", ("engine.total_steps=512", "policy.params.cnn_features=64")),
    "recurrent-ppo": ("cartpole_masked_recurrent_ppo", "recurrent_ppo",
                      ("engine.total_steps=1024", "engine.params.rollout_steps=32")),
    "appo": ("cartpole_appo", "appo", ("engine.total_steps=1024",)),
    "dqn": ("cartpole_dqn", "dqn", ("engine.total_steps=768", "policy.params.learning_starts=256",
                                    "buffer.params.prioritized=true", "engine.params.rollout_steps=32")),
    "dqn-image": ("pattern_image_dqn", "dqn", ("engine.total_steps=512",)),
    "sac": ("pendulum_sac", "sac", ("engine.total_steps=384", "policy.params.learning_starts=128",
                                    "policy.params.batch_size=64", "engine.params.rollout_steps=32")),
    "td3": ("pendulum_td3", "td3", ("engine.total_steps=384", "policy.params.learning_starts=128",
                                    "policy.params.batch_size=64", "engine.params.rollout_steps=32")),
}
#: learners that update once per rollout (no ``stats/num_updates`` counter)
ON_POLICY = {"ppo", "recurrent_ppo", "appo"}


def _config(name: str, device: str, *extra: str):
    from rlightning_core import load_config
    from rlightning_core.plugins import get_plugins

    example, policy, overrides = CASES[name]
    if policy not in get_plugins().registry.names("policy") or "gymnasium" not in get_plugins().registry.names("env"):
        pytest.skip(f"needs the rlightning-gymnasium and rlightning-{policy} plugins installed")
    return load_config(ROOT / "examples" / f"{example}.yaml", [
        "logging.progress=false", "engine.eval_every=0", "engine.eval_episodes=2", "engine.target_eval_return=null",
        "checkpoint.every=0", "checkpoint.at_end=true", "policy.params.hidden_sizes=[32,32]",
        f"policy.device={device}", f"policy.rollout_device={device}", *overrides, *extra])


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("name", sorted(CASES))
def test_trains_on_the_device_and_resumes_on_cpu(name, device, tmp_path, build_run):
    torch = pytest.importorskip("torch")
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    config = _config(name, device)
    engine = build_run(config)
    result = engine.run(tmp_path / "run")
    assert result.env_steps == config.engine.total_steps
    learner = engine.policy_group.learner
    assert {p.device.type for m in learner.modules().values() for p in m.parameters()} == {device}
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    losses = {k: v for r in rows for k, v in r.items() if k.startswith("loss/")}
    assert losses and all(math.isfinite(v) for v in losses.values()), losses
    updates = [r.get("stats/num_updates", 0) for r in rows]
    assert CASES[name][1] in ON_POLICY or max(updates) > 0  # the off-policy learners made updates

    # the checkpoint written on `device` resumes on CPU, and training goes on there
    steps = config.engine.total_steps
    resumed_cfg = _config(name, "cpu", f"engine.total_steps={2 * steps}")
    resumed = build_run(resumed_cfg).run(tmp_path / "run", resume_from=tmp_path / "run")
    assert resumed.env_steps == 2 * steps
