"""Run-lifecycle hooks reach every observer plugin through ``PluginSet.call_each``, which isolates
failures."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlightning_core.plugins import load_plugins

RECORDER = """
from rlightning_core import hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"
calls = []

@hookimpl
def on_run_start(config, run_dir):
    calls.append(("on_run_start", config, run_dir))

@hookimpl
def on_metrics(step, metrics):
    calls.append(("on_metrics", step, dict(metrics)))

@hookimpl
def on_checkpoint(path, step):
    calls.append(("on_checkpoint", path, step))

@hookimpl
def on_run_end(run_dir, status, error):
    calls.append(("on_run_end", run_dir, status, error))
"""

# Implements hooks with a subset of the spec's arguments, which pluggy allows.
PARTIAL = """
from rlightning_core import hookimpl

calls = []

@hookimpl
def on_run_end(status):
    calls.append(("on_run_end", status))

@hookimpl
def on_metrics(metrics):
    calls.append(("on_metrics", sorted(metrics)))
"""

FAULTY = """
from rlightning_core import hookimpl

calls = []

@hookimpl
def on_metrics(step, metrics):
    calls.append(step)
    raise ZeroDivisionError("observer bug")
"""


@pytest.fixture
def observers(make_plugin_dist):
    import sys

    make_plugin_dist("rlt-recorder", "1.0", "rlt_recorder", RECORDER, entry_name="recorder")
    make_plugin_dist("rlt-partial", "1.0", "rlt_partial", PARTIAL, entry_name="partial")
    make_plugin_dist("rlt-faulty", "1.0", "rlt_faulty", FAULTY, entry_name="faulty")
    ps = load_plugins(allow=["rlt-recorder", "rlt-partial", "rlt-faulty"])
    assert ps.errors() == []
    return ps, sys.modules["rlt_recorder"], sys.modules["rlt_partial"], sys.modules["rlt_faulty"]


def test_lifecycle_hooks_reach_observers_in_order(observers, tmp_path):
    ps, recorder, partial, _ = observers
    config, ckpt, error = object(), tmp_path / "ckpt-1.pt", RuntimeError("stopped")
    hooks = {p.name: p.hooks for p in ps.plugins}
    assert hooks["recorder"] == ["on_run_start", "on_metrics", "on_checkpoint", "on_run_end"]
    assert hooks["partial"] == ["on_metrics", "on_run_end"]

    ps.call_each("on_run_start", config=config, run_dir=tmp_path)
    ps.call_each("on_checkpoint", path=ckpt, step=64)
    ps.call_each("on_run_end", run_dir=tmp_path, status="failed", error=error)

    assert recorder.calls == [
        ("on_run_start", config, tmp_path),
        ("on_checkpoint", ckpt, 64),
        ("on_run_end", tmp_path, "failed", error),
    ]
    assert partial.calls == [("on_run_end", "failed")]
    assert isinstance(recorder.calls[0][2], Path)


def test_a_raising_observer_is_reported_once_and_does_not_starve_others(observers):
    ps, recorder, partial, faulty = observers

    with pytest.warns(RuntimeWarning, match=r"plugin 'faulty' raised in on_metrics: ZeroDivisionError: "
                                            r"observer bug \(further errors from this hook are silenced\)"):
        ps.call_each("on_metrics", step=1, metrics={"loss/policy": 0.5})
    ps.call_each("on_metrics", step=2, metrics={"loss/policy": 0.25})  # silenced: filterwarnings=error

    assert faulty.calls == [1, 2]
    assert recorder.calls == [("on_metrics", 1, {"loss/policy": 0.5}),
                              ("on_metrics", 2, {"loss/policy": 0.25})]
    assert partial.calls == [("on_metrics", ["loss/policy"])] * 2


def test_call_each_on_error_replaces_the_warning(observers):
    ps, recorder, _, _ = observers
    seen = []
    ps.call_each("on_metrics", on_error=lambda name, exc: seen.append((name, type(exc))), step=5, metrics={})
    ps.call_each("on_metrics", on_error=lambda name, exc: seen.append((name, type(exc))), step=6, metrics={})
    assert seen == [("faulty", ZeroDivisionError)] * 2
    assert [c[1] for c in recorder.calls] == [5, 6]


def test_call_each_calls_plugins_in_pluggy_order(make_plugin_dist):
    source = """
from rlightning_core import hookimpl

@hookimpl
def on_metrics(metrics):
    metrics["order"].append(__name__)
"""
    for module in ("rlt_order_c", "rlt_order_a", "rlt_order_b"):
        make_plugin_dist(module.replace("_", "-"), "1.0", module, source)
    ps = load_plugins(allow=["rlt-order-a", "rlt-order-b", "rlt-order-c"])
    isolated: dict[str, list[str]] = {"order": []}
    ps.call_each("on_metrics", step=0, metrics=isolated)
    direct: dict[str, list[str]] = {"order": []}
    ps.hook.on_metrics(step=0, metrics=direct)
    # Same order as pluggy's own call (last registered first, tryfirst/trylast honoured), just isolated.
    assert isolated["order"] == direct["order"] == ["rlt_order_c", "rlt_order_b", "rlt_order_a"]
