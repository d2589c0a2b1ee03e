"""The first rollout overlaps the learner actor's start-up (``cluster.early_rollout``).

A learner actor is a fresh Ray worker that can only start once ``ray.init`` returned, and then imports torch
(2-3 s on a laptop) before it can build the policy whose initial weights the first rollout needs. Instead, a
short-lived helper process, started before ``ray.init`` at a low priority, imports torch while Ray starts and
builds the very same learner (:class:`~rlightning_core.distributed.actors.LearnerActor`: the driver's plugin
set, the learner's seed, no GPU). The env runners act with its initial weights while the learner actor starts;
the learner then adopts them bit for bit (:meth:`LearnerActor.adopt_initial_weights`), so the first update is
exactly on-policy. The helper exits as soon as it answered: no steady-state memory.

The helper is this process's own child and speaks length-prefixed pickles over its stdin/stdout pipes (nothing
else can write to them). Anything going wrong with it only means the runners wait for the learner, as before.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import struct
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rlightning_core.config.schema import MainConfig
from rlightning_core.distributed.ray_common import SYNC_ENGINES, RayExecutionState

__all__ = ["IDLE_EXIT_S", "EarlyRolloutMixin", "HelperFailed", "LearnerHelper", "early_rollout_possible",
           "start_helper"]

log = logging.getLogger("rlightning")

_HEADER = struct.Struct("!Q")
#: How often the driver checks whether the learner actor got ready while it waits for the helper.
_POLL_S = 0.05
#: A helper left waiting this long for its next message exits: no run took it (a RemoteEnvGroup used on its own),
#: or the run failed before closing it.
IDLE_EXIT_S = 300.0


class HelperFailed(RuntimeError):
    """The helper could not answer (it raised, died or was too slow); the runners wait for the learner."""


def _cluster_allows(cc: Any) -> bool:
    return (bool(cc.early_rollout) and cc.num_learners == 1 and cc.topology == "env_runner"
            and not cc.sharded_buffer and not cc.offload and cc.weight_sync == "auto" and not cc.learner_num_gpus)


def early_rollout_possible(config: MainConfig) -> bool:
    """Whether the first rollout may use a helper's initial weights instead of waiting for the learner actor.

    One CPU learner actor whose (small) weights ride inline to the env runners, in the sync engine: the same
    conditions as the learner's line, except ``cluster.local_channel``. The execution still checks the size.
    """
    return (_cluster_allows(config.cluster) and config.engine.type in SYNC_ENGINES
            and config.policy.device in ("cpu", "auto"))


def start_helper(cc: Any) -> LearnerHelper | None:
    """A helper, started right before ``ray.init`` when the cluster config allows an early rollout.

    :class:`~rlightning_core.distributed.cluster.RayCluster` starts it; the execution hands it the learner's
    arguments, or closes it.
    """
    if not _cluster_allows(cc) or os.name != "posix":  # (it waits on pipes with select)
        return None
    try:
        return LearnerHelper()
    except OSError as exc:
        log.info("cluster.early_rollout: no helper process (%s); the first rollout waits for the learner", exc)
        return None


def _send(fd: int, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    view = memoryview(_HEADER.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def _recv(fd: int, deadline: float | None = None, loads: Any = None) -> Any:
    """One message from ``fd``; ``EOFError`` when the other side closed, ``TimeoutError`` past ``deadline``.

    ``loads`` reads it (the driver: :func:`_load_reply`, data only); the helper reads its parent's messages
    (the policy config, the env spaces) with pickle, as a spawned multiprocessing child does.
    """
    def exact(n: int) -> bytes:
        parts, left = [], n
        while left:
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                    raise TimeoutError
            part = os.read(fd, min(left, 1 << 20))
            if not part:
                raise EOFError
            parts.append(part)
            left -= len(part)
        return b"".join(parts)

    (size,) = _HEADER.unpack(exact(_HEADER.size))
    payload = exact(size)
    return loads(payload) if loads is not None else pickle.loads(payload)  # from this process's parent


def _load_reply(payload: bytes) -> Any:
    """A helper's reply: plain data, numpy arrays, dtypes and scalar types (an extras spec's), nothing else."""
    import io

    import numpy as np

    from rlightning_core.distributed.channel import _DataUnpickler

    class ReplyUnpickler(_DataUnpickler):
        def find_class(self, module: str, name: str) -> Any:
            if module == "numpy" and isinstance(getattr(np, name, None), type) and issubclass(getattr(np, name),
                                                                                          np.generic):
                return getattr(np, name)
            return super().find_class(module, name)

    return ReplyUnpickler(io.BytesIO(payload)).load()


#: The helper's first lines: the lowest CPU priority before anything is imported (its imports are speculative work
#: while Ray starts): ``SCHED_IDLE`` runs it only on a core nothing else wants; niceness 19 where that is missing.
_BOOTSTRAP = """import os
try:
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
except (AttributeError, OSError):
    os.nice(19)
from rlightning_core.distributed.early_start import _serve
_serve({idle_exit_s!r})
"""


class LearnerHelper:
    """The driver's handle on the helper process: a :class:`LearnerActor` it calls methods of.

    The process imports torch at once; :meth:`start_learner` then gives it the learner's arguments.
    """

    def __init__(self, idle_exit_s: float = IDLE_EXIT_S) -> None:
        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # like a learner actor that reserves no GPU
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-c", _BOOTSTRAP.format(idle_exit_s=float(idle_exit_s))], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, close_fds=True)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self._in, self._out = self.proc.stdin.fileno(), self.proc.stdout.fileno()

    def start_learner(self, policy_cfg: Any, *, selection: list[str], seed: int, num_threads: int) -> None:
        """Build the learner (as ``LearnerActor(policy_cfg, selection=..., seed=..., num_threads=...)``)."""
        if self.proc is None:
            raise HelperFailed("the helper is closed")
        try:
            _send(self._in, {"policy_cfg": policy_cfg, "selection": list(selection), "seed": seed,
                             "num_threads": num_threads})
        except (OSError, pickle.PicklingError, TypeError, AttributeError) as exc:
            self.close()
            raise HelperFailed(f"could not hand the policy config to the helper: {exc}") from exc

    def call(self, method: str, *args: Any, timeout: float, give_up: Callable[[], bool] | None = None) -> Any:
        """``LearnerActor.<method>(*args)`` in the helper; raises :class:`HelperFailed` on any failure.

        ``give_up``: polled while no answer has come; once it returns true the call fails (the real learner
        was ready first, so the helper, running at the lowest priority, would only make the runners wait).
        """
        if self.proc is None:
            raise HelperFailed("the helper is closed")
        deadline = time.monotonic() + timeout
        try:
            _send(self._in, (method, args))
            while give_up is not None and not select.select([self._out], [], [], _POLL_S)[0]:
                if give_up():
                    raise HelperFailed(f"the learner actor was ready before the helper answered {method}")
                if time.monotonic() >= deadline:
                    raise TimeoutError
            status, value = _recv(self._out, deadline, _load_reply)
        except TimeoutError:
            raise HelperFailed(f"no answer to {method} within {timeout:.0f}s") from None
        except (OSError, EOFError, pickle.PickleError, TypeError, AttributeError, ValueError) as exc:
            raise HelperFailed(f"the helper went away ({type(exc).__name__}: {exc})") from exc
        if status != "ok":
            raise HelperFailed(str(value))
        return value

    def close(self) -> None:
        """Let the helper exit (it does at end of input); it is reaped without waiting for it here."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for pipe in (proc.stdin, proc.stdout):
            with contextlib.suppress(OSError):
                pipe.close()  # type: ignore[union-attr]
        import threading

        def reap() -> None:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

        threading.Thread(target=reap, name="rlightning-helper-reaper", daemon=True).start()


class EarlyRolloutMixin(RayExecutionState):
    """Mixed into :class:`~rlightning_core.distributed.execution.RayExecution`: the learner's deferred start."""

    learners: list[Any]
    needs_next_obs: bool
    _sync_info: dict[str, float]

    def _take_helper(self, clusters: list[Any]) -> LearnerHelper | None:
        """The helper started with Ray (by whichever of ``clusters`` started it), given the learner's arguments.

        Closed instead unless :func:`early_rollout_possible`.
        """
        self._learner_starting: list[Any] = []
        self._initial_weights: Any = None
        helper = None
        for cluster in clusters:
            if cluster is not None and getattr(cluster, "helper", None) is not None:
                helper, cluster.helper = helper or cluster.helper, None
        if helper is None:
            return None
        if not (early_rollout_possible(self.config) and self.policy_cfg.device in ("cpu", "auto")):
            helper.close()
            return None
        try:
            helper.start_learner(self.policy_cfg, selection=self.plugins.selection(), seed=self._learner_seed(),
                                 num_threads=self.policy_cfg.num_threads)
        except HelperFailed as exc:
            log.info("cluster.early_rollout: %s; the first rollout waits for the learner", exc)
            return None
        return helper

    def _learner_seed(self) -> int:
        from rlightning_core.env.seeding import derive_seed

        return derive_seed(self.config.seed, 3, 0)

    def _early_learner(self, helper: LearnerHelper, buffer_args: tuple[str, Any], spec_of: Any) -> Any:
        """Initial weights from the helper; the learner's own start-up is queued without waiting for it.

        Returns the policy's extras spec, or ``None`` when the helper could not stand in (the caller then
        waits for the learner as usual). ``spec_of(extras)`` is the learner's buffer spec.
        """
        from rlightning_core.distributed.ray_common import REPLY_SYNC_MAX_BYTES

        bname, bparams = buffer_args
        timeout = self.config.cluster.actor_start_timeout_s
        ready = self.learner.started.remote()  # the learner's own start-up (torch, plugins) is done

        def learner_ready() -> bool:
            return bool(self.ray.wait([ready], timeout=0)[0])

        try:
            needs = helper.call("buffer_needs_next_obs", bname, timeout=timeout, give_up=learner_ready)
            if not isinstance(needs, bool):
                raise HelperFailed(f"buffer {bname!r} declares no class attribute needs_next_obs")
            obs_space, act_space = self.observation_space, self.action_space
            extras = helper.call("build", obs_space, act_space, timeout=timeout, give_up=learner_ready)
            nbytes = int(helper.call("weights_nbytes", timeout=timeout, give_up=learner_ready))
            if not 0 < nbytes <= REPLY_SYNC_MAX_BYTES:
                raise HelperFailed(f"{nbytes} bytes of weights do not ride inline")
            weights = helper.call("get_weights", timeout=timeout, give_up=learner_ready)
        except HelperFailed as exc:
            log.info("cluster.early_rollout: the helper could not stand in for the learner (%s); the first rollout "
                     "waits for it", exc)
            return None
        finally:
            helper.close()
        self.needs_next_obs = needs
        self._sync_info = {"bytes": float(nbytes)}
        self._initial_weights = self.ray.put(weights)  # the first sync sends these (WeightSyncMixin.sync)
        from rlightning_core.weights.fingerprint import fingerprint

        self._initial_fp = fingerprint(weights)  # what the runners must hold after it
        self._early_since = time.perf_counter()
        ln = self.learner  # its calls run in this order, after its start-up, before anything sent later
        self._learner_starting = [ln.build.remote(obs_space, act_space),
                                  ln.bind_buffer.remote(bname, bparams, spec_of(extras)),
                                  ln.adopt_initial_weights.remote(self._initial_weights)]
        return extras

    def _learner_started(self) -> None:
        """Wait for a deferred learner start-up (raising its error), then open its line (if possible)."""
        refs, self._learner_starting = getattr(self, "_learner_starting", []), []
        if not refs:
            return
        t0 = time.perf_counter()
        try:
            _, needs, same = self._get(refs, self.config.cluster.actor_start_timeout_s, "start the learner")
        except self.ray.exceptions.RayActorError as exc:
            raise self._learner_failed(exc) from exc
        log.info("cluster.early_rollout: the learner actor was ready %.2fs after the runners got their first "
                 "weights (the first learn waited %.2fs for it)", time.perf_counter() - self._early_since,
                 time.perf_counter() - t0)
        if bool(needs) != self.needs_next_obs:
            from rlightning_core.distributed.ray_common import WorkerFailure

            raise WorkerFailure(f"buffer {self.config.buffer.type!r}: its instance says needs_next_obs={needs}, its "
                                f"class {self.needs_next_obs}; the env runners were told the class's. Set "
                                "cluster.early_rollout: false (or make needs_next_obs a class attribute)")
        if not same:
            log.info("cluster.early_rollout: the learner actor built other initial weights than the helper "
                     "(another CPU or torch build on its node?); it adopted the helper's, which the runners act with")
        if getattr(self, "_line_possible", False):
            self._open_line()
            if self._line_node is not None:
                for w, actor in enumerate(self.env_group.actors):
                    self._attach_channel(w, actor)

    if TYPE_CHECKING:  # RayExecution's (and LearnerLineMixin's) own
        policy_cfg: Any
        plugins: Any
        observation_space: Any
        action_space: Any
        _line_node: str | None

        def _get(self, refs: Any, timeout: float, what: str) -> Any: ...
        def _learner_failed(self, exc: BaseException) -> Exception: ...
        def _open_line(self) -> None: ...
        def _attach_channel(self, w: int, actor: Any) -> None: ...


def _serve(idle_exit_s: float) -> None:
    """The helper's side: build a :class:`LearnerActor` and answer method calls until stdin closes."""
    out = os.dup(1)
    os.dup2(2, 1)  # a plugin's print goes to stderr, not into the replies (its priority: _BOOTSTRAP)
    learner: Any = None
    failure = ""
    try:  # while ray.init runs; the learner's arguments come later
        import torch  # noqa: F401

        from rlightning_core.distributed.actors import LearnerActor
    except BaseException:
        failure = traceback.format_exc(limit=5)
    try:  # no run came for it: it leaves, and its memory with it
        kwargs = _recv(0, time.monotonic() + idle_exit_s)
    except (EOFError, TimeoutError):
        os._exit(0)
    try:
        if failure:
            raise RuntimeError(failure)

        class HelperLearner(LearnerActor):
            def buffer_needs_next_obs(self, buffer_type: str) -> bool | None:
                """The buffer class's ``needs_next_obs``, without allocating a buffer."""
                import importlib

                factory = self.plugins.registry.resolve("buffer", buffer_type).factory
                target = getattr(factory, "target", None)  # a lazy factory names its class
                if isinstance(target, str) and ":" in target:
                    module, _, attr = target.partition(":")
                    factory = getattr(importlib.import_module(module), attr)
                value = getattr(factory, "needs_next_obs", None)
                return value if isinstance(value, bool) else None

        learner = HelperLearner(kwargs["policy_cfg"], selection=kwargs["selection"], seed=kwargs["seed"],
                               num_threads=kwargs["num_threads"])
    except BaseException:  # reported to the driver, which goes on without the helper
        failure = traceback.format_exc(limit=5)
    while True:
        try:
            method, args = _recv(0, time.monotonic() + idle_exit_s)
        except (EOFError, TimeoutError):
            break
        try:
            if failure:
                raise RuntimeError(failure)
            reply: tuple[str, Any] = ("ok", getattr(learner, method)(*args))
        except BaseException as exc:
            failure = failure or f"{type(exc).__name__}: {exc}"
            reply = ("error", failure)
        _send(out, reply)
    os._exit(0)  # skip torch's teardown: the driver is not waiting for it


if __name__ == "__main__":
    _serve(float(sys.argv[1]) if len(sys.argv) > 1 else IDLE_EXIT_S)
