"""Placement of actors into Ray placement-group bundles, per ``cluster.placement``.

- ``default``: no placement group; Ray schedules each actor by its resources.
- ``colocate``: one bundle holding the learner and every env runner (one node; with a GPU the learner and the
  rollout copies share it), so weights never cross the network.
- ``disaggregate``: one bundle per actor, spread over nodes where there are several.
- ``manual``: the bundles in ``cluster.bundles``; ``cluster.learner_bundle`` and ``env[i].bundle`` say where.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from rlightning_core.config.checks import placement_problems
from rlightning_core.config.schema import ClusterConfig, EnvConfig, MainConfig
from rlightning_core.errors import ConfigError

__all__ = ["PlacementPlan"]

_MIN = 1e-3  # Ray refuses empty bundles: a zero-CPU actor still gets a token share


def _bundle(cpus: float, gpus: float) -> dict[str, float]:
    out = {"CPU": max(float(cpus), _MIN)}
    if gpus > 0:
        out["GPU"] = float(gpus)
    return out


@attrs.define
class PlacementPlan:
    """Bundles and which actor goes where; :meth:`create` reserves them on the cluster."""

    strategy: str
    bundles: list[dict[str, float]]
    env_bundles: list[int | None]
    """Bundle of every env worker (in env group order), ``None`` without a placement group."""
    learner_bundle: int | None
    ray_strategy: str = "PACK"
    pg: Any = None
    learner_bundles: list[int | None] = attrs.Factory(list)
    """Bundle of every learner rank (rank 0's is :attr:`learner_bundle`); empty means all in that one."""

    def learner_bundle_of(self, rank: int) -> int | None:
        """The bundle of learner ``rank``."""
        return self.learner_bundles[rank] if rank < len(self.learner_bundles) else self.learner_bundle

    @classmethod
    def for_run(cls, config: MainConfig) -> PlacementPlan:
        """The plan ``config.cluster.placement`` asks for."""
        return cls.from_parts(config.cluster, config.env)

    @classmethod
    def from_parts(cls, c: ClusterConfig, env_cfgs: Sequence[EnvConfig]) -> PlacementPlan:
        """The plan for these env configs under cluster config ``c``."""
        workers = [(i, e) for i, e in enumerate(env_cfgs) for _ in range(e.num_workers)]
        nl = c.num_learners
        if c.placement == "default":
            return cls("default", [], [None] * len(workers), None)
        if c.placement == "colocate":
            cpus = nl * c.learner_num_cpus + sum(e.num_cpus for _, e in workers)
            return cls("colocate", [_bundle(cpus, nl * c.learner_num_gpus)], [0] * len(workers), 0, "STRICT_PACK",
                       learner_bundles=[0] * nl)
        if c.placement == "disaggregate":
            bundles = [_bundle(c.learner_num_cpus, c.learner_num_gpus) for _ in range(nl)] + [
                _bundle(e.num_cpus, 0) for _, e in workers]
            return cls("disaggregate", bundles, list(range(nl, len(workers) + nl)), 0, "SPREAD",
                       learner_bundles=list(range(nl)))
        # manual (a MainConfig has been checked already; env configs given to the builders alone are here)
        problems = placement_problems(c, env_cfgs)
        if problems:
            raise ConfigError(problems)
        return cls("manual", [dict(b) for b in c.bundles], [e.bundle for _, e in workers], c.learner_bundle)

    def create(self, ray: Any, timeout_s: float) -> None:
        """Reserve the bundles (and wait until Ray has them)."""
        if not self.bundles or self.pg is not None:
            return
        from ray.util.placement_group import placement_group

        self.pg = placement_group(self.bundles, strategy=self.ray_strategy, name="rlightning")
        try:
            ray.get(self.pg.ready(), timeout=timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise ConfigError([f"cluster.placement: the cluster cannot reserve the bundles {self.bundles} "
                               f"({self.ray_strategy}) within {timeout_s:.0f}s"]) from None

    def options(self, bundle: int | None) -> dict[str, Any]:
        """``.options(...)`` keywords that put an actor into ``bundle``."""
        if self.pg is None or bundle is None:
            return {}
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return {"scheduling_strategy": PlacementGroupSchedulingStrategy(
            self.pg, placement_group_bundle_index=bundle, placement_group_capture_child_tasks=True)}

    def describe(self, labels: list[str]) -> list[str]:
        """Human-readable plan (``train --dry-run``)."""
        if not self.bundles:
            return ["placement: default (no placement group; Ray schedules each actor by its resources)"]
        lines = [f"placement: {self.strategy} ({self.ray_strategy}), {len(self.bundles)} bundle(s)"]
        for b, res in enumerate(self.bundles):
            ranks = [r for r, lb in enumerate(self.learner_bundles or [self.learner_bundle]) if lb == b]
            who = [f"learner rank {r}" if len(self.learner_bundles) > 1 else "learner" for r in ranks] + [
                f"env-runner {lbl}#{i}" for i, (lbl, eb) in enumerate(zip(labels, self.env_bundles, strict=True))
                if eb == b]
            lines.append(f"  bundle {b} {res}: {', '.join(who) or '(empty)'}")
        return lines

    def remove(self, ray: Any) -> None:
        """Release the bundles."""
        if self.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.pg)
            except Exception:
                pass
            self.pg = None
