"""LeanAdam: Adam's fused kernel called directly gives exactly what ``optimizer.step()`` gives."""

from __future__ import annotations

import torch

from rlightning_core.policy.optim import LeanAdam, clear_grads


def _params(seed: int) -> list[torch.nn.Parameter]:
    g = torch.Generator().manual_seed(seed)
    shapes = [(4, 128), (128,), (2, 64, 64), (2, 1, 64), (2, 64), (2,)]
    return [torch.nn.Parameter(torch.randn(s, generator=g)) for s in shapes]


def _set_grads(params: list[torch.nn.Parameter], step: int) -> None:
    g = torch.Generator().manual_seed(1000 + step)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def _run(lean: bool, steps: int = 6, weight_decay: float = 0.0) -> tuple[list[torch.Tensor], torch.optim.Adam]:
    params = _params(0)
    opt = torch.optim.Adam(params, lr=1e-2, eps=1e-5, weight_decay=weight_decay, fused=True)
    stepper = LeanAdam(opt)
    for i in range(steps):
        opt.param_groups[0]["lr"] = 1e-2 * (1 - i / steps)  # annealed, as PPO does
        _set_grads(params, i)
        stepper.step() if lean else opt.step()
        stepper.zero_grad() if lean else opt.zero_grad(set_to_none=True)
    return [p.detach().clone() for p in params], opt


def test_lean_step_is_bit_identical_to_step() -> None:
    for wd in (0.0, 1e-3):
        ref, ref_opt = _run(lean=False, weight_decay=wd)
        got, opt = _run(lean=True, weight_decay=wd)
        assert LeanAdam(opt).state_summary()["direct"]
        for a, b in zip(ref, got, strict=True):
            assert torch.equal(a, b)
        for p_ref, p in zip(ref_opt.param_groups[0]["params"], opt.param_groups[0]["params"], strict=True):
            s_ref, s = ref_opt.state[p_ref], opt.state[p]
            assert torch.equal(s_ref["exp_avg"], s["exp_avg"]) and torch.equal(s_ref["exp_avg_sq"], s["exp_avg_sq"])
            assert float(s_ref["step"]) == float(s["step"]) == 6.0


def test_lean_step_after_load_state_dict_continues_exactly() -> None:
    """A resumed optimizer (new state tensors from a checkpoint) is stepped correctly by the direct path."""
    ref, _ = _run(lean=False, steps=6)
    params = _params(0)
    opt = torch.optim.Adam(params, lr=1e-2, eps=1e-5, fused=True)
    stepper = LeanAdam(opt)
    for i in range(3):
        opt.param_groups[0]["lr"] = 1e-2 * (1 - i / 6)
        _set_grads(params, i)
        stepper.step()
    state = opt.state_dict()
    params2 = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt2 = torch.optim.Adam(params2, lr=1e-2, eps=1e-5, fused=True)
    opt2.load_state_dict(state)
    stepper2 = LeanAdam(opt2)
    for i in range(3, 6):
        opt2.param_groups[0]["lr"] = 1e-2 * (1 - i / 6)
        _set_grads(params2, i)
        stepper2.step()
    for a, b in zip(ref, params2, strict=True):
        assert torch.equal(a, b.detach())


def test_lean_step_falls_back_when_a_gradient_is_missing_or_a_hook_is_set() -> None:
    params = _params(0)
    opt = torch.optim.Adam(params, lr=1e-2, fused=True)
    stepper = LeanAdam(opt)
    _set_grads(params, 0)
    stepper.step()
    _set_grads(params, 1)
    params[1].grad = None  # the public step skips it; the direct kernel call must not be used
    before = params[1].detach().clone()
    stepper.step()
    assert torch.equal(params[1].detach(), before)
    calls: list[int] = []
    handle = opt.register_step_post_hook(lambda *_: calls.append(1))
    _set_grads(params, 2)
    stepper.step()
    handle.remove()
    assert calls == [1]  # the hook ran: step() was used


def test_non_fused_optimizers_always_use_step() -> None:
    params = _params(0)
    opt = torch.optim.Adam(params, lr=1e-2, foreach=True)
    assert not LeanAdam(opt).state_summary()["direct"]
    sgd = torch.optim.SGD(params, lr=0.1)
    assert not LeanAdam(sgd).state_summary()["direct"]
    _set_grads(params, 0)
    before = params[0].detach().clone()
    LeanAdam(sgd).step()
    torch.testing.assert_close(params[0].detach(), before - 0.1 * params[0].grad)
    clear_grads(params)
    assert all(p.grad is None for p in params)


def test_lean_is_cached_per_optimizer() -> None:
    from rlightning_core.policy.optim import lean

    a = torch.optim.Adam(_params(0), lr=1e-3, fused=True)
    b = torch.optim.Adam(_params(1), lr=1e-3, fused=True)
    assert lean(a) is lean(a) and lean(a) is not lean(b) and lean(a).optimizer is a


def test_lean_steps_never_import_dynamo() -> None:
    """The first step creates Adam's state itself: ``Optimizer.step`` (which imports dynamo) never runs."""
    import subprocess
    import sys

    code = """
import sys, torch
from rlightning_core.policy.lazy_dynamo import dynamo_import_deferred
from rlightning_core.policy.optim import LeanAdam
net = torch.nn.Linear(4, 2)
with dynamo_import_deferred():
    opt = torch.optim.Adam(net.parameters(), lr=1e-2, fused=True)
lean = LeanAdam(opt)
for _ in range(3):
    net(torch.ones(5, 4)).square().sum().backward()
    lean.step()
    lean.zero_grad()
print('torch._dynamo' in sys.modules, float(opt.state[net.weight]['step']))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["False", "3.0"]
