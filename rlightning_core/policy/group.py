"""PolicyGroup: the learner(s) and rollout copies of one registered policy class.

In ``local`` mode the group holds plain objects in this process: one learner (``LEARNER``) and one rollout copy
(``ROLLOUT``) shared by the in-process env runners; weights move by tensor ``copy_`` (the ``local`` sync
strategy). Ray mode places the same class in actors behind the same methods.
"""

from __future__ import annotations

from typing import Any

from rlightning_core.config.schema import ClusterConfig, PolicyConfig
from rlightning_core.errors import ConfigError
from rlightning_core.policy.base import BasePolicy, PolicyRole
from rlightning_core.registry import ComponentSpec

__all__ = ["PolicyGroup", "resolve_device"]


def resolve_device(device: str, key: str = "policy.device") -> str:
    """``auto`` -> ``cuda`` when a GPU is visible, else ``cpu``; anything else unchanged once it exists here.

    A CUDA device this process cannot see is a configuration mistake (``key`` names the setting), reported as
    such rather than as torch's assertion from deep inside the first ``.to()``.
    """
    if device != "auto" and not device.startswith("cuda"):
        return device  # without importing torch: a torch-free rollout copy resolves "cpu" too
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda"):
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(device.partition(":")[2] or 0)
        if index >= count:
            from rlightning_core.errors import ConfigError

            seen = f"sees {count} CUDA device(s)" if count else "sees no CUDA device"
            raise ConfigError([f"{key}: {device!r}, but this process (torch {torch.__version__}) {seen}; use "
                               f"'auto' or 'cpu', or in Ray mode give the actor a GPU (cluster.learner_num_gpus, "
                               f"cluster.inference_server_num_gpus)"])
    return device


class PolicyGroup:
    """Learner and rollout policies built from one registered policy component.

    Construction records what to build; :meth:`materialize` builds the policies once the env spaces are
    known (``build_engine`` does it), so the builder API needs no spaces.

    Args:
        spec: the registered policy component.
        policy_cfg: the policy config (its ``params`` structured).
        cluster_cfg: where the policies run.
        backend: torch.distributed backend override (``auto``: the config's).
        is_colocated: the learner and the rollout copies share one placement: ``cluster.placement`` becomes
            ``colocate`` (one Ray placement-group bundle, so one node and, with GPUs, one GPU's share).

    Raises:
        ConfigError: ``is_colocated`` with an explicit other ``cluster.placement``; several learners in local mode.
    """

    def __init__(self, spec: ComponentSpec, policy_cfg: PolicyConfig, cluster_cfg: ClusterConfig, *,
                 backend: str = "auto", is_colocated: bool = False) -> None:
        if is_colocated and cluster_cfg.placement != "colocate":
            if cluster_cfg.placement != "default":
                raise ConfigError([f"cluster.placement: {cluster_cfg.placement!r}, but build_policy_group("
                                   "is_colocated=True) puts the learner and the rollout copies in one placement "
                                   "('colocate'); drop is_colocated or set cluster.placement: colocate"])
            import attrs

            cluster_cfg = attrs.evolve(cluster_cfg, placement="colocate")
        self.spec = spec
        self.policy_cfg = policy_cfg
        self.cluster_cfg = cluster_cfg
        """The cluster config the group runs with (``placement: colocate`` when ``is_colocated``)."""
        self.backend = backend
        self.learner: BasePolicy | None = None
        self.rollout: BasePolicy | None = None
        self.version = 0
        if cluster_cfg.mode == "local" and cluster_cfg.num_learners > 1:
            raise ConfigError([f"cluster.num_learners: {cluster_cfg.num_learners} learners need "
                               "cluster.mode: ray (data-parallel training); local mode trains with one"])

    @property
    def is_colocated(self) -> bool:
        """Whether the learner and the rollout copies share one placement (``cluster.placement: colocate``)."""
        return self.cluster_cfg.placement == "colocate"

    @property
    def materialized(self) -> bool:
        """Whether the policies exist yet."""
        return self.learner is not None

    def _build(self, role: PolicyRole, *, observation_space: Any, action_space: Any, device: str,
               seed: int) -> BasePolicy:
        policy = self.spec.build(self.policy_cfg.params, observation_space=observation_space,
                                 action_space=action_space, role=role, device=device, seed=seed)
        if not isinstance(policy, BasePolicy):
            raise TypeError(f"policy {self.spec.name!r} from {self.spec.distribution} built a "
                            f"{type(policy).__name__}, which does not derive from rlightning_core BasePolicy")
        from rlightning_core.policy.numerics import NumericGuard

        policy.numerics = NumericGuard(self.policy_cfg.nan_policy)  # type: ignore[attr-defined]  # on NaN/inf
        return policy

    def materialize(self, observation_space: Any, action_space: Any, *, seed: int = 0) -> None:
        """Build the learner and the rollout copy, and make their weights equal."""
        from rlightning_core.env.seeding import derive_seed

        if self.materialized:
            return
        import torch

        torch.set_num_threads(self.policy_cfg.num_threads)
        self.learner = self._build(PolicyRole.LEARNER, observation_space=observation_space,
                                   action_space=action_space, device=resolve_device(self.policy_cfg.device),
                                   seed=derive_seed(seed, 3, 0))
        self.rollout = self._build(PolicyRole.ROLLOUT, observation_space=observation_space,
                                   action_space=action_space,
                                   device=resolve_device(self.policy_cfg.rollout_device, "policy.rollout_device"),
                                   seed=derive_seed(seed, 4, 0))
        self.sync_weights()

    def learn(self, buffer: Any, *, progress: float) -> dict[str, float]:
        """One learning phase on the learner."""
        assert self.learner is not None, "materialize() first"
        return self.learner.learn(buffer, progress=progress)

    def sync_weights(self) -> int:
        """Copy the learner's :meth:`~BasePolicy.rollout_modules` into the rollout copy; returns the new version."""
        assert self.learner is not None and self.rollout is not None, "materialize() first"
        import torch

        self.version += 1
        with torch.no_grad():
            dst_modules = self.rollout.rollout_modules()
            for name, src_module in self.learner.rollout_modules().items():
                dst_state = dst_modules[name].state_dict()
                for key, src in src_module.state_dict().items():
                    dst_state[key].copy_(src)
        self.rollout.weight_version = self.version
        return self.version

    def state_dict(self) -> dict[str, Any]:
        """The learner's full state and the sync version."""
        assert self.learner is not None
        return {"learner": self.learner.state_dict(), "version": self.version,
                "rollout_extra": self.rollout.extra_state() if self.rollout is not None else {}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the learner and re-sync the rollout copy."""
        assert self.learner is not None and self.rollout is not None
        self.learner.load_state_dict(state["learner"])
        self.rollout.load_extra_state(state.get("rollout_extra", {}))
        self.version = int(state["version"]) - 1
        self.sync_weights()

    def close(self) -> None:
        """Release resources (nothing to do in one process)."""
