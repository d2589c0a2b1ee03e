"""Learning on masked-velocity CartPole: the LSTM policy learns what an MLP PPO cannot on the same budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlightning_core.training import train

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "cartpole_masked_recurrent_ppo.yaml"
#: 32 iterations; a higher learning rate and fewer epochs than the example, to learn within the budget.
BUDGET = ["engine.total_steps=8192", "engine.eval_every=4", "checkpoint.every=0", "seed=1",
          "policy.params.lr=3e-3", "policy.params.epochs=10"]
#: The MLP PPO of the same settings (two 64-unit ReLU layers in place of the recurrent core).
MLP = ["policy.type=ppo", "policy.params={hidden_sizes: [64, 64], activation: relu, ortho_init: false, lr: 3.0e-3, "
       "anneal_lr: true, gamma: 0.98, gae_lambda: 0.8, epochs: 10, minibatch_size: 256, ent_coef: 0.0}"]


@pytest.mark.slow
def test_lstm_learns_masked_cartpole_where_the_mlp_does_not(tmp_path):
    lstm = train(EXAMPLE, tmp_path / "lstm", overrides=BUDGET)
    mlp = train(EXAMPLE, tmp_path / "mlp", overrides=[*BUDGET, *MLP])
    assert lstm.best_eval_return is not None and mlp.best_eval_return is not None
    assert mlp.best_eval_return < 100, mlp.best_eval_return  # memoryless: it cannot tell the velocities
    assert lstm.best_eval_return >= 150, lstm.best_eval_return
