"""Numeric faults: a NaN/inf loss or gradient is caught before the optimizer step; ``policy.nan_policy`` says
whether the run stops (``raise``, with the iteration and the offending metric) or drops the update (``skip``,
counted in ``train/skipped_nonfinite_steps``). Real PPO / SAC / DQN learners; the fault is injected into the data
they learn from (the first few minibatches / samples carry NaN)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from reliability_helpers import CARTPOLE, ROOT, SMALL

from rlightning_core.policy.numerics import NonFiniteError, NumericGuard

SAC_TINY = ("policy.params.hidden_sizes=[32,32]", "policy.params.batch_size=32", "policy.params.learning_starts=32",
            "engine.params.rollout_steps=16", "engine.eval_every=0", "engine.eval_episodes=1", "checkpoint.every=0",
            "engine.total_steps=160", "logging.progress=false", "engine.target_eval_return=null")
DQN_TINY = ("policy.params.hidden_sizes=[32,32]", "policy.params.learning_starts=64", "engine.params.rollout_steps=16",
            "engine.eval_every=0", "engine.eval_episodes=1", "checkpoint.every=0", "engine.total_steps=256",
            "logging.progress=false", "engine.target_eval_return=null")


def _need(*policies: str) -> None:
    from rlightning_core.plugins import get_plugins

    reg = get_plugins().registry
    if "gymnasium" not in reg.names("env") or not set(policies) <= set(reg.names("policy")):
        pytest.skip(f"needs the gymnasium and {', '.join(policies)} plugins installed")


def _build(path: Path, *overrides: str):
    from rlightning_core import load_config
    from rlightning_core.builders import build_data_buffer, build_engine, build_env_group, build_policy_group

    config = load_config(path, list(overrides))
    env_group = build_env_group(config.env, seed=config.seed)
    policy_group = build_policy_group(config.policy.type, config.policy, config.cluster)
    return build_engine(config, env_group, policy_group, build_data_buffer(config.buffer.type, config.buffer))


def _poison_minibatches(buffer, first: int, key: str = "advantages") -> None:
    """The first ``first`` minibatches the rollout buffer hands out carry NaN in ``key``."""
    original = buffer.minibatches
    count = {"n": 0}

    def minibatches(*args, **kwargs):
        for mb in original(*args, **kwargs):
            count["n"] += 1
            if count["n"] <= first:
                mb = {**mb, key: torch.full_like(mb[key], float("nan"))}
            yield mb

    buffer.minibatches = minibatches


def _poison_samples(buffer, first: int, key: str = "rewards", value: float = float("nan")) -> None:
    """The first ``first`` batches the replay buffer samples carry ``value`` in ``key``."""
    original = buffer.sample
    count = {"n": 0}

    def sample(*args, **kwargs):
        batch = original(*args, **kwargs)
        count["n"] += 1
        if count["n"] <= first:
            batch = {**batch, key: torch.full_like(batch[key], value)}
        return batch

    buffer.sample = sample


def _rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _finite(engine) -> bool:
    learner = engine.policy_group.learner
    return all(bool(torch.isfinite(v).all()) for m in learner.modules().values() for v in m.state_dict().values())


# -- the guard alone --------------------------------------------------------------------------------------------


def test_guard_passes_finite_values_and_names_the_offending_ones():
    guard = NumericGuard("raise")
    guard.begin_learn()
    assert guard.check({"loss/a": torch.tensor(1.0)}, torch.tensor(2.0))
    expected = r"\(optimizer step 2 of learn call 1\): loss/b=nan, grad/norm=inf"
    with pytest.raises(NonFiniteError, match=expected) as info:
        guard.check({"loss/a": torch.tensor(1.0), "loss/b": torch.tensor(float("nan"))}, torch.tensor(float("inf")))
    assert set(info.value.offending) == {"loss/b", "grad/norm"}


def test_skip_clears_the_gradients_and_counts_per_learn_call():
    layer = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    guard = NumericGuard("skip")
    guard.begin_learn()
    layer(torch.tensor([[float("nan"), 1.0]])).sum().backward()
    assert not guard.check({}, guard.grad_norm(layer.parameters()), optimizers=[opt])
    assert all(p.grad is None for p in layer.parameters())
    assert guard.metrics() == {"train/skipped_nonfinite_steps": 1.0}
    guard.begin_learn()
    assert guard.skipped == 0 and guard.metrics() == {"train/skipped_nonfinite_steps": 1.0}


def test_nan_policy_is_validated_by_the_config():
    from rlightning_core import load_config
    from rlightning_core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"policy.nan_policy: must be one of 'raise', 'skip'"):
        load_config(CARTPOLE, ["policy.nan_policy=ignore"])


# -- PPO ----------------------------------------------------------------------------------------------------------


def test_ppo_raise_stops_before_the_step_with_the_iteration_and_metric(tmp_path):
    _need("ppo")
    engine = _build(CARTPOLE, *SMALL)
    before = {k: v.clone() for k, v in engine.policy_group.learner.net.state_dict().items()}
    _poison_minibatches(engine.execution.buffer, first=1)
    with pytest.raises(NonFiniteError, match=r"iteration 1 \(128 env steps so far\): non-finite values in ppo "
                                             r"update \(optimizer step 1 of learn call 1\): loss/policy=nan"):
        engine.run(tmp_path / "run")
    after = engine.policy_group.learner.net.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before), "the bad update was applied"


def test_ppo_skip_drops_the_bad_updates_and_keeps_training(tmp_path):
    _need("ppo")
    engine = _build(CARTPOLE, *SMALL, "policy.nan_policy=skip")
    _poison_minibatches(engine.execution.buffer, first=3)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps"
    skipped = [r["train/skipped_nonfinite_steps"] for r in _rows(tmp_path / "run") if "iteration" in r]
    assert skipped[:3] == [2.0, 3.0, 3.0]  # a running total; 2 epochs x 1 minibatch (128 samples) per iteration
    assert _finite(engine)


def test_ppo_nan_from_the_cli_exits_1_with_a_message_and_no_traceback(tmp_path, monkeypatch, capsys):
    """The CLI's error boundary: NonFiniteError is a run failure (exit 1), reported in one message."""
    _need("ppo")
    import logging

    logger = logging.getLogger("rlightning")
    monkeypatch.setattr(logger, "handlers", [])  # the CLI adds a stderr handler: keep it out of later tests
    from rlightning_cli.main import main
    from rlightning_core.buffer.rollout import RolloutBuffer

    original = RolloutBuffer.minibatches

    def poisoned(self, *args, **kwargs):
        for mb in original(self, *args, **kwargs):
            yield {**mb, "returns": torch.full_like(mb["returns"], float("inf"))}

    monkeypatch.setattr(RolloutBuffer, "minibatches", poisoned)
    with pytest.raises(SystemExit) as info:
        main(["train", str(CARTPOLE), *SMALL, "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert info.value.code == 1, err
    assert "Error: iteration 1" in err and "loss/value=inf" in err and "nan_policy" in err
    assert "Traceback" not in err


# -- SAC and DQN -------------------------------------------------------------------------------------------------


def test_sac_raise_names_the_critic_loss(tmp_path):
    _need("sac")
    engine = _build(ROOT / "examples" / "pendulum_sac.yaml", *SAC_TINY)
    _poison_samples(engine.execution.buffer, first=1)
    expected = r"iteration \d+ .*sac critic update \(optimizer step \d+ of learn call \d+\): loss/critic=nan"
    with pytest.raises(NonFiniteError, match=expected):
        engine.run(tmp_path / "run")


def test_sac_skip_keeps_training_with_finite_parameters(tmp_path):
    _need("sac")
    engine = _build(ROOT / "examples" / "pendulum_sac.yaml", *SAC_TINY, "policy.nan_policy=skip")
    _poison_samples(engine.execution.buffer, first=2)
    result = engine.run(tmp_path / "run")
    assert result.stop_reason == "total_steps"
    skipped = [r["train/skipped_nonfinite_steps"] for r in _rows(tmp_path / "run") if "iteration" in r]
    assert skipped[-1] == 2.0  # the critic update of each poisoned batch (the actor's stays finite)
    assert _finite(engine)


@pytest.mark.parametrize("nan_policy", ["raise", "skip"])
def test_dqn_nan_policy(tmp_path, nan_policy):
    _need("dqn")
    engine = _build(ROOT / "examples" / "cartpole_dqn.yaml", *DQN_TINY, f"policy.nan_policy={nan_policy}")
    _poison_samples(engine.execution.buffer, first=2, value=float("inf"))
    if nan_policy == "raise":
        with pytest.raises(NonFiniteError, match=r"dqn update \(optimizer step 1 of learn call \d+\): loss/td=inf"):
            engine.run(tmp_path / "run")
        return
    engine.run(tmp_path / "run")
    assert [r["train/skipped_nonfinite_steps"] for r in _rows(tmp_path / "run") if "iteration" in r][-1] == 2.0
    assert _finite(engine)
