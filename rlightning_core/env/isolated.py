"""An env worker in a child process, so that a hung ``step`` or ``reset`` can be detected and killed.

A thread stuck in a simulator cannot be stopped; a process can. When an env config sets ``step_timeout_s`` in
local mode, :func:`~rlightning_core.env.group.build_env_group` builds each of its workers inside a
:class:`ProcessEnvWorker`: the worker lives in a ``spawn``-ed child that loads the driver's plugin set and
answers ``reset`` / ``step`` / ``state_dict`` over a pipe. A call that gets no answer within the timeout kills
the child and raises :class:`EnvTimeoutError`; the env-runner then replaces the worker (see
:class:`~rlightning_core.env.runner.EnvRunner`). The child ignores SIGINT (a Ctrl-C in the terminal stops the
run through the driver, which still needs its envs for the final checkpoint).

The pipe carries pickles between this process and its own child only (params, actions, step batches): nothing
from outside the run is ever unpickled.
"""

from __future__ import annotations

import contextlib
import traceback
import weakref
from collections.abc import Sequence
from typing import Any

__all__ = ["EnvTimeoutError", "ProcessEnvWorker", "RemoteEnvError"]

#: How long a child may take to start (imports, plugin loading, building the envs).
START_TIMEOUT_S = 120.0


class EnvTimeoutError(TimeoutError):
    """An env worker did not answer within ``env.step_timeout_s`` (its process was killed)."""


class RemoteEnvError(RuntimeError):
    """An env worker raised in its child process; the message carries the original type, text and traceback."""


def _serve(conn: Any, component: str, params: Any, build_kwargs: dict[str, Any], selection: Sequence[str]) -> None:
    """The child's loop: build the worker, then answer calls until ``close`` or the pipe closes."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from rlightning_core.plugins import load_plugins, reset_plugins

        plugins = load_plugins(allow=list(selection), deny=[], strict=False)
        reset_plugins(plugins)
        worker = plugins.registry.resolve("env", component).build(params, **build_kwargs)
        conn.send((True, (int(worker.num_envs), worker.observation_space, worker.action_space)))
    except BaseException as exc:  # report, then exit: the parent raises it
        conn.send((False, _describe(exc)))
        return
    while True:
        try:
            method, args = conn.recv()
        except (EOFError, OSError):
            break
        try:
            if method == "close":
                worker.close()
                conn.send((True, None))
                break
            if method == "state_dict":
                get = getattr(worker, "state_dict", None)
                result = get() if callable(get) else None
            elif method == "load_state_dict":
                result = worker.load_state_dict(*args)
            else:
                result = getattr(worker, method)(*args)
            conn.send((True, result))
        except BaseException as exc:  # the worker's failure goes back to the parent
            conn.send((False, _describe(exc)))


def _reap(proc: Any) -> None:
    """Kill a child that is still running (a worker never closed, or a hung one at interpreter exit)."""
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


def _describe(exc: BaseException) -> str:
    tb = "".join(traceback.format_exception(exc)).rstrip()
    return f"{type(exc).__name__}: {exc}\n{tb}"


class ProcessEnvWorker:
    """An :class:`~rlightning_core.env.base.EnvWorker` hosted in a child process, with a per-call timeout.

    Args:
        component: the registered env name (resolved in the child against ``selection``'s plugins).
        params: the structured env params (pickled to the child).
        build_kwargs: ``num_envs``, ``seed``, ``worker_index`` (and ``render_mode``) for the factory.
        selection: the external plugins to load in the child (``PluginSet.selection()``).
        timeout_s: the longest a ``reset`` or ``step`` may take.
    """

    def __init__(self, component: str, params: Any, *, build_kwargs: dict[str, Any], selection: Sequence[str],
                 timeout_s: float) -> None:
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.timeout_s = float(timeout_s)
        self._conn, child = ctx.Pipe()
        # not a daemon, so that the hosted worker may start processes of its own (e.g. an async vector env);
        # the finalizer kills it at the latest when this object goes away or the interpreter exits
        self._proc = ctx.Process(target=_serve, args=(child, component, params, build_kwargs, list(selection)),
                                 daemon=False, name=f"rlightning-env-{component}-{build_kwargs.get('worker_index', 0)}")
        self._proc.start()
        self._reaper = weakref.finalize(self, _reap, self._proc)
        child.close()
        self._closed = False
        self.num_envs, self.observation_space, self.action_space = self._call(
            "start", timeout=max(START_TIMEOUT_S, self.timeout_s), send=False)

    @property
    def pid(self) -> int | None:
        """The child's process id."""
        return self._proc.pid

    def _call(self, method: str, *args: Any, timeout: float | None = None, send: bool = True) -> Any:
        if self._closed:
            raise RuntimeError(f"{method}() on a closed env worker")
        limit = self.timeout_s if timeout is None else timeout
        try:
            if send:
                self._conn.send((method, args))
            answered = self._conn.poll(limit)
            if answered:
                ok, value = self._conn.recv()
        except (EOFError, OSError, BrokenPipeError) as exc:
            self.kill()
            raise RemoteEnvError(f"the env worker process died during {method}() (exit code "
                                 f"{self._proc.exitcode})") from exc
        if not answered:
            self.kill()
            raise EnvTimeoutError(f"{method}() did not return within {limit:g}s (env.step_timeout_s); the env "
                                  "worker's process was killed")
        if not ok:
            raise RemoteEnvError(value)
        return value

    def reset(self, seed: int | None = None) -> Any:
        """Reset every env (in the child)."""
        return self._call("reset", seed)

    def step(self, actions: Any) -> Any:
        """Step every env (in the child)."""
        return self._call("step", actions)

    def state_dict(self) -> Any:
        """The hosted worker's state, or ``None`` if it cannot save one."""
        return self._call("state_dict")

    def load_state_dict(self, state: Any) -> None:
        """Restore the hosted worker's state."""
        self._call("load_state_dict", state)

    def kill(self) -> None:
        """Kill the child at once (a hung worker); idempotent."""
        self._closed = True
        if self._proc.is_alive():
            self._proc.kill()
        self._proc.join(timeout=5)
        with contextlib.suppress(OSError):
            self._conn.close()

    def close(self) -> None:
        """Close the hosted worker and let the child exit (killed if it does not within a few seconds)."""
        if self._closed:
            return
        try:
            self._conn.send(("close", ()))
            if self._conn.poll(5.0):
                self._conn.recv()
        except (EOFError, OSError):
            pass
        finally:
            self._closed = True
            self._proc.join(timeout=5)
            if self._proc.is_alive():
                self._proc.kill()
                self._proc.join(timeout=5)
            with contextlib.suppress(OSError):
                self._conn.close()
