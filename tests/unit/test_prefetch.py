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
