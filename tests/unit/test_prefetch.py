"""``prefetch_module``: an import on a background thread, optionally at a lower priority."""

from __future__ import annotations

import os
import sys
import threading
import time

import pytest

from rlightning_core.policy.lazy_dynamo import prefetch_module


def _wait_for(name: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while name not in sys.modules or not hasattr(sys.modules[name], "on_main"):
        assert time.monotonic() < deadline, f"{name} was not imported"
        time.sleep(0.01)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread niceness is a Linux feature")
@pytest.mark.parametrize("nice", [0, 7])
def test_the_module_is_imported_on_a_thread_at_the_asked_priority(tmp_path, monkeypatch, nice):
    name = f"_rl_prefetched_{nice}"
    (tmp_path / f"{name}.py").write_text(
        "import os, threading\n"
        "niceness = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())\n"
        "on_main = threading.current_thread() is threading.main_thread()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    try:
        prefetch_module(name, nice=nice)
        _wait_for(name)
        module = sys.modules[name]
        assert module.on_main is False  # imported on the prefetch thread
        assert module.niceness == min(base + nice, 19)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == base  # this thread keeps its own
    finally:
        sys.modules.pop(name, None)


def test_several_steps_run_in_order_on_one_thread_and_a_failure_does_not_stop_the_rest(tmp_path, monkeypatch):
    """Module names and callables, in order; a step that raises is skipped (its import raises later, in place)."""
    name = "_rl_prefetched_after"
    (tmp_path / f"{name}.py").write_text(
        "import threading\non_main = threading.current_thread() is threading.main_thread()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ran: list[tuple[str, str]] = []

    def first() -> None:
        ran.append(("first", threading.current_thread().name))

    def broken() -> None:
        ran.append(("broken", threading.current_thread().name))
        raise RuntimeError("no")

    try:
        prefetch_module(first, "_rl_no_such_module", broken, name, nice=0)
        _wait_for(name)
        assert [what for what, _ in ran] == ["first", "broken"]
        assert ran[0][1] == ran[1][1] != threading.main_thread().name  # one background thread
        assert sys.modules[name].on_main is False
    finally:
        sys.modules.pop(name, None)


def test_warming_ray_serialization_imports_its_add_ons_and_registers_nothing():
    """The imports Ray's serializer add-ons make happen ahead; Ray's own pickler dispatch table is untouched."""
    import subprocess

    pytest.importorskip("ray")
    code = (
        "import importlib.util, sys\n"
        "from ray import cloudpickle\n"
        "from rlightning_core.distributed.cluster import warm_ray_serialization\n"
        "addons = [m for m in ('pydantic', 'starlette') if importlib.util.find_spec(m) is not None]\n"
        "assert not any(m in sys.modules for m in addons), addons\n"
        "before = dict(cloudpickle.CloudPickler.dispatch)\n"
        "warm_ray_serialization()\n"
        "assert all(m in sys.modules for m in addons), addons\n"
        "assert dict(cloudpickle.CloudPickler.dispatch) == before\n"
        "print(addons)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
