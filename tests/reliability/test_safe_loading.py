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
    """Resuming a run directory picks the newest *loadable* checkpoint, never the planted one, and says so."""
    marker = tmp_path / "pwned"
    newest = _newest(run_copy)
    evil = _plant(run_copy / "checkpoints", marker)
    proc = cli(["train", str(CARTPOLE), *SMALL, "engine.total_steps=1280", "--resume", str(run_copy)])
    assert proc.returncode == 0, proc.stderr
    assert "resumed from" in proc.stderr and "ckpt-99999999" not in proc.stderr.split("resumed from")[1][:80]
    assert (f"checkpoint {evil} refused (holds objects other than tensors and plain data, refusing to unpickle "
            f"them: ") in proc.stderr, proc.stderr
    assert f"moved to ckpt-99999999.pt.rejected; resuming from {newest.name}" in proc.stderr
    assert not evil.exists() and evil.with_name(evil.name + ".rejected").is_file()  # the evidence is kept
    assert not marker.exists()


def _newest(run_dir: Path) -> Path:
    return max((run_dir / "checkpoints").glob("ckpt-*.pt"))


def _damage(path: Path, how: str, marker: Path) -> None:
    """Damage a real checkpoint in place, or replace it with a hostile file of the same name."""
    import pickle
    import zipfile

    data = path.read_bytes()
    if how == "crc":  # flip bytes inside the largest tensor record: the archive opens, its CRC fails
        with zipfile.ZipFile(path) as archive:
            member = max(archive.infolist(), key=lambda m: m.file_size)
        start = member.header_offset + 30 + len(member.filename.encode()) + len(member.extra)
        pos = start + member.compress_size // 2
        path.write_bytes(data[:pos] + bytes(b ^ 0xFF for b in data[pos:pos + 8]) + data[pos + 8:])
    elif how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "plain-pickle":
        path.write_bytes(pickle.dumps({"state": Evil(marker)}))
    elif how == "planted-pickle":
        path.unlink()
        _plant(path.parent, marker, iteration=int(path.name[5:13]))
    elif how == "foreign":  # a torch file, but not a checkpoint of a run
        import torch

        torch.save({"weight": torch.ones(3)}, path)
    elif how == "directory":
        path.unlink()
        path.mkdir()
        (path / "data.pkl").write_bytes(pickle.dumps(Evil(marker)))
    elif how == "device":
        path.unlink()
        path.symlink_to("/dev/zero")
    else:
        raise AssertionError(how)


HOSTILE = ["crc", "truncated", "empty", "plain-pickle", "planted-pickle", "foreign", "directory", "device"]


@pytest.mark.parametrize("how", HOSTILE)
def test_the_newest_checkpoint_that_fully_loads_is_found_past_any_damaged_file(tmp_path, caplog, how):
    """Library level, every kind of damage: refused with a reason, reported, set aside, never counted again."""
    import logging

    import torch

    from rlightning_core.checkpoint.manager import CheckpointManager, load_newest

    marker = tmp_path / "pwned"
    mgr = CheckpointManager(tmp_path / "checkpoints", keep_last=2, keep_best=False)
    sections = ("engine", "policy")
    for it in (1, 2, 3):
        mgr.save({"engine": {"iteration": it}, "policy": {"w": torch.arange(20_000.0) * it}}, step=it,
                 iteration=it, manifest={})
    newest = mgr.path_for(3)
    _damage(newest, how, marker)

    loaded = load_newest(tmp_path, required_state=sections)
    assert loaded.path == mgr.path_for(2) and loaded.state["engine"]["iteration"] == 2
    assert [r.path for r in loaded.refused] == [newest] and loaded.refused[0].reason
    with caplog.at_level(logging.WARNING, logger="rlightning"):
        moved = loaded.report_refused("resuming from", move_aside=True)
    assert moved == [newest.with_name("ckpt-00000003.pt.rejected")]
    assert [r.getMessage() for r in caplog.records] == [
        f"checkpoint {newest} refused ({loaded.refused[0].reason}), moved to ckpt-00000003.pt.rejected; "
        "resuming from ckpt-00000002.pt"]
    for it in (3, 4, 5):  # retention (keep_last=2) and the index never count or delete the refused file
        mgr.save({"engine": {"iteration": it}, "policy": {}}, step=it, iteration=it, manifest={})
    assert sorted(p.name for p in mgr.directory.iterdir()) == [
        "ckpt-00000003.pt.rejected", "ckpt-00000004.pt", "ckpt-00000005.pt", "index.json"]
    assert ".rejected" not in mgr.index_path.read_text()
    assert not marker.exists()


@pytest.mark.parametrize("how", ["crc", "truncated", "device"])
def test_resume_refuses_a_damaged_newest_checkpoint_says_so_and_keeps_it(run_copy, tmp_path, cli, how):
    """A run-dir resume takes the newest checkpoint that fully loads (flipped bytes included: it used to stop
    with exit code 2); each refused file gets one warning naming it and why, and is moved aside (never
    overwritten by the resumed run, never counted again)."""
    marker = tmp_path / "pwned"
    ckpts = run_copy / "checkpoints"
    older = sorted(ckpts.glob("ckpt-*.pt"))
    newest, previous = older[-1], older[-2]
    _damage(newest, how, marker)
    proc = cli(["train", str(CARTPOLE), *SMALL, "engine.total_steps=1280", "checkpoint.every=1",
                "--resume", str(run_copy)])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    warning = [line for line in proc.stderr.splitlines() if " refused (" in line]
    assert len(warning) == 1, proc.stderr
    assert f"checkpoint {newest} refused (" in warning[0]
    assert warning[0].endswith(f"moved to {newest.name}.rejected; resuming from {previous.name}"), warning[0]
    assert f"resumed from {previous}" in proc.stderr
    rejected = newest.with_name(newest.name + ".rejected")
    assert rejected.exists() or rejected.is_symlink()
    assert newest.is_file()  # the resumed run wrote its own checkpoint of that iteration, beside the evidence
    index = (ckpts / "index.json").read_text()
    assert ".rejected" not in index
    assert not marker.exists()


@pytest.mark.parametrize("how", ["crc", "planted-pickle"])
def test_eval_of_a_run_dir_says_which_checkpoint_it_refused(run_copy, tmp_path, cli, how):
    """``eval RUN`` uses the newest checkpoint that fully loads, says what it refused, and changes nothing."""
    marker = tmp_path / "pwned"
    older = sorted((run_copy / "checkpoints").glob("ckpt-*.pt"))
    newest, previous = older[-1], older[-2]
    _damage(newest, how, marker)
    before = sorted(p.name for p in (run_copy / "checkpoints").iterdir())
    proc = cli(["eval", str(run_copy), "-n", "1"])
    assert proc.returncode == 0, proc.stderr
    assert f"checkpoint {newest} refused (" in proc.stderr, proc.stderr
    assert f"left in place; evaluating {previous.name}" in proc.stderr
    assert f"checkpoint: {previous}" in proc.stdout
    assert sorted(p.name for p in (run_copy / "checkpoints").iterdir()) == before
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
