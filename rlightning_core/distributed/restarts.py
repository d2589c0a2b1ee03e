"""Recreating failed env runners of a Ray run: one round at a time, then one weight re-sync for all of them."""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from typing import Any

from rlightning_core.distributed.deadlines import Deadline, RunnerTimeout, env_work_deadline, name_runner, name_runners
from rlightning_core.distributed.ray_common import strip_private as _strip_private
from rlightning_core.env.runner import EnvStepError
from rlightning_core.env.seeding import derive_seed
from rlightning_core.errors import RestartsUsedUpError

__all__ = ["RunnerRecreation", "wait_each"]

log = logging.getLogger("rlightning")


def wait_each(ray: Any, refs: dict[int, Any], deadlines: dict[int, Deadline],
              what: str) -> list[tuple[int, BaseException]]:
    """Wait for each runner's call, all deadlines counted from now; returns the runners that failed or hung."""
    start = time.monotonic()
    failed: list[tuple[int, BaseException]] = []
    for index, ref in refs.items():
        deadline = deadlines[index]
        try:
            ray.get(ref, timeout=max(0.0, start + deadline.seconds - time.monotonic()))
        except ray.exceptions.GetTimeoutError:
            failed.append((index, RunnerTimeout(what, deadline)))
        except (ray.exceptions.RayActorError, EnvStepError) as exc:
            failed.append((index, exc))
    return failed


class RunnerRecreation:
    """Recreates the env runners of one :class:`~rlightning_core.distributed.execution.RayExecution`.

    It holds no state of its own: the restart count, the env group and the weight-sync objects stay with the
    execution, which calls :meth:`restart_runners` wherever a runner failed (collect, reset, state, streaming).
    """

    def __init__(self, execution: Any) -> None:
        self.ex = execution

    def restart_runners(self, failed: Sequence[tuple[int, BaseException]]) -> dict[int, int]:
        """Recreate every runner in ``failed`` (died, hung, or its env raised) at once, then re-sync them.

        All of them are replaced before the weight-sync group is re-formed, so its rendezvous never waits on a
        runner that is still hung; a recreated runner must start and reset within its deadline
        (:mod:`.deadlines`) before it joins, else it is recreated again. Past ``cluster.max_restarts`` the run
        stops with a :class:`~rlightning_core.errors.RestartsUsedUpError` naming every runner of the round.
        Returns each runner's restarts.
        """
        ex = self.ex
        counts: dict[int, int] = {}
        while failed:
            failed = [(i, exc) for i, exc in failed if not self.reattach_only(i, exc)]
            if not failed:
                break
            if ex.restarts + len(failed) > ex.config.cluster.max_restarts:
                self.give_up(failed)
            replaced: list[int] = []
            for index, exc in failed:
                ex.restarts += 1
                log.warning("%s failed (%s); recreating it (restart %d of %d, episodes in flight dropped)",
                            name_runner(ex.env_group.slots[index]),
                            str(exc).splitlines()[0] if str(exc) else type(exc).__name__, ex.restarts,
                            ex.config.cluster.max_restarts)
                replaced.append(index)
                counts[index] = counts.get(index, 0) + 1
            if ex.inference_server:
                ex._revive_servers()  # the env actor may have failed because its server died
            ex.weight_sync.finish(ignore_errors=True)  # a queued transfer the dead worker was part of failed or hangs
            resets: dict[int, Any] = {}
            errors = dict(failed)
            for index in replaced:
                ex._in_flight.pop(index, None)
                # an env that raised (or returned NaN) left its actor alive and idle: its envs are closed first
                actor = ex.env_group.restart(index, close_first=isinstance(errors[index], EnvStepError))
                ex._record_runner_seeds(index)
                ex._setup_runner(index, actor)
                if ex.sharded:
                    ex._bind_shards([index])  # an empty shard; its transitions in flight are lost with the worker
                slot = ex.env_group.slots[index]
                resets[index] = actor.reset.remote(derive_seed(ex.config.seed, 1, slot.config_index,
                                                               slot.worker_index, slot.restarts))
                if ex.preprocessors:
                    actor.load_preprocessor_states.remote([_strip_private(p.state_dict()) for p in ex.preprocessors])
            failed = self.started_and_reset(resets)
        if counts:
            self.resync_replaced(sorted(counts))
        return counts

    def reattach_only(self, index: int, exc: BaseException) -> bool:
        """Refuse an env config error; re-attach a live env actor whose inference server was replaced."""
        ex = self.ex
        slot = ex.env_group.slots[index]
        if isinstance(exc, EnvStepError) and exc.kind == "config" and not slot.restarts:  # see env.faults
            from rlightning_core.env.faults import env_config_error

            cause = getattr(exc, "cause", None) or exc  # Ray's wrapper of the actor's error holds it as .cause
            raise env_config_error(f"env[{slot.config_index}]", f"env {slot.cfg.type!r} worker {slot.worker_index}: "
                                   f"{cause}") from None
        if not ex.inference_server:
            return False
        ex._revive_servers()  # the env actor may have failed only because its server died
        if not ex.inference.lost_server(index) or not self.alive(index):
            return False
        log.warning("env worker %d lost its inference server; re-attached to the new one (episodes in "
                    "flight dropped)", index)
        ex._setup_runner(index, ex.env_group.actors[index])
        ex.env_group.actors[index].reset.remote(
            derive_seed(ex.config.seed, 1, slot.config_index, slot.worker_index, slot.restarts))
        if ex.preprocessors:
            ex.env_group.actors[index].load_preprocessor_states.remote(
                [_strip_private(p.state_dict()) for p in ex.preprocessors])
        return True

    def alive(self, index: int) -> bool:
        """Whether runner ``index`` answers (within 30 s at most)."""
        ex = self.ex
        try:
            ex.ray.get(ex.env_group.actors[index].pid.remote(), timeout=min(30.0, ex.config.cluster.call_timeout_s))
            return True
        except Exception:
            return False

    def give_up(self, failed: Sequence[tuple[int, BaseException]]) -> None:
        """Restarts are used up: kill this round's failed runners (a hung one cannot close) and stop the run."""
        ex = self.ex
        slots = [ex.env_group.slots[i] for i, _ in failed]
        for index, _ in failed:
            with contextlib.suppress(Exception):
                ex.ray.kill(ex.env_group.actors[index], no_restart=True)
        causes = []
        for slot, (_, exc) in zip(slots, failed, strict=True):
            cause = getattr(exc, "cause", None)
            causes.append(f"{name_runner(slot)}: {cause if isinstance(cause, EnvStepError) else exc}")
        who = name_runners(slots, with_type=True)
        raise RestartsUsedUpError(who, ex.config.cluster.max_restarts, "; ".join(causes)) from failed[-1][1]

    def started_and_reset(self, resets: dict[int, Any]) -> list[tuple[int, BaseException]]:
        """Wait for the recreated runners to start and reset; those that do not in time are failures again."""
        ex = self.ex
        cc = ex.config.cluster
        deadlines = {}
        for index in resets:
            step = env_work_deadline(ex.env_group.slots[index].cfg.step_timeout_s, cc.call_timeout_s, 1)
            deadlines[index] = Deadline(cc.actor_start_timeout_s + step.seconds,
                                        f"cluster.actor_start_timeout_s={cc.actor_start_timeout_s:g} + {step.source}")
        return wait_each(ex.ray, resets, deadlines, "the recreated runner's start and reset")

    def resync_replaced(self, replaced: list[int]) -> None:
        """Give the recreated runners the current weights (one re-formed group for all of them)."""
        if not self.ex.inference_server:  # else the env actors hold no weights: their servers have them
            self.ex.weight_sync.resync(replaced)
