"""The learners of a Ray run: one in the driver process (``cluster.num_learners: 0``) or N data-parallel actors.

Rank 0 is the source of every weight sync, the state a checkpoint holds and the weights evaluation uses; with
N > 1 every rank stores its slice of each chunk's envs and the gradients are all-reduced after every backward
pass. Chunks reach them as object refs passed to their ``learn`` call: Ray moves the data, the driver never
copies it.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from rlightning_core.distributed.ray_common import WorkerFailure, get, mean_metrics
from rlightning_core.env.seeding import derive_seed

__all__ = ["LearnerGroup"]

log = logging.getLogger("rlightning")


class LearnerGroup:
    """Starts the learners and submits their work; every call waits at most ``cluster.call_timeout_s``.

    Args:
        ray: the ``ray`` module.
        config: the run's config.
        policy_cfg: the policy section of the config.
        selection: the plugin selection the actors load.
        plugins: the run's plugin manager (the learner in the driver uses it directly).
        plan: the placement plan (bundles of the learner actors).
    """

    def __init__(self, ray: Any, config: Any, policy_cfg: Any, selection: Any, plugins: Any, plan: Any) -> None:
        from rlightning_core.distributed.env_group import remote_class
        from rlightning_core.distributed.learner import LearnerActor

        self.ray, self.config = ray, config
        cc = config.cluster
        self.world_size = max(cc.num_learners, 1)
        self.in_driver = cc.num_learners == 0
        if self.in_driver:
            from rlightning_core.distributed.in_process import InProcessActor

            self.learners: list[Any] = [InProcessActor(ray, LearnerActor(
                policy_cfg, selection=selection, seed=derive_seed(config.seed, 3, 0),
                num_threads=policy_cfg.num_threads, plugins=plugins))]
        else:
            ptype = policy_cfg.type.replace(":", "-")
            learner_cls = remote_class(ray, LearnerActor, {})
            self.learners = [learner_cls.options(
                num_cpus=cc.learner_num_cpus, num_gpus=cc.learner_num_gpus, name=f"learner-{ptype}-{r}",
                max_concurrency=1, **plan.options(plan.learner_bundle_of(r)),
            ).remote(policy_cfg, selection=selection, seed=derive_seed(config.seed, 3, r),
                     num_threads=policy_cfg.num_threads, rank=r, world_size=self.world_size,
                     offload=cc.offload) for r in range(self.world_size)]
        self.learner: Any = self.learners[0]
        self._rank_refs: dict[Any, list[Any]] = {}  # rank 0's streamed learn ref -> the other ranks'

    def get(self, refs: Any, what: str, *, starting: bool = False) -> Any:
        """``ray.get`` within ``cluster.call_timeout_s`` (``starting``: ``cluster.actor_start_timeout_s``)."""
        cc = self.config.cluster
        return get(self.ray, refs, cc.actor_start_timeout_s if starting else cc.call_timeout_s, what)

    def failed(self, exc: BaseException) -> WorkerFailure:
        """The error that stops a run whose learner died."""
        return WorkerFailure(f"the learner failed; the last checkpoint is intact. Cause: {exc}")

    def build(self, observation_space: Any, action_space: Any) -> dict[str, Any]:
        """Build every rank's policy; returns the extras the buffer stores (rank 0's)."""
        return self.get([ln.build.remote(observation_space, action_space) for ln in self.learners],
                        "start the learner", starting=True)[0]

    def bind_buffer(self, name: str, params: Any, specs: Sequence[Any]) -> bool:
        """Each rank's buffer (shard) from ``specs[rank]``; returns whether the buffer needs next observations."""
        return self.get([ln.bind_buffer.remote(name, params, spec) for ln, spec in zip(self.learners, specs,
                                                                                         strict=True)],
                        "allocate the buffer", starting=True)[0]

    def form_data_parallel(self, backend: str) -> None:
        """The learners' torch.distributed group: rank 0's weights everywhere."""
        addr, port = self.get(self.learner.free_port.remote(), "pick a rendezvous port")
        bucket = int(self.config.cluster.bucket_mb * (1 << 20))
        sums = self.get([ln.init_data_parallel.remote(addr, port, backend, bucket) for ln in self.learners],
                        "form the data-parallel learner group")
        if len(set(sums)) != 1:
            raise WorkerFailure(f"the data-parallel learners disagree on their initial parameters ({sums})")
        log.info("data-parallel learners: %d ranks over %s", self.world_size, backend)

    def learn(self, progress: float, chunks: list[Any], *, with_weights: bool) -> tuple[dict[str, float], Any, Any]:
        """Every rank stores its slice of every chunk (refs) and updates; returns the mean metrics.

        ``with_weights``: rank 0 also returns its new weights (a ref the driver passes on without fetching it;
        the values themselves for the learner in the driver) and their fingerprint; else ``None``, ``None``.
        """
        if self.in_driver:  # values, not references
            out = self.learner.target.learn(progress, *self.ray.get(chunks), with_weights=with_weights)
            metrics, weights, fp = out if with_weights else (out, None, None)
            return dict(metrics), weights, fp
        refs: list[Any] = []
        weights = fp = None
        for r, ln in enumerate(self.learners):
            if with_weights and r == 0:
                metrics_ref, weights, fp = ln.learn.options(num_returns=3).remote(progress, *chunks,
                                                                                  with_weights=True)
                refs.append(metrics_ref)
            else:
                refs.append(ln.learn.remote(progress, *chunks))
        if fp is not None:
            refs.append(fp)  # the fingerprint (a few bytes) comes with the metrics
        try:
            results = self.ray.get(refs, timeout=self.config.cluster.call_timeout_s)
        except self.ray.exceptions.RayActorError as exc:
            raise self.failed(exc) from exc
        if fp is not None:
            *results, fp = results
        return mean_metrics(results), weights, fp

    def start_learn(self, progress: float, chunks: list[Any], *, version: int, max_staleness: int | None) -> Any:
        """Queue on every rank: store ``chunks`` within the staleness bound, then learn once; rank 0's ref."""
        refs = [ln.learn_chunks.remote(progress, version, max_staleness, *chunks) for ln in self.learners]
        if len(refs) > 1:
            self._rank_refs[refs[0]] = refs[1:]
        return refs[0]

    def finish_learn(self, ref: Any) -> dict[str, Any]:
        """The result of :meth:`start_learn`: rank 0's, its metrics averaged over the ranks."""
        others = self._rank_refs.pop(ref, [])
        try:
            results = [dict(r) for r in self.ray.get([ref, *others], timeout=self.config.cluster.call_timeout_s)]
        except self.ray.exceptions.RayActorError as exc:
            raise self.failed(exc) from exc
        except self.ray.exceptions.GetTimeoutError:
            raise WorkerFailure(f"the learner did not answer within cluster.call_timeout_s="
                                f"{self.config.cluster.call_timeout_s:.0f}s") from None
        if len(results) == 1:
            return results[0]
        first = results[0]  # every rank saw the same chunks: lags and drops agree; metrics are averaged
        return {**first, "metrics": mean_metrics([r["metrics"] for r in results]),
                "busy_s": max(float(r["busy_s"]) for r in results)}

    def offload_idle(self) -> None:
        """The learners are idle until the next learn: their GPU memory is freed."""
        for ln in self.learners:
            ln.offload_idle.remote()

    def state_dict(self) -> tuple[Any, Any]:
        """Rank 0's learner state and the buffer: rank 0's, or every rank's shard (``{"shards": [...]}``)."""
        remote = self.get(self.learner.state_dict.remote(), "fetch the learner state")
        buffer = remote["buffer"]
        if self.world_size > 1:
            others = self.get([ln.buffer_state.remote() for ln in self.learners[1:]], "fetch the buffer shards")
            buffer = {"shards": [buffer, *others]}
        return remote["learner"], buffer

    def load_state_dict(self, learner: Any, buffer: Any) -> None:
        """Restore every rank; a checkpoint with another number of buffer shards resumes with empty buffers."""
        shards = buffer["shards"] if isinstance(buffer, dict) and "shards" in buffer else [buffer]
        if len(shards) != self.world_size:
            log.warning("the checkpoint has %d buffer shard(s) for %d learner(s): learning resumes with empty "
                        "buffers", len(shards), self.world_size)
            shards = [None] * self.world_size
        self.get([ln.load_state_dict.remote({"learner": learner, "buffer": b})
                  for ln, b in zip(self.learners, shards, strict=True)], "restore the learner")

    def close(self) -> None:
        """Kill the learner actors."""
        for ln in self.learners:
            try:
                self.ray.kill(ln, no_restart=True)
            except Exception:
                pass
