"""``RunEvents``: one dispatch path for plugin hooks and Python callbacks, and the stops they may ask for."""

from __future__ import annotations

import logging

import pytest

from rlightning_core import Callback, StopTraining, hookimpl
from rlightning_core.callbacks import EVENTS, RunEvents
from rlightning_core.plugins import load_plugins
from rlightning_core.run import StopRequest


class Plugin:
    """A plugin object recording what it is given; ``stop_on`` raises StopTraining there, ``answer`` is returned."""

    def __init__(self, log: list, stop_on: str | None = None, answer: object = None) -> None:
        self.log, self.stop_on, self.answer = log, stop_on, answer

    def _record(self, name: str, *args: object) -> object:
        self.log.append(("plugin", name, *args))
        if name == self.stop_on:
            raise StopTraining(f"plugin says stop in {name}")
        return self.answer

    @hookimpl
    def on_metrics(self, step, metrics):
        return self._record("on_metrics", step)

    @hookimpl
    def on_eval(self, step, metrics):
        return self._record("on_eval", step, metrics["eval/episode_return_mean"])

    @hookimpl
    def on_run_end(self, run_dir, status, error):
        return self._record("on_run_end", status)


class Recorder(Callback):
    def __init__(self, log: list, tag: str, answer: object = None) -> None:
        self.log, self.tag, self.answer = log, tag, answer

    def on_metrics(self, step, m):  # renamed parameters work: callbacks are called positionally
        self.log.append((self.tag, "on_metrics", step))
        return self.answer

    def on_eval(self, step, metrics):
        self.log.append((self.tag, "on_eval", step, metrics["eval/episode_return_mean"]))
        return self.answer

    def on_run_end(self, run_dir, status, error):
        self.log.append((self.tag, "on_run_end", status))
        return False  # ignored: the run is over


def events_for(plugin: object | None, callbacks: list) -> RunEvents:
    plugins = load_plugins(allow=[], extra=[("rlt-plugin", plugin)] if plugin is not None else [])
    return RunEvents(plugins, callbacks, StopRequest())


def test_plugins_first_then_callbacks_in_list_order(tmp_path):
    log: list = []
    events = events_for(Plugin(log), [Recorder(log, "a"), Recorder(log, "b")])
    events.call_each("on_metrics", step=8, metrics={"loss/policy": 0.5})
    events.call_each("on_eval", step=8, metrics={"eval/episode_return_mean": 21.0})
    events.call_each("on_run_end", run_dir=tmp_path, status="completed", error=None)
    assert log == [("plugin", "on_metrics", 8), ("a", "on_metrics", 8), ("b", "on_metrics", 8),
                   ("plugin", "on_eval", 8, 21.0), ("a", "on_eval", 8, 21.0), ("b", "on_eval", 8, 21.0),
                   ("plugin", "on_run_end", "completed"), ("a", "on_run_end", "completed"),
                   ("b", "on_run_end", "completed")]
    assert not events.stop.requested  # on_run_end's False is ignored


def test_a_base_callback_does_nothing_and_asks_nothing(tmp_path):
    events = events_for(None, [Callback()])
    for name, args in EVENTS.items():
        events.call_each(name, **dict.fromkeys(args, tmp_path))
    assert not events.stop.requested


@pytest.mark.parametrize(("answer", "stops"), [(False, True), (None, False), (True, False), (0, False)])
def test_only_false_from_a_callback_stops(answer, stops):
    log: list = []
    events = events_for(None, [Recorder(log, "a", answer=answer), Recorder(log, "b")])
    events.call_each("on_metrics", step=4, metrics={})
    assert events.stop.requested is stops
    assert [e[0] for e in log] == ["a", "b"]  # the later callbacks still see the event
    if stops:
        assert events.stop.reason == "callback"
        assert events.stop.message == "callback Recorder.on_metrics returned False"
        assert events.stop.name == ""  # no signal


def test_stop_training_keeps_its_message_and_the_first_stop_wins():
    class Raiser(Callback):
        def __init__(self, text: str) -> None:
            self.text = text

        def on_eval(self, step, metrics):
            raise StopTraining(self.text)

    events = events_for(None, [Raiser("plateau at 20"), Raiser("second")])
    events.call_each("on_eval", step=4, metrics={"eval/episode_return_mean": 20.0})
    assert events.stop.message == "plateau at 20"

    bare = events_for(None, [type("Bare", (Callback,), {"on_eval": lambda self, s, m: (_ for _ in ()).throw(
        StopTraining())})()])
    bare.call_each("on_eval", step=4, metrics={})
    assert bare.stop.message == "callback Bare.on_eval raised StopTraining"


def test_a_plugin_stops_only_by_raising_stop_training():
    log: list = []
    returns_false = events_for(Plugin(log, answer=False), [])
    returns_false.call_each("on_metrics", step=1, metrics={})
    assert not returns_false.stop.requested

    raises = events_for(Plugin(log, stop_on="on_metrics"), [Recorder(log, "cb")])
    raises.call_each("on_metrics", step=2, metrics={})
    assert raises.stop.message == "plugin says stop in on_metrics"
    assert log[-1] == ("cb", "on_metrics", 2)  # callbacks still see the event


def test_a_failing_callback_raises_and_is_logged(caplog):
    class Broken(Callback):
        def on_metrics(self, step, metrics):
            raise ZeroDivisionError("callback bug")

    log: list = []
    events = events_for(Plugin(log), [Broken(), Recorder(log, "after")])
    with caplog.at_level(logging.ERROR, logger="rlightning"), pytest.raises(ZeroDivisionError, match="callback bug"):
        events.call_each("on_metrics", step=1, metrics={})
    assert "callback Broken.on_metrics raised ZeroDivisionError: the run fails" in caplog.text
    assert log == [("plugin", "on_metrics", 1)]


def test_a_signal_that_came_first_is_not_overwritten():
    events = events_for(None, [Recorder([], "a", answer=False)])
    events.stop.signum = 2
    events.call_each("on_metrics", step=1, metrics={})
    assert events.stop.reason == "interrupted" and events.stop.message is None and events.stop.name == "SIGINT"


def test_an_object_with_no_callback_method_or_a_class_is_refused():
    with pytest.raises(TypeError, match=r"callbacks: .* has none of the callback methods .*subclass "
                                        r"rlightning_core.Callback"):
        RunEvents(None, [lambda step: None])
    with pytest.raises(TypeError, match=r"callbacks: Recorder is a class; pass an instance \(Recorder\(\)\)"):
        RunEvents(None, [Callback(), Recorder])


def test_importing_callbacks_stays_light():
    import subprocess
    import sys

    code = ("import sys; from rlightning_core import Callback, StopTraining, train; "
            "assert 'torch' not in sys.modules and 'ray' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
