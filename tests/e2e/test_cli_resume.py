"""``rlightning train --resume RUN_DIR`` as a user runs it: the saved config, overrides on top, refusals by key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CARTPOLE = str(ROOT / "examples" / "cartpole_ppo.yaml")
SMALL = ("engine.eval_every=0", "engine.eval_episodes=1", "engine.target_eval_return=null", "logging.progress=false",
         "env.num_envs=4", "engine.params.rollout_steps=32", "checkpoint.every=2")


@pytest.fixture(scope="module")
def stopped_run(tmp_path_factory, rlightning_cli):
    """A small CartPole run that stopped at 512 env steps, with its checkpoints and saved config."""
    from rlightning_core.plugins import get_plugins

    registry = get_plugins().registry
    if "gymnasium" not in registry.names("env") or "ppo" not in registry.names("policy"):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")
    run = tmp_path_factory.mktemp("resume") / "run"
    result = rlightning_cli(["train", CARTPOLE, *SMALL, "engine.total_steps=512", "--run-dir", str(run)], timeout=300)
    assert result.returncode == 0, result
    return run


def steps_logged(run: Path) -> list[int]:
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["step"] for r in rows if "iteration" in r]


def test_resume_without_config_takes_the_saved_one_and_applies_overrides(stopped_run, rlightning_cli, tmp_path):
    import shutil

    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    result = rlightning_cli(["train", "--resume", str(run), "engine.total_steps=1024"], timeout=300)
    assert result.returncode == 0, result
    assert "Stopped (total_steps) after" in result.stderr and "1024 env steps" in result.stderr
    assert steps_logged(run)[-1] == 1024 and steps_logged(run)[0] == 128  # it went on from 512
    # overrides may also come before the option, and with a checkpoint file instead of the run directory
    ckpt = sorted((run / "checkpoints").glob("ckpt-*.pt"))[-1]
    again = rlightning_cli(["train", "engine.total_steps=1536", "--resume", str(ckpt), "--dry-run"])
    assert again.returncode == 0, again
    assert f"Plan for {run / 'config.yaml'}" in again.stdout and "for 1536 env steps" in again.stdout


def test_a_run_saved_by_an_older_version_resumes_without_its_config(stopped_run, rlightning_cli, tmp_path):
    import shutil

    import yaml

    run = tmp_path / "run"
    shutil.copytree(stopped_run, run)
    # what the run dir of a version before the renames / removals holds: old names, removed keys
    saved = yaml.safe_load((run / "config.yaml").read_text())
    saved["cluster"]["train_workers"] = saved["cluster"].pop("num_learners")
    saved["cluster"]["early_rollout"] = False
    (run / "config.yaml").write_text(yaml.safe_dump(saved))
    result = rlightning_cli(["train", "--resume", str(run), "engine.total_steps=768"], timeout=300)
    assert result.returncode == 0, result
    assert steps_logged(run)[-1] == 768
    # a config file a user wrote with the old name is refused with the new one, so that it gets fixed
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(saved))
    refused = rlightning_cli(["train", str(tmp_path / "mine.yaml"), "--resume", str(run), "--dry-run"])
    assert refused.returncode == 2, refused
    assert "cluster.train_workers: was renamed to cluster.num_learners" in refused.stderr


def test_resume_with_a_config_file_still_works(stopped_run, rlightning_cli):
    result = rlightning_cli(["train", CARTPOLE, *SMALL, "engine.total_steps=1024", "--resume", str(stopped_run),
                             "--dry-run"])
    assert result.returncode == 0, result
    assert f"Plan for {CARTPOLE}" in result.stdout and "for 1024 env steps" in result.stdout


def test_without_config_or_resume_the_config_is_missing(rlightning_cli):
    result = rlightning_cli(["train", "engine.total_steps=8192"])
    assert result.returncode == 2, result
    assert "Missing argument 'CONFIG'" in result.stderr and "Traceback" not in result.stderr


def test_a_resume_without_a_saved_config_says_what_to_give(rlightning_cli, tmp_path):
    result = rlightning_cli(["train", "--resume", str(tmp_path), "engine.total_steps=8192"])
    assert result.returncode == 2, result
    assert "config.yaml does not exist" in result.stderr and "rlightning train CONFIG" in result.stderr


def test_a_refused_resume_names_the_keys_that_differ(stopped_run, rlightning_cli):
    result = rlightning_cli(["train", "--resume", str(stopped_run), "policy.params.lr=0.1",
                             "policy.params.gamma=0.9", "engine.total_steps=1024"], timeout=300)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    err = result.stderr
    assert "the config differs from the one the checkpoint was written with" in err
    assert "policy.params.lr: 0.003 in the checkpoint, 0.1 now" in err
    assert "policy.params.gamma: 0.98 in the checkpoint, 0.9 now" in err
    assert "engine.total_steps" not in err  # a stop rule may change on resume
