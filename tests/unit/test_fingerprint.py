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
