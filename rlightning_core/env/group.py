"""``EnvGroup``: every env worker of a run behind one API, and the builder that makes it from env configs.

A group holds ``num_workers`` workers per env config (several env types may share a group, as long as one
policy can serve them all: equal observation and action spaces). Stepping is split in ``step_async`` /
``step_wait`` so that an engine can overlap env stepping with inference. This group runs its workers
in-process; a Ray-backed group keeps the same API.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import numpy as np

from rlightning_core.config.schema import EnvConfig
from rlightning_core.env.base import EnvWorker, EpisodeStats, StepBatch
from rlightning_core.env.faults import CONFIG_SHAPED, env_config_error, factory_takes
from rlightning_core.env.preprocess_fn import PreprocessFn, per_config, with_preprocess_fn
from rlightning_core.env.seeding import ENV_KEY, derive_seed
from rlightning_core.errors import ConfigError, DuplicateComponentError, UnknownComponentError

__all__ = ["EnvGroup", "PreprocessFn", "build_env_group", "define_env_instance_cfgs"]


class EnvGroup:
    """Env workers stepped together; one observation/action space for all of them.

    Args:
        workers: the env workers (objects honouring :class:`~rlightning_core.env.base.EnvWorker`).
        config_indices: per worker, the index of its env config (default: all ``0``).
        labels: per worker, the label of its env config used in metrics (default: ``env``).
        preprocess_fns: per worker, ``obs -> obs`` applied to every observation it returns (or ``None``; see
            :mod:`rlightning_core.env.preprocess_fn`): the group's workers are wrapped with them.
        seed_key: first key of :func:`derive_seed` for :meth:`reset` (``1`` training envs, ``2`` eval envs).

    Raises:
        ConfigError: workers of different env configs disagree on the observation or action space.
        ValueError: per-worker sequences do not have one entry per worker.
    """

    def __init__(
        self,
        workers: Sequence[EnvWorker],
        *,
        config_indices: Sequence[int] | None = None,
        labels: Sequence[str] | None = None,
        preprocess_fns: Sequence[PreprocessFn | None] | None = None,
        seed_key: int = ENV_KEY,
    ) -> None:
        n = len(workers)
        if n == 0:
            raise ValueError("an EnvGroup needs at least one worker")
        self._config_indices = _per_worker("config_indices", config_indices, n, 0)
        self._labels = _per_worker("labels", labels, n, "env")
        self.preprocess_fns: list[PreprocessFn | None] = _per_worker("preprocess_fns", preprocess_fns, n,
                                                                     None)
        """Per worker, the ``obs -> obs`` function its observations pass through (``None``: none)."""
        self.seed_key = seed_key
        seen: Counter[int] = Counter()
        self._worker_indices: list[int] = []
        for c in self._config_indices:
            self._worker_indices.append(seen[c])
            seen[c] += 1
        self._workers = [self._with_fn(i, w) for i, w in enumerate(workers)]
        self._num_envs = [int(w.num_envs) for w in self._workers]
        self._observation_space = self._common_space("observation_space")
        self._action_space = self._common_space("action_space")
        self._pending: list[np.ndarray] | None = None
        self._episodes: dict[str, list[EpisodeStats]] = {}
        self._metrics: dict[str, dict[str, list[float]]] = {}
        self._closed = False
        self.rebuilders: list[Callable[[int], EnvWorker]] | None = None
        """Per worker, ``restart -> fresh worker`` (set by :func:`build_env_group`; ``None``: cannot rebuild)."""
        self._seeds: list[Callable[[int], int]] = []

    # -- shape of the group ----------------------------------------------------------------------------------

    @property
    def num_workers(self) -> int:
        """Workers in the group, over all env configs."""
        return len(self._workers)

    @property
    def workers(self) -> list[EnvWorker]:
        """The workers, in config order then worker order."""
        return list(self._workers)

    @property
    def labels(self) -> list[str]:
        """Per worker, the label of its env config (metrics are keyed ``env/<label>/...``)."""
        return list(self._labels)

    @property
    def config_indices(self) -> list[int]:
        """Per worker, the index of its env config."""
        return list(self._config_indices)

    @property
    def config_preprocess_fns(self) -> list[PreprocessFn | None]:
        """Per env config (index ``0 .. max(config_indices)``), the preprocess fn of its workers."""
        first: dict[int, PreprocessFn | None] = {}
        for c, fn in zip(self._config_indices, self.preprocess_fns, strict=True):
            first.setdefault(c, fn)
        return [first.get(c) for c in range(max(self._config_indices) + 1)]

    @property
    def worker_indices(self) -> list[int]:
        """Per worker, its index within its env config."""
        return list(self._worker_indices)

    @property
    def num_envs_per_worker(self) -> list[int]:
        """Per worker, the envs it steps together."""
        return list(self._num_envs)

    @property
    def total_envs(self) -> int:
        """Envs over all workers (observations per group step)."""
        return sum(self._num_envs)

    @property
    def observation_space(self) -> Any:
        """The single-env observation space every worker shares."""
        return self._observation_space

    @property
    def action_space(self) -> Any:
        """The single-env action space every worker shares."""
        return self._action_space

    # -- stepping --------------------------------------------------------------------------------------------

    def reset(self, seed: int | None = None) -> list[np.ndarray]:
        """Reset every worker; returns one observation batch per worker.

        With ``seed``, worker ``w`` of env config ``c`` is reset with ``derive_seed(seed, seed_key, c, w)``
        (its env ``i`` then gets that ``+ i``); without, each worker keeps its own RNG stream.
        """
        if self._pending is not None:
            raise RuntimeError("reset() while a step_async() is pending: call step_wait() first")
        if seed is None:
            return [w.reset() for w in self._workers]
        return [
            w.reset(seed=derive_seed(seed, self.seed_key, c, i))
            for w, c, i in zip(self._workers, self._config_indices, self._worker_indices, strict=True)
        ]

    def step_async(self, actions: Sequence[np.ndarray]) -> None:
        """Start stepping every worker with its actions (one array of ``num_envs`` actions per worker)."""
        if self._pending is not None:
            raise RuntimeError("step_async() called twice: call step_wait() to collect the pending step")
        if len(actions) != len(self._workers):
            raise ValueError(f"step_async() needs one action array per worker ({len(self._workers)}), "
                             f"got {len(actions)}")
        self._pending = list(actions)

    def step_wait(self) -> list[StepBatch]:
        """Finish the step started by :meth:`step_async`; returns one :class:`StepBatch` per worker."""
        actions = self._pending
        if actions is None:
            raise RuntimeError("step_wait() called without a pending step_async()")
        self._pending = None
        batches = [w.step(a) for w, a in zip(self._workers, actions, strict=True)]
        for label, batch in zip(self._labels, batches, strict=True):
            if batch.episodes:
                self._episodes.setdefault(label, []).extend(batch.episodes)
            if batch.metrics:
                into = self._metrics.setdefault(label, {})
                for name, values in batch.metrics.items():
                    into.setdefault(name, []).extend(values)
        return batches

    def step(self, actions: Sequence[np.ndarray]) -> list[StepBatch]:
        """``step_async(actions)`` then ``step_wait()``."""
        self.step_async(actions)
        return self.step_wait()

    def rebuild(self, index: int, restart: int) -> tuple[EnvWorker, int]:
        """Replace worker ``index`` (which failed) with a fresh one; returns it and the seed to reset it with.

        The replacement of restart ``r`` of worker ``w`` of config ``c`` is seeded ``derive_seed(seed,
        seed_key, c, w, r)``: a different stream than the failed one, reproducible from the run seed. The
        failed worker is not closed here (the caller kills or closes it).

        Raises:
            RuntimeError: the group was not made by :func:`build_env_group`, so it cannot build workers.
        """
        if self.rebuilders is None:
            raise RuntimeError("this EnvGroup cannot rebuild workers (it was not made by build_env_group)")
        worker = self._with_fn(index, self.rebuilders[index](restart))
        self._workers[index] = worker
        return worker, self._seeds[index](restart)

    def _with_fn(self, index: int, worker: EnvWorker) -> EnvWorker:
        """``worker`` (at ``index``) wrapped so its observations pass through its preprocess fn, if any."""
        where = f"env[{self._config_indices[index]}] ({self._labels[index]}) worker {self._worker_indices[index]}"
        return with_preprocess_fn(worker, self.preprocess_fns[index], where)

    # -- statistics ------------------------------------------------------------------------------------------

    def pop_episode_stats(self) -> dict[str, list[EpisodeStats]]:
        """Episodes finished since the last call, by env label (labels without episodes are left out)."""
        out, self._episodes = self._episodes, {}
        return out

    def pop_metrics(self) -> dict[str, dict[str, list[float]]]:
        """Values envs reported in ``info["metrics"]`` since the last call: label -> name -> values."""
        out, self._metrics = self._metrics, {}
        return out

    # -- lifetime --------------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every worker (all of them, even if one fails; the first error is raised). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._pending = None
        _close_all(self._workers)

    def __enter__(self) -> EnvGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = Counter(self._labels)
        return f"EnvGroup({', '.join(f'{lab} x{k}' for lab, k in counts.items())}; {self.total_envs} envs)"

    def _common_space(self, attr: str) -> Any:
        spaces = [getattr(w, attr) for w in self._workers]
        first = spaces[0]
        if all(s == first for s in spaces[1:]):
            return first
        shown: dict[int, str] = {}
        for c, label, space in zip(self._config_indices, self._labels, spaces, strict=True):
            shown.setdefault(c, f"env[{c}] ({label}): {space}")
        problems = [
            f"{attr} differs between env configs: " + "; ".join(shown[c] for c in sorted(shown)),
            "one policy serves every env of a group, so all env configs need equal observation and action "
            "spaces (make them match with wrappers, or train them in separate runs)",
        ]
        raise ConfigError(problems)


def _per_worker(name: str, values: Sequence[Any] | None, n: int, default: Any) -> list[Any]:
    if values is None:
        return [default] * n
    values = list(values)
    if len(values) != n:
        raise ValueError(f"{name}: expected one entry per worker ({n}), got {len(values)}")
    return values


def _close_all(workers: Sequence[Any]) -> None:
    """Close every worker; re-raise the first failure with the others attached as notes."""
    errors: list[BaseException] = []
    for w in workers:
        try:
            w.close()
        except Exception as exc:
            errors.append(exc)
    if errors:
        first = errors[0]
        for other in errors[1:]:
            first.add_note(f"closing another env worker also failed: {type(other).__name__}: {other}")
        raise first


def define_env_instance_cfgs(env_cfg: EnvConfig, num_workers: int = 1) -> list[EnvConfig]:
    """``num_workers`` independent copies of ``env_cfg``, each describing one worker (``num_workers=1``).

    The copies share nothing mutable (params are deep-copied), so changing one never changes another.
    """
    if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 1:
        raise ValueError(f"num_workers must be an int >= 1, got {num_workers!r}")
    return [
        attrs.evolve(env_cfg, num_workers=1, params=copy.deepcopy(env_cfg.params)) for _ in range(num_workers)
    ]


def _unique_labels(cfgs: Sequence[EnvConfig]) -> list[str]:
    """Per config its label; implicit labels (no ``name``) shared by several configs become ``label[c]``."""
    labels = [cfg.label for cfg in cfgs]
    counts = Counter(labels)
    return [
        f"{label}[{c}]" if counts[label] > 1 and not cfg.name else label
        for c, (cfg, label) in enumerate(zip(cfgs, labels, strict=True))
    ]


def _resolve(cfgs: Sequence[EnvConfig], registry: Any) -> list[tuple[Any, Any]]:
    """``(spec, structured params)`` per config; every problem is reported at once."""
    from rlightning_core.config.loading import resolve_params

    problems: list[str] = []
    out: list[tuple[Any, Any]] = []
    for c, cfg in enumerate(cfgs):
        path = f"env[{c}]"
        try:
            spec = registry.resolve("env", cfg.type)
        except (UnknownComponentError, DuplicateComponentError) as exc:
            problems.append(f"{path}.type: {exc}")
            out.append((None, None))
            continue
        out.append((spec, resolve_params(spec, cfg.params, path, problems, registry)))
    if problems:
        raise ConfigError(problems)
    return out


def build_env_group(
    env_cfgs: EnvConfig | Sequence[EnvConfig],
    preprocess_fn: PreprocessFn | Sequence[PreprocessFn | None] | None = None,
    *,
    seed: int = 0,
    registry: Any = None,
    render_mode: str | None = None,
    seed_offset_key: int = ENV_KEY,
    cluster: Any = None,
    placement_plan: Any = None,
) -> Any:
    """Build every env worker of one or several env configs into an in-process :class:`EnvGroup`.

    Each config's ``type`` resolves through the plugin registry; the config is expanded into
    ``num_workers`` workers (:func:`define_env_instance_cfgs`), worker ``w`` of config ``c`` built as
    ``spec.build(params, num_envs=..., seed=derive_seed(seed, seed_offset_key, c, w), worker_index=w)``
    (plus ``render_mode=`` when one is given).

    Args:
        env_cfgs: one :class:`EnvConfig` or a list (``MainConfig.env``). ``params`` should be structured (as
            :func:`~rlightning_core.load_config` leaves them); plain dicts are structured here.
        preprocess_fn: ``obs -> obs`` for one worker's observation batch: one function for every env config,
            or a list with one per env config (``None`` entries: none). Each config's workers are wrapped so
            that all their observations pass through its function before the run's preprocessors, the
            policy, the buffer and evaluation see them (:mod:`rlightning_core.env.preprocess_fn`); in Ray mode
            it runs inside the env actors (it must pickle: a module-level function importable there, or one
            defined in a script or a closure, which Ray sends by value).
        seed: the run seed every worker seed derives from.
        registry: the registry to resolve against (default: this process's plugins).
        render_mode: render mode passed to every worker (e.g. ``rgb_array`` for evaluation videos).
        seed_offset_key: first key of :func:`derive_seed`: ``1`` for training envs, ``2`` for evaluation envs.
        cluster: a ``ClusterConfig``; with ``mode: ray`` the workers are Ray actors (a ``RemoteEnvGroup``).
        placement_plan: where those actors go (``PlacementPlan.for_run(config)``; default: no placement group).

    Raises:
        ConfigError: unknown env types, bad params, or env configs whose spaces differ (all problems at once).
        TypeError: a factory returned something that is not an env worker; a preprocess fn that is not callable
            (or, in Ray mode, cannot be pickled).
        ValueError: a list of preprocess fns whose length is not the number of env configs.
    """
    cfgs = [env_cfgs] if isinstance(env_cfgs, EnvConfig) else list(env_cfgs)
    if not cfgs:
        raise ConfigError(["env: at least one env config is needed"])
    fns = per_config(preprocess_fn, len(cfgs))
    if cluster is not None and cluster.mode == "ray":  # workers become actors (the cluster starts if needed)
        from rlightning_core.distributed.env_group import RemoteEnvGroup
        from rlightning_core.plugins import get_plugins

        return RemoteEnvGroup(cfgs, seed=seed, cluster=cluster, plugins=get_plugins(), labels=_unique_labels(cfgs),
                              plan=placement_plan, preprocess_fn=fns)
    for c, cfg in enumerate(cfgs):
        if not isinstance(cfg, EnvConfig):
            raise TypeError(f"env_cfgs[{c}] must be an EnvConfig, got {type(cfg).__name__}")
    derive_seed(seed, seed_offset_key)  # validate the seed before building anything
    if registry is None:
        from rlightning_core.plugins import get_plugins

        registry = get_plugins().registry
    resolved = _resolve(cfgs, registry)
    labels = _unique_labels(cfgs)

    workers: list[Any] = []
    config_indices: list[int] = []
    rebuilders: list[Callable[[int], Any]] = []
    seeds: list[Callable[[int], int]] = []
    try:
        for c, (cfg, (spec, params)) in enumerate(zip(cfgs, resolved, strict=True)):
            for w, inst in enumerate(define_env_instance_cfgs(cfg, cfg.num_workers)):
                seed_of = _seed_fn(seed, seed_offset_key, c, w)
                make = _worker_factory(spec, params, cfg, c, w, inst.num_envs, render_mode, seed_of)
                worker = make(0)
                workers.append(worker)
                config_indices.append(c)
                rebuilders.append(make)
                seeds.append(seed_of)
        group = EnvGroup(
            workers,
            config_indices=config_indices,
            labels=[labels[c] for c in config_indices],
            preprocess_fns=[fns[c] for c in config_indices],
            seed_key=seed_offset_key,
        )
        group.rebuilders, group._seeds = rebuilders, seeds
        return group
    except BaseException as exc:
        try:
            _close_all([w for w in workers if hasattr(w, "close")])
        except Exception as close_exc:
            exc.add_note(f"closing the env workers built so far also failed: {close_exc!r}")
        raise


def _seed_fn(seed: int, key: int, c: int, w: int) -> Callable[[int], int]:
    """Seed of worker ``w`` of config ``c`` after ``restart`` restarts (restart 0: the original seed)."""
    return lambda restart: derive_seed(seed, key, c, w, restart) if restart else derive_seed(seed, key, c, w)


def _worker_factory(spec: Any, params: Any, cfg: EnvConfig, c: int, w: int, num_envs: int,
                    render_mode: str | None, seed_of: Callable[[int], int]) -> Callable[[int], Any]:
    """``restart -> worker``: builds worker ``w`` of config ``c``.

    In a child process when the config sets ``step_timeout_s``, so that a hang can be killed.
    """

    def make(restart: int) -> Any:
        kwargs: dict[str, Any] = {"num_envs": num_envs, "seed": seed_of(restart), "worker_index": w}
        if render_mode is not None:
            kwargs["render_mode"] = render_mode
        if cfg.step_timeout_s is not None:
            from rlightning_core.env.isolated import ProcessEnvWorker
            from rlightning_core.plugins import get_plugins

            worker: Any = ProcessEnvWorker(spec.qualified_name, params, build_kwargs=kwargs,
                                           selection=get_plugins().selection(), timeout_s=cfg.step_timeout_s)
        else:
            try:
                worker = spec.build(params, **kwargs)
            except CONFIG_SHAPED as exc:
                if restart or not factory_takes(spec, params, kwargs):  # built before / the plugin's signature
                    raise
                raise env_config_error(f"env[{c}]", f"env {spec.name!r} from {spec.distribution} {spec.version} "
                                       f"raised {type(exc).__name__} while being built: {exc}") from exc
        from rlightning_core.env.dict_obs import flatten_dict_observations

        worker = flatten_dict_observations(worker)  # Dict observations travel flat (rlightning_core.spaces)
        try:
            _check_worker(worker, spec, c, num_envs)
        except BaseException:
            if hasattr(worker, "close"):
                worker.close()
            raise
        return worker

    return make


def _check_worker(worker: Any, spec: Any, c: int, num_envs: int) -> None:
    who = f"env[{c}]: env {spec.name!r} from {spec.distribution} {spec.version}"
    if not isinstance(worker, EnvWorker):
        missing = [m for m in ("num_envs", "observation_space", "action_space", "reset", "step", "close")
                   if not hasattr(worker, m)]
        raise TypeError(f"{who} returned {type(worker).__name__}, not an env worker (missing: "
                        f"{', '.join(missing)}); see rlightning_core.env.base.EnvWorker")
    if worker.num_envs != num_envs:
        raise TypeError(f"{who} built {worker.num_envs} envs, the config asks for num_envs={num_envs}")
