"""``rlightning train`` stopped by a plugin that raises StopTraining: exit 0, a final checkpoint, a resumable run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "examples" / "cartpole_ppo.yaml")
TINY = ("logging.progress=false", "env.num_envs=4", "engine.params.rollout_steps=32", "engine.eval_episodes=2",
        "engine.target_eval_return=null", "checkpoint.every=0", "checkpoint.at_end=false")

STOPPER = """
from rlightning_core import StopTraining, hookimpl

RLIGHTNING_PLUGIN_API = ">=2,<3"

@hookimpl
def on_eval(step, metrics):
    if step >= 256:
        raise StopTraining(f"eval return {metrics['eval/episode_return_mean']:.1f} at {step} is enough")
"""


def test_a_plugin_stop_ends_the_cli_run_with_a_checkpoint_that_resumes(make_plugin_dist, rlightning_cli, tmp_path):
    from rlightning_core.plugins import get_plugins

    registry = get_plugins().registry
    if "gymnasium" not in registry.names("env") or "ppo" not in registry.names("policy"):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")
    make_plugin_dist("rlt-stopper", "1.0", "rlt_stopper", STOPPER, entry_name="stopper")
    run = tmp_path / "run"
    result = rlightning_cli(["train", CARTPOLE, *TINY, "engine.total_steps=1024", "engine.eval_every=2",
                             "--run-dir", str(run)], pythonpath=make_plugin_dist.pythonpath, timeout=300)
    assert result.returncode == 0, result
    assert "Traceback" not in result.output
    assert "Stopped (callback: eval return " in result.stderr
    assert "at 256 is enough) after 2 iterations" in result.stderr
    assert [p.name for p in (run / "checkpoints").glob("ckpt-*.pt")] == ["ckpt-00000002.pt"]

    again = rlightning_cli(["train", "--resume", str(run), "engine.total_steps=512", "engine.eval_every=0"],
                           timeout=300)
    assert again.returncode == 0, again
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "iteration" in r] == [128, 256, 384, 512]
