"""``NumericGuard.grad_norm``: the global gradient norm and clipping, with torch's bits on the CPU path."""

from __future__ import annotations

import pytest
import torch

from rlightning_core.policy.numerics import NumericGuard


def _params(seed: int, scale: float, dtype: torch.dtype = torch.float32) -> list[torch.nn.Parameter]:
    gen = torch.Generator().manual_seed(seed)
    shapes = [(11, 128), (128,), (2, 64, 64), (2, 1, 64), (3, 64), (3,), (1, 64), (1,), (3,)]
    params = [torch.nn.Parameter(torch.zeros(s, dtype=dtype)) for s in shapes]
    for p in params:
        p.grad = (torch.randn(p.shape, generator=gen) * scale).to(dtype)
    return params


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("scale", "max_norm"), [(1.0, 0.5), (1e-3, 0.5), (1.0, None), (30.0, 1e4)])
def test_grad_norm_gives_clip_grad_norm_s_bits(dtype, scale, max_norm):
    ours, theirs = _params(0, scale, dtype), _params(0, scale, dtype)
    norm = NumericGuard.grad_norm(ours, max_norm)
    if max_norm is None:
        expected = torch.nn.utils.get_total_norm([p.grad for p in theirs])
    else:
        expected = torch.nn.utils.clip_grad_norm_(theirs, max_norm)
    assert norm.dtype == expected.dtype and norm.item() == expected.item()
    for a, b in zip(ours, theirs, strict=True):
        assert torch.equal(a.grad, b.grad)
    if max_norm is not None and expected.item() > max_norm:  # clipped: the new norm is max_norm (to rounding)
        assert NumericGuard.grad_norm(ours).item() == pytest.approx(max_norm, rel=1e-5)


def test_grad_norm_skips_parameters_without_gradients_and_keeps_non_finite_norms():
    params = _params(1, 1.0)
    params[0].grad = None
    assert NumericGuard.grad_norm(params[:1]) is None
    expected = torch.nn.utils.get_total_norm([p.grad for p in params[1:]])
    assert NumericGuard.grad_norm(params).item() == expected.item()
    params[3].grad[0, 0, 5] = float("nan")
    assert torch.isnan(NumericGuard.grad_norm(params, 0.5))
    assert torch.isnan(params[1].grad).all()  # a NaN coefficient: the step must not be taken, and is not
