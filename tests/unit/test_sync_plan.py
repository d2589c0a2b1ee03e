"""The one decision of how weights reach the rollout copies on Ray (no Ray needed: it reads the config)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlightning_core import load_config
from rlightning_core.distributed.plan import needs_weights_size, weight_sync_plan
from rlightning_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMALL, BIG = 36 << 10, 3 << 20


def _config(*overrides: str):
    return load_config(ROOT / "examples" / "cartpole_ppo.yaml", ["cluster.mode=ray", *overrides])


@pytest.mark.parametrize(("overrides", "nbytes", "want"), [
    ((), SMALL, ("queued", "inline", "object_store")),
    ((), BIG, ("queued", "broadcast", "broadcast")),
    ((), None, ("queued", "undecided", None)),
    (("cluster.num_learners=0",), SMALL, ("queued", "inline", "object_store")),
    (("cluster.num_learners=0",), BIG, ("queued", "object_store", "object_store")),
    (("cluster.weight_sync=broadcast",), SMALL, ("queued", "broadcast", "broadcast")),
    (("cluster.weight_sync=object_store",), SMALL, ("queued", "object_store", "object_store")),
    (("cluster.weight_sync=double_buffer",), SMALL, ("staged", "double_buffer", "double_buffer")),
    (("cluster.weight_sync=node_shared",), SMALL, ("blocking", "node_shared", "node_shared")),
    (("cluster.topology=inference_server", "cluster.num_inference_servers=1"), SMALL,
     ("blocking", "broadcast", "broadcast")),
    (("cluster.learner_num_gpus=1",), SMALL, ("queued", "broadcast", "broadcast")),
    (("engine.type=async", "buffer.type=replay"), SMALL, ("publish", "object_store", "object_store")),
    (("engine.type=async", "buffer.type=replay", "cluster.weight_sync=broadcast"), BIG,
     ("publish", "object_store", "object_store")),
])
def test_weight_sync_plan(overrides, nbytes, want):
    plan = weight_sync_plan(_config(*overrides), weights_nbytes=nbytes)
    assert (plan.scheme, plan.transport) == want[:2]
    if want[2] is None:
        with pytest.raises(ValueError, match="undecided"):
            plan.strategy  # noqa: B018
    else:
        assert plan.strategy == want[2]


def test_only_auto_in_the_env_runner_topology_on_cpu_learners_depends_on_the_weights_size():
    assert needs_weights_size(_config())
    assert needs_weights_size(_config("cluster.num_learners=0"))
    for overrides in (("cluster.weight_sync=broadcast",), ("cluster.learner_num_gpus=1",),
                      ("cluster.topology=inference_server", "cluster.num_inference_servers=1"),
                      ("engine.type=async", "buffer.type=replay")):
        assert not needs_weights_size(_config(*overrides)), overrides
    assert weight_sync_plan(_config("cluster.weight_sync=broadcast"), weights_nbytes=SMALL).weights_nbytes is None


def test_local_weight_sync_is_refused_on_ray_before_anything_starts():
    with pytest.raises(ConfigError, match=r"cluster\.weight_sync: 'local' copies weights inside one process"):
        weight_sync_plan(_config("cluster.weight_sync=local"))
