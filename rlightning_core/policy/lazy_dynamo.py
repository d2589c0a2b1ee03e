"""Keep ``torch._dynamo`` out of a learner's start-up, steps and checkpoints (local mode and Ray actors).

``torch.optim.Optimizer`` wraps ``add_param_group`` (called by every optimizer's ``__init__``), ``zero_grad``,
``state_dict`` and ``load_state_dict`` in ``torch._disable_dynamo``, which imports ``torch._dynamo`` (and with
it sympy: ~1.6 s of CPU and ~65 MiB on this project's machines) the first time one of them runs, only to mark
the method as never compiled. While nothing is being compiled that mark changes nothing, so building the
learner under :func:`dynamo_import_deferred` calls those methods directly; the import then happens at the
first optimizer step, after the run's first env steps, instead of on the path to them. Outside the block torch
behaves exactly as before (the shortcut is removed on exit).

If torch's internals differ from what this expects, or ``torch._dynamo`` is already imported, it does nothing.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

__all__ = ["dynamo_import_deferred", "prefetch_module"]

#: The attribute ``torch._disable_dynamo``'s wrapper caches its dynamo-disabled callable in.
_CACHE = "__dynamo_disable"


def _wrapped_methods(torch: Any) -> list[Any]:
    """The original functions behind the ``torch._disable_dynamo``-wrapped methods of the optimizers."""
    try:
        from torch._compile import _disable_dynamo

        probe = _disable_dynamo(lambda: None).__code__
    except Exception:  # another torch: nothing to do
        return []
    classes = [torch.optim.Optimizer, *torch.optim.Optimizer.__subclasses__()]
    found = []
    for cls in classes:
        for attr in vars(cls).values():
            fn = getattr(attr, "__wrapped__", None)
            if getattr(attr, "__code__", None) is probe and callable(fn) and fn not in found:
                found.append(fn)
    return found


@contextlib.contextmanager
def dynamo_import_deferred() -> Iterator[int]:
    """Within the block, optimizer construction (and state loading) does not import ``torch._dynamo``.

    Yields how many methods were short-cut (0: torch is left alone).
    """
    if "torch._dynamo" in sys.modules:
        yield 0
        return
    import torch

    patched = []
    for fn in _wrapped_methods(torch):
        if _CACHE not in fn.__dict__:
            setattr(fn, _CACHE, fn)  # the wrapper calls the cached callable: here the method itself
            patched.append(fn)
    try:
        yield len(patched)
    finally:
        for fn in patched:
            if fn.__dict__.get(_CACHE) is fn:
                delattr(fn, _CACHE)


def prefetch_module(name: str, *, nice: int = 0) -> None:
    """Import module ``name`` on a daemon thread, ahead of its first use, while this thread waits on something.

    For an in-driver learner: ``torch`` while ``ray.init`` waits on Ray's daemons. A later ``import`` of the same
    module waits for this one (the import lock), so it is never loaded twice; a failure here is silent and
    surfaces, with its own message, at that import. ``nice`` > 0 lowers the importing thread's priority, so it
    uses the CPU that what this thread waits on leaves idle instead of slowing it down.
    """
    if name in sys.modules:
        return
    import threading

    def load() -> None:
        import importlib
        import os

        if nice:  # Linux: a thread's own niceness (elsewhere this does nothing)
            with contextlib.suppress(Exception):
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
        with contextlib.suppress(Exception):
            importlib.import_module(name)

    threading.Thread(target=load, name=f"rlightning-prefetch-{name}", daemon=True).start()
