"""Weights packed into one blob for an in-driver learner's collect calls: every array back, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from rlightning_core.distributed.ray_common import pack_weights, unpack_weights


def test_every_array_comes_back_with_its_bits_dtype_and_shape() -> None:
    rng = np.random.default_rng(0)
    weights = {
        "net.w": rng.normal(size=(4, 8)).astype(np.float32),
        "net.steps": np.array(12345678901, dtype=np.int64),
        "net.empty": np.zeros((0, 3), np.float32),
        "net.strided": rng.normal(size=10)[::3],  # not contiguous: packed as its values
        "net.nan": np.array([np.nan, -0.0, np.inf], np.float32),
    }
    layout, blob = pack_weights(weights)
    assert isinstance(blob, bytes) and len(blob) == sum(v.nbytes for v in weights.values())
    back = unpack_weights((layout, blob))
    assert list(back) == list(weights)
    for key, value in weights.items():
        assert back[key].dtype == value.dtype and back[key].shape == value.shape
        assert back[key].tobytes() == np.ascontiguousarray(value).tobytes()


def test_a_layout_that_does_not_cover_the_blob_is_refused() -> None:
    layout, blob = pack_weights({"a": np.ones(4, np.float32)})
    with pytest.raises(ValueError, match="covers 16 bytes of a 20-byte blob"):
        unpack_weights((layout, blob + b"1234"))
