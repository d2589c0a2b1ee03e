"""APPO (``appo``, V-trace) under the ``async`` engine: it solves CartPole, the behaviour log-probs are those of
the weights that acted, a checkpoint resumes bit for bit, and on Ray the learner trains while runners collect."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def appo_plugins() -> None:
    """Skip unless the gymnasium and appo plugin distributions are installed."""
    from rlightning_core.plugins import get_plugins

    reg = get_plugins().registry
    if not ("gymnasium" in reg.names("env") and "appo" in reg.names("policy")):
        pytest.skip("needs the rlightning-gymnasium and rlightning-appo plugins installed")


pytestmark = pytest.mark.usefixtures("appo_plugins")

#: Tiny runs for the mechanics (not learning).
TINY = ("policy.params.hidden_sizes=[32,32]", "engine.eval_every=0", "engine.eval_episodes=2", "checkpoint.every=0",
        "checkpoint.at_end=false")


def example(name: str, *overrides: str):
    from rlightning_core import load_config

    return load_config(ROOT / "examples" / f"{name}.yaml", ["logging.progress=false", *overrides])


def rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def learner_state(engine) -> dict[str, torch.Tensor]:
    learner = engine.policy_group.learner
    return {f"{m}.{k}": v.detach().clone() for m, mod in learner.modules().items() for k, v in mod.state_dict().items()}


@pytest.mark.slow
def test_appo_solves_cartpole(tmp_path, build_run):
    """examples/cartpole_appo.yaml as shipped (rollouts up to 3 updates behind the learner): eval mean >= 475."""
    result = build_run(example("cartpole_appo", "engine.total_steps=40000")).run(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", result
    returns = [r["eval/episode_return_mean"] for r in rows(tmp_path / "run") if "eval/episode_return_mean" in r]
    assert returns[-1] >= 475 and returns[0] < 200


def test_importance_ratios_measure_the_rollout_copys_lag(tmp_path, build_run):
    """With a sync after every update the rollout copy acts with the learner's weights, so every ratio is 1 up to
    float rounding; syncing every 4 updates, rollouts come from older weights and the ratios move away from 1."""
    ratios = {}
    for every in (1, 4):
        engine = build_run(example("cartpole_appo", *TINY, "engine.total_steps=4096",
                                   f"engine.params.sync_every={every}", "logging.log_every=1"))
        engine.run(tmp_path / str(every))
        got = [r for r in rows(tmp_path / str(every)) if "stats/is_ratio_max" in r]
        assert len(got) == 16
        ratios[every] = (max(r["stats/is_ratio_max"] for r in got), max(r["stats/rho_clip_fraction"] for r in got))
    assert ratios[1][0] < 1 + 1e-4 and ratios[1][1] == 0.0
    assert ratios[4][0] > 1.05 and ratios[4][1] > 0.0


def test_same_seed_and_resume_give_bit_identical_parameters(tmp_path, build_run):
    """Two runs of one seed end equal; a run interrupted after iteration 8 (a sync: sync_every 4) and resumed
    from its checkpoint ends with the same parameters as the uninterrupted one."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import get_plugins, load_plugins

    overrides = (*TINY, "engine.total_steps=4096")
    full = build_run(example("cartpole_appo", *overrides))
    full.run(tmp_path / "full")
    again = build_run(example("cartpole_appo", *overrides))
    again.run(tmp_path / "again")
    pf, pa = learner_state(full), learner_state(again)
    assert all(torch.equal(pf[k], pa[k]) for k in pf)

    class CtrlC:
        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 8:
                raise KeyboardInterrupt

    first = build_run(example("cartpole_appo", *overrides, "logging.log_every=1"))
    first.plugins = load_plugins(extra=[("ctrl-c", CtrlC())])
    stopped = first.run(tmp_path / "split")
    first.plugins = get_plugins()
    assert stopped.stop_reason == "interrupted" and stopped.iterations == 8
    resumed = build_run(example("cartpole_appo", *overrides))
    result = resumed.run(tmp_path / "split", resume_from=tmp_path / "split")
    assert result.env_steps == 4096 and resumed.updates == full.updates
    pr = learner_state(resumed)
    assert all(torch.equal(pf[k], pr[k]) for k in pf)
    other = build_run(example("cartpole_appo", *overrides, "seed=5"))
    other.run(tmp_path / "other")
    po = learner_state(other)
    assert not all(torch.equal(pf[k], po[k]) for k in pf)


@pytest.mark.ray
def test_appo_trains_on_ray_while_runners_collect(ray_cluster, tmp_path, build_run):
    """examples/cartpole_appo_ray.yaml, shortened: the learner actor learns from whole rollouts streamed by the
    2 runners, every stored chunk is within max_staleness, and the V-trace statistics are reported. (How stale
    the chunks are depends on the runners' and the learner's relative speed: not asserted beyond the bound.)"""
    config = example("cartpole_appo_ray", "policy.params.hidden_sizes=[32,32]", "engine.total_steps=3072",
                     "engine.eval_every=0", "engine.eval_episodes=2", "logging.log_every=1")
    engine = build_run(config)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps >= 3072 and engine.updates > 0
    got = [r for r in rows(tmp_path / "run") if "iteration" in r]
    lags = [r["async/policy_lag_max"] for r in got if "async/policy_lag_max" in r]
    assert lags and max(lags) <= config.engine.params.max_staleness
    learned = [r for r in got if "stats/is_ratio_mean" in r]
    assert learned and all(np.isfinite([r["loss/policy"], r["loss/value"], r["stats/is_ratio_mean"]]).all()
                           for r in learned)
    versions = [r["perf/weight_version"] for r in got]
    assert versions == sorted(versions) and versions[-1] > 1


def test_a_chunk_that_waits_for_a_later_rollout_reports_its_lag_when_learned_and_obeys_the_bound(tmp_path,
                                                                                              build_run):
    """The streaming learner step with an on-policy buffer (LocalExecution's, the code Ray's learner runs too):
    runner 0's second chunk waits while the rollout of the first ones is learned; two publications later it is
    learned beside runner 1's new chunk and reports a lag of 2, not the 0 it had on arrival. With the bound at
    1 it is dropped instead, and the rollout waits for a fresh chunk of its column."""
    def setup(max_staleness: int | None):
        engine = build_run(example("cartpole_appo", *TINY, "env.num_workers=2", "env.num_envs=2",
                                   "engine.params.sync_every=1"))
        ex = engine.execution
        ex.reset(engine.config.seed)
        v0 = ex.version
        a1, a2, b1 = ex.start_collect(0, 32)[0], ex.start_collect(0, 32)[0], ex.start_collect(1, 32)[0]
        first = ex.finish_learn(ex.start_learn(0.0, [a1, a2, b1], version=v0, max_staleness=max_staleness))
        assert first["lags"] == [0, 0] and first["metrics"]["stats/updates"] == 1  # {a1, b1}: a2 waits
        ex.publish_weights()
        ex.publish_weights()
        b2 = ex.start_collect(1, 32)[0]
        assert int(b2.weight_version) == v0 + 2 == ex.version
        return ex, b2

    ex, b2 = setup(None)
    second = ex.finish_learn(ex.start_learn(0.0, [b2], version=ex.version, max_staleness=None))
    assert sorted(second["lags"]) == [0, 2] and second["metrics"]["stats/updates"] == 1 and second["dropped"] == 0
    assert ex.buffer_size() == 0  # between calls the buffer is empty: nothing was learned from half a rollout

    ex, b2 = setup(1)
    second = ex.finish_learn(ex.start_learn(0.0, [b2], version=ex.version, max_staleness=1))
    assert second["dropped"] == 1 and second["lags"] == [] and second["metrics"]["stats/updates"] == 0
    a3 = ex.start_collect(0, 32)[0]
    third = ex.finish_learn(ex.start_learn(0.0, [a3], version=ex.version, max_staleness=1))
    assert third["lags"] == [0, 0] and third["metrics"]["stats/updates"] == 1
