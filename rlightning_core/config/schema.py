"""The configuration schema: frozen attrs classes, one per section of a config file.

Every pluggable slot is ``type`` (a registered name, resolved through the plugin registry) plus ``params``
(structured into that component's own config class once ``type`` resolves). Fixed choices such as
``cluster.mode`` are validated here; component names never are.
"""

from __future__ import annotations

from typing import Any, ClassVar

from attrs import Factory, define, field

from rlightning_core.config.validators import device_spec, ge, gt, one_of
from rlightning_core.dependencies import require

__all__ = [
    "BufferConfig",
    "CheckpointConfig",
    "ClusterConfig",
    "ComponentConfig",
    "EngineConfig",
    "EnvConfig",
    "LoggerConfig",
    "LoggingConfig",
    "MainConfig",
    "PolicyConfig",
    "PreprocessorConfig",
]


@define(frozen=True, kw_only=True)
class ComponentConfig:
    """A pluggable component: which registered implementation, and its own options.

    A subclass names its registry ``kind``; a plugin's params class may hold such a config in a field (the
    ``remote`` env's ``local_env`` is an env config), and it is then resolved and validated like a top-level one.

    A params class may also define ``run_problems(self, component, config) -> list[str]``: what these params
    cannot do in this run (``config`` is the ``MainConfig``, ``component`` this config), one line each, addressed
    from the component (``"num_envs: ..."``, ``"params.x: ..."``). It runs with the cross-field checks of
    :class:`MainConfig`, so ``config validate`` and ``--dry-run`` report it before anything starts.
    """

    kind: ClassVar[str | None] = None
    """The registry kind ``type`` resolves in (``env``, ``policy`` ...); set by each subclass."""
    type: str
    """Registered name of the implementation (``rlightning list-plugins`` shows them), or
    ``dist-name:name`` to pick one when two installed distributions provide the same name."""
    params: Any = Factory(dict)
    """The component's own options; their schema is the config class the plugin registered."""


@define(frozen=True, kw_only=True)
class EnvConfig(ComponentConfig):
    """One environment type. A run may list several; each is instantiated ``num_workers`` times."""

    kind: ClassVar[str | None] = "env"

    name: str | None = None
    """Label used in metrics (``env/<name>/...``); defaults to ``params.id`` or ``type``."""
    num_workers: int = field(default=1, validator=ge(1))
    """Independent env workers of this config (in-process objects, or Ray actors in ray mode)."""
    num_envs: int = field(default=1, validator=ge(1))
    """Environments per worker, stepped together as one vector env."""
    num_cpus: float = field(default=1.0, validator=ge(0))
    """CPUs each env worker actor reserves in ray mode."""
    bundle: int | None = field(default=None, validator=ge(0))
    """Placement-group bundle of these workers when ``cluster.placement`` is ``manual``."""
    step_timeout_s: float | None = field(default=None, validator=gt(0))
    """Longest a worker's ``reset`` or ``step`` may take before the worker counts as hung and is recreated
    (``null``: no limit). In local mode a limit runs each worker in a child process, which can be killed."""

    @property
    def label(self) -> str:
        """The name metrics use for this env config."""
        if self.name:
            return self.name
        env_id = getattr(self.params, "id", None)
        if env_id is None and isinstance(self.params, dict):
            env_id = self.params.get("id")
        return str(env_id) if env_id else self.type


@define(frozen=True, kw_only=True)
class PolicyConfig(ComponentConfig):
    """The policy / algorithm: one registered class placed in learner and rollout workers."""

    kind: ClassVar[str | None] = "policy"

    device: str = field(default="auto", validator=device_spec)
    """Device of the learner: ``auto`` (CUDA when available), ``cpu``, ``cuda``, ``cuda:N``."""
    rollout_device: str = field(default="cpu", validator=device_spec)
    """Device of rollout (inference) copies; CPU is fastest for small MLPs."""
    num_threads: int = field(default=1, validator=ge(1))
    """torch intra-op threads per policy process (1 is fastest for small MLPs; raise for large networks)."""
    nan_policy: str = field(default="raise", validator=one_of("raise", "skip"))
    """What a NaN or infinite loss or gradient does, checked before every optimizer step: ``raise`` stops the
    run (exit code 1, naming the iteration and the value), ``skip`` drops that update and counts it in
    ``train/skipped_nonfinite_steps``."""


@define(frozen=True, kw_only=True)
class BufferConfig(ComponentConfig):
    """Where transitions go between collection and learning."""

    kind: ClassVar[str | None] = "buffer"

    type: str = "rollout"
    """``rollout`` (on-policy), ``replay`` (off-policy), or a plugin's buffer."""


@define(frozen=True, kw_only=True)
class PreprocessorConfig(ComponentConfig):
    """An observation or reward transform applied between the envs and the policy, with saved state."""

    kind: ClassVar[str | None] = "preprocessor"


@define(frozen=True, kw_only=True)
class LoggerConfig(ComponentConfig):
    """A metrics logger (e.g. ``tensorboard``) that receives every metric of the run."""

    kind: ClassVar[str | None] = "logger"


@define(frozen=True, kw_only=True)
class EngineConfig(ComponentConfig):
    """The training loop and its stop rules."""

    kind: ClassVar[str | None] = "engine"

    type: str = "sync"
    """``sync`` (on-policy), ``async`` (off-policy), ``eval``, or a plugin's engine."""
    total_steps: int = field(default=100_000, validator=ge(1))
    """Stop after this many environment steps."""
    time_limit_s: float | None = field(default=None, validator=gt(0))
    """Stop after this many seconds of wall time (``null``: no limit)."""
    target_eval_return: float | None = None
    """Stop as soon as the evaluation mean return reaches this value (``null``: never)."""
    eval_every: int = field(default=0, validator=ge(0))
    """Evaluate every N iterations on separate env instances (``0``: only at the end)."""
    eval_episodes: int = field(default=10, validator=ge(1))
    """Episodes per evaluation, with deterministic actions."""


def _ray_installed(_inst: Any, _attr: Any, value: Any) -> None:
    if value == "ray":  # refused when the config is read (validate, --dry-run), not when the run starts
        require("ray", pip="rlightning[ray]", needed_by="Ray mode")


def _moviepy_installed(_inst: Any, _attr: Any, value: Any) -> None:
    if value is not None:
        require("moviepy", pip="rlightning[video]", needed_by="training videos (logging.video_every)")


@define(frozen=True, kw_only=True)
class ClusterConfig:
    """Where workers run: in this process, or as Ray actors. The same config trains either way."""

    mode: str = field(default="local", validator=[one_of("local", "ray"), _ray_installed])
    """``local``: plain objects in one process (deterministic, debuggable). ``ray``: actors on a cluster."""
    address: str | None = None
    """Join this existing Ray cluster (``auto`` or ``host:port``); ``null`` starts a local one."""
    num_cpus: int | None = field(default=None, validator=ge(1))
    """CPUs of a locally started Ray cluster (``null``: all of this machine's)."""
    num_gpus: int | None = field(default=None, validator=ge(0))
    """GPUs of a locally started Ray cluster (``null``: detected)."""
    dashboard: bool = False
    """Start Ray's dashboard with a locally started cluster."""
    num_learners: int = field(default=1, validator=ge(0))
    """Learner actors (ray mode); more than one trains data-parallel, averaging gradients over a torch.distributed
    group. ``0`` (sync engine): the single learner runs in the driver process instead of an actor of its own
    (one process and one task round trip per iteration fewer), as with RLlib's ``num_learners=0``."""
    num_inference_servers: int = field(default=0, validator=ge(0))
    """Inference-server actors of ``topology: inference_server``, each holding a rollout copy that batches the
    ``act`` calls of many env workers (at least 1 there; the env-runner topology starts none)."""
    topology: str = field(default="env_runner", validator=one_of("env_runner", "inference_server"))
    """``env_runner``: env workers hold a rollout copy of the policy; ``inference_server``: separate rollout
    workers batch observations from many env workers."""
    placement: str = field(default="default", validator=one_of("default", "colocate", "disaggregate", "manual"))
    """How learner and rollout workers share resources (Ray placement groups)."""
    backend: str = field(default="auto", validator=one_of("auto", "gloo", "nccl"))
    """torch.distributed backend for weight sync and data-parallel learning; ``auto``: nccl with GPUs."""
    weight_sync: str = field(default="auto", validator=one_of("auto", "broadcast", "object_store", "local",
                                                              "double_buffer", "node_shared"))
    """How learner weights reach rollout copies; ``auto``: ``local`` in one process, ``broadcast`` on Ray.
    ``double_buffer``: broadcast into a staging buffer while the rollout copies keep acting, swapped in between
    two steps; ``node_shared``: one copy per node in shared memory that every rollout copy there loads."""
    learner_num_cpus: float = field(default=1.0, validator=ge(0))
    """CPUs each learner actor reserves."""
    learner_num_gpus: float = field(default=0.0, validator=ge(0))
    """GPUs each learner actor reserves."""
    inference_server_num_cpus: float = field(default=1.0, validator=ge(0))
    """CPUs each inference-server actor reserves."""
    inference_server_num_gpus: float = field(default=0.0, validator=ge(0))
    """GPUs each inference-server actor reserves."""
    bundles: list[dict[str, float]] = Factory(list)
    """Bundles (e.g. ``[{CPU: 2, GPU: 1}, {CPU: 4}]``) for ``placement: manual``."""
    learner_bundle: int | None = field(default=None, validator=ge(0))
    """Bundle of the learner for ``placement: manual``."""
    sharded_buffer: bool = False
    """Keep transitions in buffer shards inside the env-runner actors that collect them (ray mode): the learner
    gathers them before learning (on-policy) or samples across shards in proportion to their sizes
    (off-policy). Only receipts travel with each chunk. Local mode has one buffer and ignores it."""
    offload: bool = False
    """Move idle model and optimizer state off the GPU: the learner's while the rollout copies collect (a
    colocated learner and rollout then share one GPU's memory). A logged no-op on CPU."""
    bucket_mb: float = field(default=64.0, validator=gt(0))
    """Largest bucket of flattened parameters in one collective broadcast (MiB)."""
    max_restarts: int = field(default=3, validator=ge(0))
    """Times, over the whole run, a failed env or rollout worker is recreated before the run stops: a Ray actor
    that died, or (in either mode) an env whose ``reset``/``step`` raised, hung past ``env.step_timeout_s`` or
    returned NaN/inf observations or rewards. Each restart drops the episodes in flight on that worker."""
    actor_start_timeout_s: float = field(default=300.0, validator=gt(0))
    """How long to wait for actors to start (e.g. for resources) before failing with a clear message."""
    call_timeout_s: float = field(default=600.0, validator=gt(0))
    """Longest wait for one remote call (a collect, a learning phase, a sync); nothing waits forever."""
    close_timeout_s: float = field(default=30.0, validator=gt(0))
    """How long the env actors get to run their envs' ``close()`` (a simulator's clean shutdown) when the run
    ends or one of them is replaced after an env error, before they are killed."""


@define(frozen=True, kw_only=True)
class LoggingConfig:
    """What is recorded about a run. ``metrics.jsonl`` in the run directory is always written."""

    loggers: list[LoggerConfig] = Factory(list)
    """Extra loggers, e.g. ``[{type: tensorboard}]``; each receives every metric."""
    log_every: int = field(default=1, validator=ge(1))
    """Write metrics every N iterations."""
    progress: bool = True
    """Show a progress bar on the terminal (only when it is a TTY)."""
    level: str = field(default="INFO", validator=one_of("DEBUG", "INFO", "WARNING", "ERROR"))
    """Python logging level of rlightning's own messages."""
    video_every: int | None = field(default=None, validator=[ge(1), _moviepy_installed])
    """Every N iterations, record one deterministic episode per env config as ``RUN_DIR/videos/iter_<N>.mp4``
    (headless ``rgb_array`` rendering on separate env instances; needs moviepy) and attach it to loggers
    that take videos (``tensorboard``, ``wandb``, ``mlflow``) and to ``on_video`` hooks (``null``: never)."""


@define(frozen=True, kw_only=True)
class CheckpointConfig:
    """When checkpoints are written and how many are kept. Writes are atomic (temp file + rename)."""

    every: int = field(default=10, validator=ge(0))
    """Write a checkpoint every N iterations (``0``: only at the end)."""
    keep_last: int = field(default=3, validator=ge(1))
    """Keep the newest N periodic checkpoints."""
    keep_best: bool = True
    """Also keep the checkpoint with the best evaluation return."""
    at_end: bool = True
    """Write a final checkpoint when the run stops."""


@define(frozen=True, kw_only=True)
class MainConfig:
    """A whole run: what to train, where, and what to record."""

    env: list[EnvConfig]
    """One env config, or a list of several env types trained together."""
    policy: PolicyConfig
    """The policy / algorithm."""
    buffer: BufferConfig = Factory(BufferConfig)
    """The data buffer between collection and learning."""
    preprocessors: list[PreprocessorConfig] = Factory(list)
    """Observation / reward preprocessors, applied in order."""
    engine: EngineConfig = Factory(EngineConfig)
    """The training loop and stop rules."""
    cluster: ClusterConfig = Factory(ClusterConfig)
    """Local or Ray execution, worker counts, placement, weight sync."""
    logging: LoggingConfig = Factory(LoggingConfig)
    """Loggers and progress output."""
    checkpoint: CheckpointConfig = Factory(CheckpointConfig)
    """Checkpoint schedule and retention."""
    seed: int = field(default=0, validator=ge(0))
    """The one seed every RNG derives from (torch, numpy, each env by worker and index)."""
    name: str | None = None
    """Experiment name, used in the default run directory name."""
    run_dir: str | None = None
    """Where the run writes (``null``: ``runs/<name>-<timestamp>``)."""

    def __attrs_post_init__(self) -> None:
        from rlightning_core.config.checks import run_problems

        problems = run_problems(self)
        if problems:  # combinations no run can start with: refused here, before anything starts
            from rlightning_core.errors import ConfigError

            raise ConfigError(problems)
