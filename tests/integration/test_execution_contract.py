"""The execution contract (rlightning_core/engine/contract.py) holds in one process and on a real Ray cluster.

``check_execution`` drives each execution through the contract only, as an engine does, on a small CartPole run.
"""

from __future__ import annotations

import re

import pytest

from rlightning_core.testing import check_execution

pytestmark = pytest.mark.usefixtures("training_plugins")

STEPS = 8
SMALL = ("env.num_workers=2", "env.num_envs=2", f"engine.params.rollout_steps={STEPS}", "checkpoint.every=0",
         "policy.params.minibatch_size=16")


def _execution(config):
    from rlightning_core.builders import build_data_buffer, build_env_group, build_policy_group
    from rlightning_core.engine.execution import build_execution
    from rlightning_core.plugins import get_plugins

    env_group = build_env_group(config.env, seed=config.seed, cluster=config.cluster)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    return env_group, build_execution(config, env_group, policy_group, buffer, get_plugins(), rollout_steps=STEPS)


def test_local_execution_keeps_the_contract(cartpole_config, tmp_path):
    env_group, execution = _execution(cartpole_config(*SMALL))
    try:
        report = check_execution(execution, num_steps=STEPS, run_dir=tmp_path)
    finally:
        env_group.close()
    assert not report.notes, report
    assert any("bit for bit" in line for line in report.passed), report


@pytest.mark.ray
@pytest.mark.parametrize("extra", [(), ("cluster.num_learners=0",), ("cluster.weight_sync=broadcast",)],
                         ids=["learner-actor", "learner-in-driver", "broadcast"])
def test_ray_execution_keeps_the_contract(ray_cluster, cartpole_config, tmp_path, extra):
    env_group, execution = _execution(cartpole_config("cluster.mode=ray", *SMALL, *extra))
    try:
        report = check_execution(execution, num_steps=STEPS, run_dir=tmp_path)
    finally:
        env_group.close()
    assert any("bit for bit" in line for line in report.passed), report
    assert (tmp_path / "seeds.jsonl").exists()  # attach_run_dir: the seed ledger writes there
    assert ray_cluster.is_initialized()  # a cluster the execution joined stays up after close()


class _SyncCopiesNothing:
    """A broken sync: the version goes up, the rollout copy keeps its old weights."""

    def sync(self):
        self.policy_group.version += 1
        return self.version, {}


class _StaleStreaming:
    """A broken start_learn: stale chunks are stored anyway."""

    def start_learn(self, progress, chunks, *, version, max_staleness):
        return super().start_learn(progress, chunks, version=version, max_staleness=None)


@pytest.mark.parametrize(("broken", "message"), [
    (_SyncCopiesNothing, "the rollout weights are the same before learn() and after sync()"),
    (_StaleStreaming, "with max_staleness=2: dropped 0"),
])
def test_check_execution_names_a_broken_promise(cartpole_config, tmp_path, broken, message):
    from rlightning_core.builders import build_data_buffer, build_env_group, build_policy_group
    from rlightning_core.engine.execution import LocalExecution
    from rlightning_core.plugins import get_plugins
    from rlightning_core.testing import ConformanceError

    config = cartpole_config(*SMALL)
    env_group = build_env_group(config.env, seed=config.seed)
    cls = type(f"Broken{broken.__name__}", (broken, LocalExecution), {})
    execution = cls(config, env_group, build_policy_group(config.policy.type, config.policy, config.cluster),
                    build_data_buffer(config.buffer.type, config.buffer), get_plugins(), rollout_steps=STEPS)
    try:
        with pytest.raises(ConformanceError, match=f"execution {cls.__name__}: .*{re.escape(message)}"):
            check_execution(execution, num_steps=STEPS, run_dir=tmp_path)
    finally:
        env_group.close()
