"""Off-policy training with the ``async`` engine: SAC and DQN learn, one process is deterministic, checkpoints
resume exactly, stale chunks are refused, and on Ray the learner streams while runners collect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def offpolicy_plugins() -> None:
    """Skip unless the gymnasium, sac and dqn plugin distributions are installed."""
    from rlightning_core.plugins import get_plugins

    reg = get_plugins().registry
    if not ("gymnasium" in reg.names("env") and {"sac", "dqn"} <= set(reg.names("policy"))):
        pytest.skip("needs the rlightning-gymnasium, rlightning-sac and rlightning-dqn plugins installed")


needs_plugins = pytest.mark.usefixtures("offpolicy_plugins")


def example(name: str, *overrides: str):
    from rlightning_core import load_config

    return load_config(ROOT / "examples" / f"{name}.yaml", ["logging.progress=false", *overrides])


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def evals(run_dir: Path) -> list[float]:
    return [r["eval/episode_return_mean"] for r in rows(run_dir) if "eval/episode_return_mean" in r]


def learner_state(engine) -> dict[str, torch.Tensor]:
    learner = engine.policy_group.learner
    return {f"{m}.{k}": v.detach().clone() for m, mod in learner.modules().items() for k, v in mod.state_dict().items()}


#: Tiny runs for the mechanics (not learning).
SAC_TINY = ("policy.params.hidden_sizes=[32,32]", "policy.params.batch_size=64", "policy.params.learning_starts=64",
            "engine.params.rollout_steps=32", "engine.eval_every=0", "engine.eval_episodes=2", "checkpoint.every=0",
            "checkpoint.at_end=false")
DQN_TINY = ("policy.params.hidden_sizes=[32,32]", "policy.params.learning_starts=256", "engine.params.rollout_steps=32",
            "buffer.params.prioritized=true", "engine.eval_every=0", "engine.eval_episodes=2", "checkpoint.every=0",
            "checkpoint.at_end=false")


# -- learning ------------------------------------------------------------------------------------------------


@needs_plugins
@pytest.mark.slow
def test_sac_reaches_the_pendulum_target(tmp_path, build_run):
    """examples/pendulum_sac.yaml, trimmed to 64-64 networks and lr 1e-3: eval >= -250 within 6k steps."""
    config = example("pendulum_sac", "policy.params.hidden_sizes=[64,64]", "policy.params.lr=1e-3",
                     "engine.total_steps=6000", "engine.eval_every=8")
    result = build_run(config).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    returns = evals(tmp_path / "run")
    assert returns[-1] >= -250 and returns[0] < -1000  # it learned: the first evaluation was far off


@needs_plugins
@pytest.mark.slow
def test_dqn_solves_cartpole(tmp_path, build_run):
    """examples/cartpole_dqn.yaml as shipped: eval mean >= 475."""
    result = build_run(example("cartpole_dqn")).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    returns = evals(tmp_path / "run")
    assert returns[-1] >= 475 and returns[0] < 200


# -- one process: determinism, resume, staleness, metrics ------------------------------------------------------


@needs_plugins
@pytest.mark.parametrize(("name", "tiny", "steps"), [("pendulum_sac", SAC_TINY, 640),
                                                     ("cartpole_dqn", DQN_TINY, 1280)], ids=["sac", "dqn-per"])
def test_same_seed_gives_bit_identical_parameters(tmp_path, build_run, name, tiny, steps):
    runs = []
    for i, seed in enumerate((0, 0, 5)):
        engine = build_run(example(name, *tiny, f"engine.total_steps={steps}", f"seed={seed}"))
        engine.run(tmp_path / str(i))
        assert engine.updates > 0
        runs.append(learner_state(engine))
    a, b, c = runs
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)


@needs_plugins
@pytest.mark.parametrize(("name", "tiny", "synced", "kept"), [
    ("pendulum_sac", SAC_TINY, {"actor"}, {"critic", "critic_target", "ent_coef"}),
    ("pendulum_td3", SAC_TINY, {"actor"}, {"actor_target", "critic", "critic_target"}),
    ("cartpole_dqn", DQN_TINY, {"q", "exploration"}, {"q_target"})], ids=["sac", "td3", "dqn"])
def test_a_weight_sync_moves_only_the_modules_rollout_copies_act_with(tmp_path, build_run, name, tiny, synced, kept):
    """Critics and target networks stay with the learner: the rollout copy's are never overwritten, its acting
    modules equal the learner's after every sync, and the size a Ray run sizes its sync by counts those alone."""
    from rlightning_core.plan import measure_weights_nbytes
    from rlightning_core.plugins import get_plugins

    if name.endswith("td3") and "td3" not in get_plugins().registry.names("policy"):
        pytest.skip("needs the rlightning-td3 plugin installed")
    engine = build_run(example(name, *tiny, "engine.total_steps=640"))
    engine.run(tmp_path / "run")
    learner, rollout = engine.policy_group.learner, engine.policy_group.rollout
    assert engine.updates > 0 and set(learner.rollout_modules()) == synced
    assert set(learner.modules()) == synced | kept
    for mname in synced:
        ours, theirs = learner.modules()[mname].state_dict(), rollout.modules()[mname].state_dict()
        assert all(torch.equal(ours[k], theirs[k]) for k in ours), mname
    for mname in kept:  # trained on the learner, still the rollout copy's own initialization (another seed)
        ours, theirs = learner.modules()[mname].state_dict(), rollout.modules()[mname].state_dict()
        assert any(not torch.equal(ours[k], theirs[k]) for k in ours if ours[k].is_floating_point()), mname
    assert {k.split(".", 1)[0] for k in learner.get_weights()} == synced
    acting = sum(t.numel() * t.element_size() for m in synced for t in learner.modules()[m].state_dict().values())
    assert measure_weights_nbytes(example(name, *tiny, "cluster.mode=ray")) == acting


@needs_plugins
def test_resume_reproduces_an_uninterrupted_run(tmp_path, build_run):
    """Replay contents, sampling generators and update counters are checkpointed: resuming changes nothing."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import get_plugins, load_plugins

    overrides = (*SAC_TINY, "engine.total_steps=512")
    full = build_run(example("pendulum_sac", *overrides))
    full.run(tmp_path / "full")

    class CtrlC:
        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 9:
                raise KeyboardInterrupt

    first = build_run(example("pendulum_sac", *overrides, "logging.log_every=1"))
    first.plugins = load_plugins(extra=[("ctrl-c", CtrlC())])
    stopped = first.run(tmp_path / "split")
    first.plugins = get_plugins()
    assert stopped.stop_reason == "interrupted" and stopped.iterations == 9 and first.updates > 0
    resumed = build_run(example("pendulum_sac", *overrides))
    result = resumed.run(tmp_path / "split", resume_from=tmp_path / "split")
    assert result.env_steps == 512 and resumed.updates == full.updates
    pf, pr = learner_state(full), learner_state(resumed)
    assert all(torch.equal(pf[k], pr[k]) for k in pf)


@needs_plugins
def test_one_process_resumes_the_buffer_layouts_a_ray_run_writes(tmp_path, build_run, caplog):
    """A Ray run's buffer state: one learner's loads; data-parallel shards or a sharded buffer's ``{}`` start empty."""
    overrides = (*SAC_TINY, "engine.total_steps=256")
    engine = build_run(example("pendulum_sac", *overrides))
    engine.run(tmp_path / "run")
    state = engine.state_dict()
    saved = state["buffer"]
    assert len(engine.execution.buffer) > 0
    for buffer, kept in (({"shards": [saved]}, True), ({"shards": [saved, saved]}, False), ({}, False)):
        fresh = build_run(example("pendulum_sac", *overrides))
        caplog.clear()
        with caplog.at_level("INFO", logger="rlightning"):
            fresh.load_state_dict({**state, "buffer": buffer})
        assert len(fresh.execution.buffer) == (len(engine.execution.buffer) if kept else 0)
        assert kept or "resumes with an empty buffer" in caplog.text
        fresh.execution.close()
        fresh.env_group.close()


@needs_plugins
def test_sync_every_k_updates_and_the_metrics(tmp_path, build_run):
    config = example("pendulum_sac", *SAC_TINY, "engine.total_steps=1024", "engine.params.sync_every=100",
                     "logging.log_every=1")
    engine = build_run(config)
    engine.run(tmp_path / "run")
    got = [r for r in rows(tmp_path / "run") if "iteration" in r]
    versions = [r["perf/weight_version"] for r in got]
    # version 1 is the sync at start-up; then one more after each learn call completing 100 updates since the last
    expected, version, at_sync, total = [], 1, 0, 0
    for r in got:
        total += int(r["stats/updates"])
        if total - at_sync >= 100:
            version, at_sync = version + 1, total
        expected.append(version)
    assert versions == expected and versions[-1] > 2
    for r in got:
        assert r["async/policy_lag_max"] == 0  # one process: a chunk enters the buffer with the current weights
        assert 0.0 <= r["perf/learner_idle_frac"] <= 1.0 and 0.0 <= r["perf/rollout_idle_frac"] <= 1.0
        assert r["perf/collect_sps"] > 0 and r["async/dropped_chunks"] == 0
    assert {"loss/critic", "loss/actor", "stats/ent_coef", "perf/updates_per_s", "async/buffer_size"} <= set(got[-1])
    rollout = engine.policy_group.rollout
    assert rollout.weight_version == engine.policy_group.version == versions[-1]
    assert engine.updates - engine.updates_at_sync < 100


@needs_plugins
def test_chunks_staler_than_max_staleness_are_dropped(tmp_path, build_run):
    config = example("pendulum_sac", *SAC_TINY, "engine.params.max_staleness=1", "env.num_workers=2")
    engine = build_run(config)
    engine.execution.reset(config.seed)
    rollout = engine.policy_group.rollout
    rollout.weight_version = engine.policy_group.version - 2  # as if it had missed two syncs
    metrics = engine.iteration()
    assert metrics["async/dropped_chunks"] == 2 and metrics["async/policy_lag_min"] == 2
    assert len(engine.execution.buffer) == 0 and engine.env_steps == 64  # collected, counted, not stored
    rollout.weight_version = engine.policy_group.version - 1  # within the bound
    metrics = engine.iteration()
    assert metrics["async/dropped_chunks"] == 2 and metrics["async/policy_lag_max"] == 1
    assert len(engine.execution.buffer) == 64


def test_async_engine_passes_the_engine_conformance_kit(conformance):
    conformance.check_engine("async", {"rollout_steps": 8, "sync_every": 2}, buffer="replay")


@needs_plugins
def test_prioritized_dqn_updates_the_priorities_of_its_buffer(tmp_path, build_run):
    engine = build_run(example("cartpole_dqn", *DQN_TINY, "engine.total_steps=1024"))
    engine.run(tmp_path / "run")
    sampler = engine.execution.buffer.sampler
    priorities = sampler.priorities(np.arange(len(engine.execution.buffer)))
    assert engine.updates > 0 and len(np.unique(priorities)) > 100  # fed back from |TD errors|, not uniform


# -- Ray: streaming -------------------------------------------------------------------------------------------


@needs_plugins
@pytest.mark.ray
def test_the_ray_learner_stores_chunks_within_max_staleness_and_drops_older_ones(ray_cluster, build_run):
    """The learner actor judges each chunk by the version it was collected with: lag = the learn call's version
    minus the chunk's. Driven call by call here, so the lags are chosen, not left to how fast anything runs."""
    config = example("pendulum_sac_ray", "policy.params.hidden_sizes=[16,16]", "engine.eval_every=0",
                     "engine.eval_episodes=1")
    engine = build_run(config)
    ex = engine.execution
    try:
        ex.reset(config.seed)
        chunk, stats = ex.start_collect(0, config.engine.params.rollout_steps)
        collected = ex.finish_collect(0, stats).weight_version
        bound = config.engine.params.max_staleness
        stale = ex.finish_learn(ex.start_learn(0.0, [chunk], version=collected + bound + 1, max_staleness=bound))
        kept = ex.finish_learn(ex.start_learn(0.0, [chunk], version=collected + bound, max_staleness=bound))
        assert (stale["dropped"], stale["lags"]) == (1, [])
        assert (kept["dropped"], kept["lags"]) == (0, [bound])
    finally:
        ex.close()
        engine.env_group.close()


@needs_plugins
@pytest.mark.ray
def test_ray_streaming_respects_max_staleness(ray_cluster, tmp_path, build_run):
    """2 env runners with up to 3 chunks each in flight stream into the learner while it learns: every stored
    chunk is within the staleness bound and the weights keep moving. (How many chunks arrive too late, and how
    busy the learner is, depend on the runners' and the learner's relative speed: not asserted.)"""
    config = example("pendulum_sac_ray", "policy.params.hidden_sizes=[64,64]", "policy.params.batch_size=128",
                     "engine.total_steps=2500", "engine.eval_every=0", "engine.eval_episodes=2",
                     "engine.params.max_staleness=1", "engine.params.max_chunks_in_flight=3",
                     "engine.params.sync_every=16", "logging.log_every=1")
    result = build_run(config).run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps >= 2500
    got = [r for r in rows(tmp_path / "run") if "iteration" in r]
    lags = [r["async/policy_lag_max"] for r in got if "async/policy_lag_max" in r]
    assert lags and max(lags) <= 1  # no stored (hence no sampled) transition beyond the bound
    versions = [r["perf/weight_version"] for r in got]
    assert versions == sorted(versions) and versions[-1] > 5


@needs_plugins
def test_the_streaming_shape_trains_on_a_local_execution_too(tmp_path, build_run):
    """The async engine's concurrent loop uses only the contract's streaming calls, which a LocalExecution runs
    at submission: driven through it, a run in one process collects every step, learns and publishes weights."""
    from rlightning_core.engine.async_engine import Stream

    config = example("pendulum_sac", *SAC_TINY, "engine.total_steps=1024", "engine.params.sync_every=50",
                     "env.num_workers=2", "logging.log_every=1")
    engine = build_run(config)
    engine.stream = Stream(engine)  # the loop a concurrent (Ray) execution gets
    result = engine.run(tmp_path / "run")
    got = [r for r in rows(tmp_path / "run") if "iteration" in r]
    assert result.env_steps == 1024 and got[-1]["step"] == 1024
    assert sum(r["stats/updates"] for r in got) > 0 and "loss/critic" in got[-1]
    versions = [r["perf/weight_version"] for r in got]
    assert versions == sorted(versions) and versions[-1] > 1  # publish_weights bumped the version
    assert engine.policy_group.rollout.weight_version == engine.policy_group.version  # published into the copy



@needs_plugins
def test_max_chunks_per_learn_caps_each_learn_call_and_queues_the_rest(tmp_path, build_run):
    """``max_chunks_per_learn`` hands the learner at most that many chunks per call, oldest first; the others wait
    in the driver's queue, so they reach the learner older (IMPALA's fixed learner batch). Driven through a
    LocalExecution (the streaming calls run at submission), the queue and so the lags are deterministic."""
    from rlightning_core.engine.async_engine import Stream

    def run(most: int | None) -> tuple[list[int], list[float], int]:
        config = example("pendulum_sac", *SAC_TINY, "engine.total_steps=1536", "engine.params.sync_every=1",
                         "engine.params.max_chunks_in_flight=3", "engine.params.max_staleness=null",
                         f"engine.params.max_chunks_per_learn={'null' if most is None else most}",
                         "env.num_workers=2", "logging.log_every=1")
        engine = build_run(config)
        engine.stream = Stream(engine)
        sizes: list[int] = []
        start_learn = engine.execution.start_learn

        def counted(progress, chunks, **kw):
            sizes.append(len(chunks))
            return start_learn(progress, chunks, **kw)

        engine.execution.start_learn = counted
        run_dir = tmp_path / f"run-{most}"
        result = engine.run(run_dir)
        assert result.env_steps == 1536
        lags = [r["async/policy_lag_max"] for r in rows(run_dir) if "async/policy_lag_max" in r]
        ex = engine.execution
        per_chunk = ex.steps_per_collect(config.engine.params.rollout_steps) // ex.num_runners
        return sizes, lags, result.env_steps // per_chunk

    every, every_lags, chunks = run(None)
    capped, capped_lags, _ = run(1)
    assert max(every) == 2 and max(capped) == 1  # every ready chunk (one per runner per event) vs one per call
    # nothing is lost: every chunk but the runners' last in-flight ones (3 each) reached the learner
    assert chunks - 6 <= sum(every) <= chunks and chunks - 6 <= sum(capped) <= chunks
    # the queue makes chunks older: each waits behind weights published after every call before its own
    assert max(capped_lags) > max(every_lags) and max(capped_lags) >= 3
