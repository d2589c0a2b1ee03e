"""Which torch.distributed backend a weight-sync or data-parallel group gets (``cluster.backend: auto``)."""

from __future__ import annotations

import pytest

from rlightning_core.distributed.ray_common import collective_backend


@pytest.mark.parametrize(("devices", "backend", "why"), [
    (["cpu", "cpu", "cpu"], "gloo", "every rank on CPU"),
    (["cuda:a", "cuda:b"], "nccl", "a GPU of its own"),
    (["cuda:a", "cuda:a"], "gloo", "share a GPU"),  # colocated on one GPU: NCCL refuses duplicate devices
    (["cuda:a", "cpu", "cpu"], "gloo", "on CPU"),  # a GPU learner, CPU rollout copies in the env runners
    (["cuda:a", "cuda:b", "cuda:a"], "gloo", "share a GPU"),
])
def test_auto_picks_nccl_only_when_every_rank_has_a_gpu_of_its_own(devices, backend, why):
    chosen, reason = collective_backend("auto", devices)
    assert chosen == backend and why in reason


def test_a_configured_backend_is_kept():
    assert collective_backend("nccl", ["cpu", "cpu"])[0] == "nccl"
    assert collective_backend("gloo", ["cuda:a", "cuda:b"])[0] == "gloo"
