"""TD3 with the ``async`` engine: it learns Pendulum-v1, a checkpoint resumes bit for bit, and it runs on Ray."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", autouse=True)
def td3_plugins() -> None:
    """Skip unless the gymnasium and td3 plugin distributions are installed."""
    from rlightning_core.plugins import get_plugins

    reg = get_plugins().registry
    if not ("gymnasium" in reg.names("env") and "td3" in reg.names("policy")):
        pytest.skip("needs the rlightning-gymnasium and rlightning-td3 plugins installed")


def example(*overrides: str):
    from rlightning_core import load_config

    return load_config(ROOT / "examples" / "pendulum_td3.yaml", ["logging.progress=false", *overrides])


def evals(run_dir: Path) -> list[float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [r["eval/episode_return_mean"] for r in rows if "eval/episode_return_mean" in r]


def learner_state(engine) -> dict[str, torch.Tensor]:
    learner = engine.policy_group.learner
    return {f"{m}.{k}": v.detach().clone() for m, mod in learner.modules().items() for k, v in mod.state_dict().items()}


#: Tiny runs for the mechanics (not learning).
TINY = ("policy.params.hidden_sizes=[32,32]", "policy.params.batch_size=64", "policy.params.learning_starts=64",
        "engine.params.rollout_steps=32", "engine.eval_every=0", "engine.eval_episodes=2", "checkpoint.every=0",
        "checkpoint.at_end=false")


@pytest.mark.slow
def test_td3_learns_pendulum(tmp_path, build_run):
    """examples/pendulum_td3.yaml trimmed to 64-64 networks and a 1k-step warm-up: a fixed seed reaches an eval
    mean above -400 within 8k steps (a uniformly random policy scores about -1200)."""
    config = example("policy.params.hidden_sizes=[64,64]", "policy.params.learning_starts=1000",
                     "engine.total_steps=8000", "engine.eval_every=8", "engine.eval_episodes=5",
                     "engine.target_eval_return=-400", "checkpoint.at_end=false")
    result = build_run(config).run(tmp_path / "run")
    returns = evals(tmp_path / "run")
    assert result.stop_reason == "target_eval_return", (result, returns)
    assert returns[-1] > -400 and returns[0] < -900  # it learned: the first evaluation was far off


def test_resume_reproduces_an_uninterrupted_run(tmp_path, build_run):
    """Replay contents, generators and update counters are checkpointed: resuming changes nothing."""
    from rlightning_core import hookimpl
    from rlightning_core.plugins import get_plugins, load_plugins

    overrides = (*TINY, "engine.total_steps=512")
    full = build_run(example(*overrides))
    full.run(tmp_path / "full")

    class CtrlC:
        @hookimpl
        def on_metrics(self, step, metrics):
            if metrics.get("iteration") == 9:
                raise KeyboardInterrupt

    first = build_run(example(*overrides, "logging.log_every=1"))
    first.plugins = load_plugins(extra=[("ctrl-c", CtrlC())])
    stopped = first.run(tmp_path / "split")
    first.plugins = get_plugins()
    assert stopped.stop_reason == "interrupted" and stopped.iterations == 9 and first.updates > 0
    resumed = build_run(example(*overrides))
    result = resumed.run(tmp_path / "split", resume_from=tmp_path / "split")
    assert result.env_steps == 512 and resumed.updates == full.updates
    pf, pr = learner_state(full), learner_state(resumed)
    assert pf.keys() == pr.keys() and all(torch.equal(pf[k], pr[k]) for k in pf)


@pytest.mark.ray
def test_td3_streams_on_ray(ray_cluster, tmp_path, build_run):
    """Two env-runner actors stream chunks into the learner actor: the run completes and the weights move."""
    config = example(*TINY, "engine.total_steps=1024", "env.num_workers=2", "cluster.mode=ray", "logging.log_every=1",
                     "engine.params.sync_every=16", "engine.params.max_staleness=2",
                     "engine.params.max_chunks_in_flight=2")
    engine = build_run(config)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps" and result.env_steps >= 1024
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    versions = [r["perf/weight_version"] for r in rows if "perf/weight_version" in r]
    assert engine.updates > 0 and versions == sorted(versions) and versions[-1] > 1
