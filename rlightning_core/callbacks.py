"""Python callbacks: observe a run from the process that started it, and stop it.

``engine.run(run_dir, callbacks=[...])`` and :func:`rlightning_core.train` take :class:`Callback` objects. They
see the events the lifecycle hooks see (:mod:`rlightning_core.hookspecs`), through the same dispatch
(:class:`RunEvents`): plugins first, then the callbacks in list order. A callback stops the run by returning
``False`` or raising :class:`StopTraining`; the run then ends like a SIGINT does, at the iteration boundary with a
final checkpoint, and ``EngineResult.stop_reason`` is ``"callback"``. Any other exception from a callback fails
the run. Plugin hooks stop a run only by raising :class:`StopTraining` (their return values are ignored).

Importing this module is cheap (no torch, no ray).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["EVENTS", "Callback", "RunEvents", "StopTraining", "check_callbacks"]

log = logging.getLogger("rlightning")

#: Each event and its arguments, in the order hooks and callbacks take them.
EVENTS: dict[str, tuple[str, ...]] = {
    "on_run_start": ("config", "run_dir"),
    "on_metrics": ("step", "metrics"),
    "on_eval": ("step", "metrics"),
    "on_checkpoint": ("path", "step"),
    "on_video": ("path", "step", "tag"),
    "on_run_end": ("run_dir", "status", "error"),
}


class StopTraining(Exception):
    """Raised by a callback or a plugin hook to end the run at the iteration boundary with a final checkpoint.

    The message (optional) is kept as ``EngineResult.stop_message``.
    """


class Callback:
    """Base class with a no-op method per event; override the ones you need.

    Every method may return ``False`` to stop the run (``None`` / anything else goes on). Callbacks run in the
    driver process, after the plugins' hooks for the same event, in the order they were given.
    """

    def on_run_start(self, config: Any, run_dir: Path) -> bool | None:
        """The run directory exists and the resolved config (``MainConfig``) is saved; no step has run."""
        return None

    def on_metrics(self, step: int, metrics: dict[str, float]) -> bool | None:
        """A row of metrics was logged at ``step`` env steps (every ``logging.log_every`` iterations)."""
        return None

    def on_eval(self, step: int, metrics: dict[str, float]) -> bool | None:
        """An evaluation finished: its ``eval/*`` metrics (e.g. ``eval/episode_return_mean``)."""
        return None

    def on_checkpoint(self, path: Path, step: int) -> bool | None:
        """A checkpoint file was written completely."""
        return None

    def on_video(self, path: Path, step: int, tag: str) -> bool | None:
        """A training video (MP4) was written (``logging.video_every``)."""
        return None

    def on_run_end(self, run_dir: Path, status: str, error: BaseException | None) -> bool | None:
        """The run ended: ``completed``, ``interrupted`` or ``failed`` (``error`` set). Its return is ignored."""
        return None


class RunEvents:
    """The run's one dispatch path: every lifecycle event goes to the plugins' hooks, then to the callbacks.

    A stop asked by either is recorded on ``stop`` (the engine's
    :class:`~rlightning_core.run.StopRequest`, which SIGINT/SIGTERM also set): the first one's message is kept.

    Args:
        plugins: the run's :class:`~rlightning_core.plugins.PluginSet` (``None``: callbacks only).
        callbacks: :class:`Callback` objects (any object with some of its methods works).
        stop: where a stop is recorded.
    """

    def __init__(self, plugins: Any, callbacks: Iterable[Any] = (), stop: Any = None) -> None:
        from rlightning_core.run import StopRequest

        self.plugins = plugins
        self.callbacks = check_callbacks(callbacks)
        self.stop = stop if stop is not None else StopRequest()

    def call_each(self, hook_name: str, /, **kwargs: Any) -> None:
        """Send one event to every plugin hook, then every callback (positional, in :data:`EVENTS` order)."""
        if self.plugins is not None:
            stopped = self.plugins.call_each(hook_name, **kwargs)
            if stopped is not None and hook_name != "on_run_end":  # after on_run_end there is nothing to stop
                name, exc = stopped
                self._request(f"plugin {name!r} raised StopTraining in {hook_name}", exc)
        args = [kwargs[a] for a in EVENTS[hook_name]]
        failed: Exception | None = None  # on_run_end reaches every callback; its first error is raised after
        for cb in self.callbacks:
            method = getattr(cb, hook_name, None)
            if method is None:
                continue
            where = f"callback {type(cb).__name__}.{hook_name}"
            try:
                answer = method(*args)
            except StopTraining as exc:
                if hook_name != "on_run_end":
                    self._request(f"{where} raised StopTraining", exc)
                continue
            except Exception as exc:
                log.error("%s raised %s: the run fails", where, type(exc).__name__)
                if hook_name != "on_run_end":
                    raise
                failed = failed or exc
                continue
            if answer is False and hook_name != "on_run_end":
                self._request(f"{where} returned False", None)
        if failed is not None:
            raise failed

    def _request(self, default: str, exc: StopTraining | None) -> None:
        message = str(exc) if exc is not None and str(exc) else default
        if self.stop.message is None and not self.stop.requested:
            self.stop.message = message
            log.warning("stop requested (%s): stopping after this iteration with a final checkpoint", message)


def check_callbacks(callbacks: Iterable[Any]) -> list[Any]:
    """``callbacks`` as a list, or a ``TypeError`` naming the first item that is not a callback object."""
    out = list(callbacks)
    for cb in out:
        if isinstance(cb, type):
            raise TypeError(f"callbacks: {cb.__name__} is a class; pass an instance ({cb.__name__}())")
        if not any(callable(getattr(cb, name, None)) for name in EVENTS):
            raise TypeError(f"callbacks: {cb!r} has none of the callback methods ({', '.join(EVENTS)}); "
                            "subclass rlightning_core.Callback")
    return out
