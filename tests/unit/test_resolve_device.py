"""``policy.device`` / ``policy.rollout_device`` resolved in the process that builds the policy."""

from __future__ import annotations

import pytest

from rlightning_core.errors import ConfigError
from rlightning_core.policy.group import resolve_device

torch = pytest.importorskip("torch")
GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0


def test_auto_is_cuda_exactly_when_a_gpu_is_visible():
    assert resolve_device("auto") == ("cuda" if GPUS else "cpu")
    assert resolve_device("cpu") == "cpu"


def test_a_cuda_index_past_the_visible_devices_names_the_setting():
    with pytest.raises(ConfigError) as err:
        resolve_device(f"cuda:{GPUS}", "policy.rollout_device")
    message = str(err.value)
    assert f"policy.rollout_device: 'cuda:{GPUS}'" in message
    assert ("sees no CUDA device" if not GPUS else f"sees {GPUS} CUDA device(s)") in message


@pytest.mark.skipif(not GPUS, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_a_visible_cuda_device_is_kept():
    assert resolve_device("cuda") == "cuda"
    assert resolve_device(f"cuda:{GPUS - 1}") == f"cuda:{GPUS - 1}"
