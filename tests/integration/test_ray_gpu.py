"""GPU paths of Ray mode: nccl between GPU ranks, a GPU learner syncing CPU env runners, colocated sync.

Run where CUDA is (``pytest -m gpu``); skipped elsewhere. ``sync_device`` and the backend choice also run on CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = [pytest.mark.usefixtures("training_plugins")]


def _cuda_devices() -> int:
    torch = pytest.importorskip("torch")
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_a_cuda_learner_without_a_reserved_gpu_is_refused_up_front(cartpole_config):
    from rlightning_core.distributed.execution import check_resources
    from rlightning_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"policy.device: 'cuda' .*\(cluster.learner_num_gpus: 0\)"):
        cartpole_config("cluster.mode=ray", "policy.device=cuda")  # the config alone is refused
    check_resources(cartpole_config("cluster.mode=ray", "policy.device=cuda", "cluster.learner_num_gpus=1"),
                    {"CPU": 8.0, "GPU": 1.0})  # reserved: accepted
    with pytest.raises(ConfigError, match=r"with cluster.num_learners: 0 the learner runs in the driver on CPU"):
        cartpole_config("cluster.mode=ray", "policy.device=cuda", "cluster.num_learners=0")  # its own rule


def test_a_cpu_member_reports_cpu(cartpole_learner_actor):
    assert cartpole_learner_actor("cpu").sync_device() == "cpu"


@pytest.mark.gpu
def test_a_gpu_member_reports_its_gpus_uuid(cartpole_learner_actor):
    if _cuda_devices() < 1:
        pytest.skip("needs a CUDA GPU")
    import torch

    device = cartpole_learner_actor("cuda").sync_device()
    assert device == f"cuda:{torch.cuda.get_device_properties(0).uuid}"


def _nccl_rank(rank: int, world: int, port: int, out: str) -> None:
    import datetime

    import torch
    import torch.distributed as dist

    from rlightning_core.weights.buckets import BucketLayout, named_tensors

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(rank)  # different weights on every rank until the broadcast
    modules = {"net": torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.Linear(256, 4)).cuda()}
    layout = BucketLayout.build(named_tensors(modules), 1 << 16)  # several buckets
    flats = layout.flatten_in_place(modules)
    for flat in flats:
        dist.broadcast(flat, src=0)
    torch.cuda.synchronize()
    np.savez(f"{out}/rank{rank}.npz", **{k: v.detach().cpu().numpy() for k, v in named_tensors(modules).items()})
    dist.destroy_process_group()


@pytest.mark.gpu
def test_nccl_bucketed_broadcast_between_gpu_ranks_is_bitwise(tmp_path):
    """The weight-sync buckets over nccl, one process per GPU (NCCL refuses two ranks on one GPU)."""
    if _cuda_devices() < 2:
        pytest.skip("needs 2 CUDA GPUs")
    import socket

    import torch.multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_nccl_rank, args=(2, port, str(tmp_path)), nprocs=2, join=True)
    first, second = np.load(tmp_path / "rank0.npz"), np.load(tmp_path / "rank1.npz")
    assert sorted(first.files) == sorted(second.files)
    assert all(np.array_equal(first[k], second[k]) for k in first.files)


def _gpu_run(cartpole_config, build_run, *overrides):
    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=2", "checkpoint.every=0",
                             "engine.total_steps=512", "engine.eval_every=0", "engine.eval_episodes=2",
                             "cluster.learner_num_gpus=1", "policy.device=cuda", "cluster.weight_sync=broadcast",
                             *overrides)
    return build_run(config)


@pytest.mark.gpu
@pytest.mark.ray
@pytest.mark.parametrize("placement", ["default", "colocate"])
def test_a_gpu_learner_syncs_its_cpu_env_runners_bit_for_bit(ray_cluster, cartpole_config, build_run, caplog,
                                                             placement):
    """A learner on the GPU and rollout copies on CPU (env runners hold no GPU): the sync group is gloo (NCCL
    broadcasts GPU tensors only), the weights arrive bit for bit; with placement colocate everything shares
    one bundle."""
    if _cuda_devices() < 1 or ray_cluster.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("needs a CUDA GPU in the Ray cluster")
    import logging

    with caplog.at_level(logging.INFO, logger="rlightning"):
        engine = _gpu_run(cartpole_config, build_run, f"cluster.placement={placement}")
    ex = engine.execution
    try:
        assert "weight-sync group of 3 ranks: gloo (some ranks hold their weights on CPU" in caplog.text
        assert ex.ray.get(ex.learner.sync_device.remote()).startswith("cuda:")
        ex.collect(32)
        ex.learn(0.0)
        version, metrics = ex.sync()
        learner = ex.ray.get(ex.learner.get_weights.remote())
        for actor in ex.env_group.actors:
            copy = ex.ray.get(actor.get_weights.remote())
            assert all(np.array_equal(copy[k], learner[k]) for k in learner)
            assert ex.ray.get(actor.weight_version.remote()) == version
        assert metrics["sync/bytes"] > 0
    finally:
        ex.close()


@pytest.mark.gpu
@pytest.mark.ray
def test_two_learners_sharing_one_gpu_learn_in_step_over_gloo(ray_cluster, cartpole_config, build_run, caplog):
    """Data-parallel learners at half a GPU each: auto picks gloo (NCCL refuses two ranks on one GPU), the CUDA
    gradients are averaged through it, and both ranks end with identical parameters."""
    if _cuda_devices() < 1 or ray_cluster.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("needs a CUDA GPU in the Ray cluster")
    import logging

    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                             "cluster.num_learners=2", "cluster.learner_num_gpus=0.5", "policy.device=cuda",
                             "engine.total_steps=512")
    with caplog.at_level(logging.INFO, logger="rlightning"):
        engine = build_run(config)
    ex = engine.execution
    try:
        assert "data-parallel learners: 2 ranks over gloo" in caplog.text
        before = ex.ray.get(ex.learner.get_weights.remote())
        for _ in range(2):
            ex.collect(32)
            metrics = ex.learn(0.0)
            ex.sync()
        assert np.isfinite(metrics["loss/policy"])
        a, b = ex.ray.get([ln.get_weights.remote() for ln in ex.learners])
        assert any(not np.array_equal(a[k], before[k]) for k in a)
        for key in a:
            np.testing.assert_array_equal(a[key], b[key])
    finally:
        ex.close()


@pytest.mark.gpu
@pytest.mark.ray
def test_a_gpu_inference_server_shares_the_learners_gpu_and_syncs_bit_for_bit(ray_cluster, cartpole_config, build_run,
                                                                              tmp_path, at_run_end):
    """The inference-server topology with the learner and the rollout server on one GPU (half each)."""
    if _cuda_devices() < 1 or ray_cluster.cluster_resources().get("GPU", 0) < 1:
        pytest.skip("needs a CUDA GPU in the Ray cluster")
    config = cartpole_config("cluster.mode=ray", "env.num_workers=2", "env.num_envs=4", "checkpoint.every=0",
                             "cluster.topology=inference_server", "cluster.num_inference_servers=1",
                             "cluster.learner_num_gpus=0.5", "cluster.inference_server_num_gpus=0.5",
                             "policy.device=cuda",
                             "policy.rollout_device=cuda", "engine.total_steps=1024", "engine.eval_every=0",
                             "engine.eval_episodes=2")
    engine = build_run(config)
    ex = engine.execution
    assert ex.ray.get(ex.servers[0].sync_device.remote()) == ex.ray.get(ex.learner.sync_device.remote())
    seen = at_run_end(engine, lambda ex: ex.ray.get([ex.learner.get_weights.remote(),
                                                     ex.servers[0].get_weights.remote()]))
    result = engine.run(tmp_path / "run")
    assert result.env_steps >= 1024
    learner, served = seen["value"]
    for key in learner:
        np.testing.assert_array_equal(served[key], learner[key])
