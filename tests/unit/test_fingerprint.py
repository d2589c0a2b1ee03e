"""The cheap fingerprint a rollout copy and the learner compare after a sync."""

from __future__ import annotations

import numpy as np
import torch

from rlightning_core.weights.fingerprint import SAMPLES, fingerprint, fingerprint_mismatch, policy_fingerprint


def _weights(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {"net.0.weight": rng.normal(size=(64, 4)).astype(np.float32),
            "net.0.bias": rng.normal(size=64).astype(np.float32), "steps": np.array(7, dtype=np.int64),
            "empty": np.zeros((0, 3), dtype=np.float32)}


def test_torch_tensors_and_their_numpy_copies_have_the_same_fingerprint():
    arrays = _weights()
    tensors = {k: torch.from_numpy(v.copy()) for k, v in arrays.items()}
    assert fingerprint(arrays) == fingerprint(tensors)
    assert fingerprint_mismatch(fingerprint(arrays), fingerprint(tensors)) == []


def test_a_changed_sampled_element_or_shape_or_a_missing_tensor_shows_by_name():
    arrays = _weights()
    learner = fingerprint(arrays)
    for flat_index in (0, arrays["net.0.weight"].size - 1):  # first and last are always sampled
        changed = {k: v.copy() for k, v in arrays.items()}
        changed["net.0.weight"].reshape(-1)[flat_index] += 1e-6
        assert fingerprint_mismatch(fingerprint(changed), learner) == ["net.0.weight"]
    reshaped = {**arrays, "net.0.bias": arrays["net.0.bias"].reshape(8, 8)}
    assert fingerprint_mismatch(fingerprint(reshaped), learner) == ["net.0.bias"]
    assert fingerprint_mismatch(fingerprint({**arrays, "extra": np.ones(2)}), learner) == ["extra"]
    # a copy holding a subset of the learner's tensors is checked on those
    assert fingerprint_mismatch(fingerprint({"net.0.bias": arrays["net.0.bias"]}), learner) == []


def test_it_samples_a_few_elements_per_tensor_not_all():
    big = {"w": np.arange(1_000_000, dtype=np.float32)}
    sampled, shape = fingerprint(big)["w"]
    assert shape == (1_000_000,) and len(sampled) == SAMPLES * 8
    assert np.frombuffer(sampled, dtype=np.float64)[[0, -1]].tolist() == [0.0, 999_999.0]


def test_a_policy_s_fingerprint_reads_its_modules_or_else_its_numpy_weights():
    class Torchy:
        def __init__(self) -> None:
            self.net = torch.nn.Linear(4, 3)

        def modules(self):
            return {"net": self.net}

    class Numpy:
        def __init__(self, weights):
            self.w = weights

        def modules(self):
            return {}

        def get_weights(self):
            return self.w

    torchy = Torchy()
    as_numpy = {f"net.{k}": v.detach().numpy() for k, v in torchy.net.state_dict().items()}
    assert policy_fingerprint(torchy) == policy_fingerprint(Numpy(as_numpy)) == fingerprint(as_numpy)


def test_cpu_tensors_sampled_through_numpy_agree_with_the_torch_gather_for_every_dtype():
    # contiguous CPU tensors are sampled through a numpy view; non-contiguous ones (and dtypes numpy lacks) with a
    # torch gather: both must give the bytes of the same elements
    gen = torch.Generator().manual_seed(0)
    for dtype in (torch.float16, torch.float32, torch.float64, torch.int8, torch.uint8, torch.int32, torch.int64,
                  torch.bool):
        base = (torch.randn(7, 5, generator=gen) * 50).to(dtype)
        strided = base.t()  # not contiguous: the torch path
        assert not strided.is_contiguous()
        assert fingerprint({"w": strided}) == fingerprint({"w": strided.contiguous()}), dtype
        assert fingerprint({"w": base}) == fingerprint({"w": base.numpy().copy()}), dtype
    param = torch.nn.Parameter(torch.randn(6, 3, generator=gen))  # requires grad: sampled without autograd
    assert fingerprint({"p": param}) == fingerprint({"p": param.detach().numpy().copy()})
    bf16 = torch.randn(4, 4, generator=gen).to(torch.bfloat16)  # numpy has no bfloat16: the torch path
    assert fingerprint({"b": bf16}) == fingerprint({"b": bf16.float().numpy()})
