"""Safe loading: planted pickles never run, YAML tags never construct objects, config strings are never
evaluated, and a run writes only inside its run directory. Every test drives the real CLI or loader."""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path

import pytest
from reliability_helpers import CARTPOLE, SMALL

pytestmark = pytest.mark.slow


class Evil:
    """Unpickling this runs ``touch MARKER``: a checkpoint holding it must be refused, unexecuted."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.system, (f"touch {shlex.quote(str(self.marker))}",))


def _plant(directory: Path, marker: Path, iteration: int = 99_999_999) -> Path:
    """A checkpoint file with an rlightning header whose state runs code when unpickled."""
    import torch

    path = directory / f"ckpt-{iteration:08d}.pt"
    torch.save({"format": "rlightning-checkpoint", "format_version": 1,
                "meta": {"step": 1, "iteration": iteration, "eval_return": None},
                "manifest": {}, "state": {"x": Evil(marker)}}, path)
    return path


@pytest.fixture
def run_copy(small_run: Path, tmp_path: Path) -> Path:
    """A private copy of the session's small run (tests plant files in it)."""
    return Path(shutil.copytree(small_run, tmp_path / "run"))


def test_resume_from_a_planted_pickle_is_refused_and_never_runs_it(run_copy, tmp_path, cli):
    marker = tmp_path / "pwned"
    evil = _plant(run_copy / "checkpoints", marker)
    proc = cli(["train", str(CARTPOLE), *SMALL, "--resume", str(evil)])
    assert proc.returncode == 2, proc.stderr
    assert "refusing to unpickle" in proc.stderr and str(evil) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_a_planted_pickle_newer_than_the_real_checkpoints_is_skipped(run_copy, tmp_path, cli):
    """Resuming a run directory picks the newest *loadable* checkpoint, never the planted one."""
    marker = tmp_path / "pwned"
    _plant(run_copy / "checkpoints", marker)
    proc = cli(["train", str(CARTPOLE), *SMALL, "engine.total_steps=1280", "--resume", str(run_copy)])
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stderr and "ckpt-99999999" not in proc.stderr.split("resumed from")[1][:80]
    assert not marker.exists()


def test_a_run_dir_holding_only_a_planted_pickle_is_refused(run_copy, tmp_path, cli):
    marker = tmp_path / "pwned"
    for f in (run_copy / "checkpoints").glob("ckpt-*.pt"):
        f.unlink()
    _plant(run_copy / "checkpoints", marker)
    proc = cli(["train", str(CARTPOLE), *SMALL, "--resume", str(run_copy)])
    assert proc.returncode == 2, proc.stderr
    assert "no readable checkpoint" in proc.stderr and "ckpt-99999999.pt" in proc.stderr
    assert not marker.exists()


def test_eval_of_a_planted_pickle_is_refused_and_never_runs_it(run_copy, tmp_path, cli):
    marker = tmp_path / "pwned"
    evil = _plant(run_copy / "checkpoints", marker)
    proc = cli(["eval", str(evil), "-n", "1"])
    assert proc.returncode == 2, proc.stderr
    assert "refusing to unpickle" in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()


def test_a_plain_pickle_renamed_to_a_checkpoint_is_refused(run_copy, tmp_path, cli):
    import pickle

    marker = tmp_path / "pwned"
    evil = run_copy / "checkpoints" / "ckpt-99999999.pt"
    evil.write_bytes(pickle.dumps({"state": Evil(marker)}))
    proc = cli(["eval", str(evil), "-n", "1"])
    assert proc.returncode == 2 and "not a valid rlightning checkpoint" in proc.stderr, proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("tag", [
    "!!python/object/apply:os.system ['touch {marker}']",
    "!!python/name:os.system",
    "!!python/object/new:subprocess.Popen [['touch', '{marker}']]",
])
def test_yaml_python_tags_are_refused(tmp_path, cli, tag):
    marker = tmp_path / "pwned"
    config = tmp_path / "evil.yaml"
    config.write_text(CARTPOLE.read_text() + f"name: {tag.format(marker=marker)}\n")
    proc = cli(["config", "validate", str(config)])
    assert proc.returncode == 2, proc.stderr
    assert str(config) in proc.stderr and "Traceback" not in proc.stderr
    assert not marker.exists()


@pytest.mark.parametrize("override", [
    "name=__import__('os').system('touch {marker}')",
    "seed=__import__('os').system('touch {marker}')",
    "policy.params.lr=eval(\"__import__('os').system('touch {marker}')\")",
    "env[0].params.id=${{__import__('os').system('touch {marker}')}}",
])
def test_override_strings_are_never_evaluated(tmp_path, cli, override):
    """Values are parsed as YAML scalars only: code stays a string (or fails validation), and never runs."""
    marker = tmp_path / "pwned"
    proc = cli(["config", "validate", str(CARTPOLE), override.format(marker=marker)])
    assert proc.returncode in (0, 2), proc.stderr
    assert "Traceback" not in proc.stderr
    assert not marker.exists()


def test_code_in_a_string_value_stays_a_string(tmp_path):
    from rlightning_core import load_config

    code = f"__import__('os').system('touch {tmp_path / 'pwned'}')"
    config = load_config(CARTPOLE, [f"name={code}"], resolve=False)
    assert config.name == code
    assert not (tmp_path / "pwned").exists()


@pytest.mark.parametrize("override", [
    "logging.loggers=[{{type: jsonl, params: {{filename: ../escaped.jsonl}}}}]",
    "logging.loggers=[{{type: jsonl, params: {{filename: {outside}}}}}]",
])
def test_logger_paths_outside_the_run_dir_are_refused(tmp_path, cli, override):
    outside = tmp_path / "outside.jsonl"
    proc = cli(["config", "validate", str(CARTPOLE), override.format(outside=outside)])
    assert proc.returncode == 2, proc.stderr
    assert "inside the run directory" in proc.stderr and "logging.loggers[0].params.filename" in proc.stderr
    assert not outside.exists()


def test_training_writes_only_inside_the_run_directory(tmp_path, cli, training_plugins):
    """Train, checkpoint, evaluate, resume: every file created under the working directory is in RUN_DIR."""
    work = tmp_path / "work"
    work.mkdir()
    before = {p for p in tmp_path.rglob("*")}
    run_dir = work / "run"
    args = ["train", str(CARTPOLE), *SMALL, "checkpoint.every=2",
            "logging.loggers=[{type: jsonl, params: {filename: extra/metrics2.jsonl}}]", "--run-dir", str(run_dir)]
    assert cli(args, cwd=work).returncode == 0
    assert cli(["train", str(CARTPOLE), *SMALL, "engine.total_steps=1280", "--resume", str(run_dir)],
               cwd=work).returncode == 0
    created = {p for p in tmp_path.rglob("*")} - before
    outside = sorted(str(p) for p in created if run_dir not in (p, *p.parents))
    assert outside == [], f"files written outside the run directory: {outside}"
    assert (run_dir / "extra" / "metrics2.jsonl").is_file()
