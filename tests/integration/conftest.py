from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = ROOT / "examples" / "cartpole_ppo.yaml"


def _have(kind: str, name: str) -> bool:
    from rlightning_core.plugins import get_plugins

    return name in get_plugins().registry.names(kind)


def _kill_env_worker_at(engine, ray, *, iteration: int = 2, index: int = 1) -> None:
    """Make ``engine`` kill env worker ``index``'s actor (``ray.kill``) once iteration ``iteration`` logged."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import load_plugins

    class Killer:
        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == iteration:
                ray.kill(engine.execution.env_group.actors[index], no_restart=True)

    engine.plugins = load_plugins(extra=[("killer", Killer())])


@pytest.fixture
def kill_env_worker_at():
    """``kill_env_worker_at(engine, ray, iteration=2, index=1)``: a run that loses an env actor mid-way."""
    return _kill_env_worker_at


def _at_run_end(engine, read) -> dict:
    """Make ``engine`` call ``read(execution)`` when its run ends (its actors still up); returns the dict that
    then holds the result under ``"value"``."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import load_plugins

    seen: dict = {}

    class Probe:
        @hookimpl
        def on_run_end(self, run_dir, status, error):
            seen["value"] = read(engine.execution)

    engine.plugins = load_plugins(extra=[("probe", Probe())])
    return seen


@pytest.fixture
def at_run_end():
    """``seen = at_run_end(engine, read)``: after ``engine.run``, ``seen["value"]`` is ``read(execution)`` at
    the run's end, before its actors are gone."""
    return _at_run_end


@pytest.fixture(scope="session")
def training_plugins() -> None:
    """Skip when the gymnasium and ppo plugin distributions are not installed (the core-only matrix cell)."""
    if not (_have("env", "gymnasium") and _have("policy", "ppo")):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")


def _cartpole_config(*overrides: str):
    from rlightning_core import load_config

    return load_config(CARTPOLE, ["logging.progress=false", *overrides])


def _build_run(config):
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    buffer = build_data_buffer(config.buffer.type, config.buffer)
    return build_engine(config, env_group, policy_group, buffer)


def _cartpole_learner_actor(device: str, *overrides: str, offload: bool = False):
    """A built Ray-mode ``LearnerActor`` for CartPole on ``device``, in this process (no cluster needed)."""
    import gymnasium as gym

    from rlightning_core.builders import build_policy_group
    from rlightning_core.distributed.learner import LearnerActor
    from rlightning_core.plugins import get_plugins

    gpus = ["cluster.learner_num_gpus=1"] if device == "cuda" else []  # a CUDA learner actor must reserve a GPU
    config = _cartpole_config("cluster.mode=ray", f"policy.device={device}", *gpus, *overrides)
    group = build_policy_group(config.policy.type, config.policy, config.cluster)
    actor = LearnerActor(group.policy_cfg, selection=get_plugins().selection(), seed=0, offload=offload)
    env = gym.make("CartPole-v1")
    actor.build(env.observation_space, env.action_space)
    return actor


def _learner_params(engine):
    return {k: v.detach().clone() for k, v in engine.policy_group.learner.net.state_dict().items()}


@pytest.fixture
def cartpole_config():
    """``cartpole_config(*overrides)``: examples/cartpole_ppo.yaml, resolved, without the progress bar."""
    return _cartpole_config


@pytest.fixture
def build_run():
    """``build_run(config)``: the DESIGN §5 builder sequence, returning the engine."""
    return _build_run


@pytest.fixture
def cartpole_learner_actor():
    """``cartpole_learner_actor(device, *overrides, offload=False)``: a built Ray-mode learner actor, in process."""
    return _cartpole_learner_actor


@pytest.fixture
def learner_params():
    """``learner_params(engine)``: a copy of the learner network's state."""
    return _learner_params


def _placement_groups_of(ray, actors: list) -> list[str | None]:
    """Hex id of the placement group each actor runs in (``None``: none), asked inside the actor itself.

    ``__ray_call__`` is Ray's developer method for running a function on any actor, so the actors need no
    test-only method of their own. The function is nested so that it travels by value (the actors cannot
    import this conftest).
    """
    def placement_group_id(_actor: object) -> str | None:
        import ray

        pg = ray.get_runtime_context().get_placement_group_id()
        return str(pg) if pg else None

    return ray.get([a.__ray_call__.remote(placement_group_id) for a in actors])


@pytest.fixture
def placement_groups_of():
    """``placement_groups_of(ray, actors)``: the placement group id each actor was scheduled into."""
    return _placement_groups_of


@pytest.fixture(scope="session")
def ray_cluster():
    """One real private local Ray cluster for the session: loopback, 4 logical CPUs, no dashboard; shut down after.

    ``address="local"``: a cluster another process started with ``ray start`` on this machine is not joined.
    """
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, _node_ip_address="127.0.0.1",
             logging_level="WARNING", log_to_driver=False)
    yield ray
    ray.shutdown()
