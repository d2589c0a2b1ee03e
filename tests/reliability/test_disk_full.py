"""A full disk, for real: the run directory on a 2 MiB tmpfs that fills up (``ENOSPC``).

A full disk is an environment failure: the CLI says which file could not be written and why, names the last
good checkpoint (intact), exits 1 without a traceback, and ``metrics.jsonl`` ends with a complete line.
The disk is filled by a test plugin's ``on_checkpoint`` hook, so the failure happens at the same place on any
machine.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from reliability_helpers import CARTPOLE, ROOT, SMALL, run_cli, write_plugin_dist

pytestmark = pytest.mark.slow


def fill_disk(directory: Path, spare: int = 0) -> Path:
    """Fill the filesystem of ``directory``, leaving ``spare`` bytes (whole pages) free; returns the ballast."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("disk_filler", ROOT / "tests" / "fixtures" / "disk_filler_plugin.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    ballast = directory / "ballast"
    module.fill(ballast, spare)
    return ballast


def complete_lines(path: Path) -> list[dict]:
    """Every line of a JSONL file, parsed; fails if the file ends in the middle of a line."""
    data = path.read_bytes()
    assert data.endswith(b"\n"), f"{path} ends with an incomplete line: {data[-80:]!r}"
    return [json.loads(line) for line in data.decode("utf-8").splitlines()]


# -- the pieces ----------------------------------------------------------------------------------------------


def test_jsonl_logger_on_a_full_disk_keeps_whole_lines(small_tmpfs: Path) -> None:
    from rlightning_core.errors import StorageError
    from rlightning_core.logging.jsonl import JsonlLogger, JsonlParams

    logger = JsonlLogger(JsonlParams(), run_dir=small_tmpfs)
    logger.log(0, {"loss/policy": 1.0})
    fill_disk(small_tmpfs)
    row = {f"metric/{i:03d}": float(i) for i in range(40)}  # ~700 bytes: a few lines fill the last page
    with pytest.raises(StorageError, match=r"cannot write metrics to .*metrics\.jsonl: No space left on device"):
        for step in range(1, 10_000):
            logger.log(step, row)
    logger.close()
    rows = complete_lines(small_tmpfs / "metrics.jsonl")
    assert [r["step"] for r in rows] == list(range(len(rows)))  # nothing lost in the middle, nothing doubled


def test_jsonl_logger_cuts_an_incomplete_last_line_on_reopen(tmp_path: Path) -> None:
    from rlightning_core.logging.jsonl import JsonlLogger, JsonlParams

    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"step": 1, "a": 1.0}\n{"step": 2, "a"')  # a machine that lost power mid-line
    logger = JsonlLogger(JsonlParams(), run_dir=tmp_path)
    logger.log(3, {"a": 3.0})
    logger.close()
    assert [r["step"] for r in complete_lines(path)] == [1, 3]


def test_checkpoint_save_on_a_full_disk_names_the_file_and_keeps_the_last(small_tmpfs: Path) -> None:
    import torch

    from rlightning_core.checkpoint.manager import CheckpointManager, load_checkpoint
    from rlightning_core.errors import StorageError

    mgr = CheckpointManager(small_tmpfs / "checkpoints")
    state = {"w": torch.arange(100_000, dtype=torch.float32)}  # 400 KB
    good = mgr.save(state, step=1, iteration=1, manifest={})
    fill_disk(small_tmpfs, spare=64 * 1024)
    with pytest.raises(StorageError) as info:
        mgr.save(state, step=2, iteration=2, manifest={})
    message = str(info.value)
    assert "ckpt-00000002.pt" in message and "No space left on device (ENOSPC)" in message, message
    assert "inline_container" not in message
    assert sorted(p.name for p in mgr.directory.iterdir()) == ["ckpt-00000001.pt", "index.json"]  # no temp file
    assert mgr.latest() == good
    assert torch.equal(load_checkpoint(good)[0]["w"], state["w"])


# -- the CLI -------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def filler_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_plugin_dist(tmp_path_factory.mktemp("filler-site"), "rlightning-test-disk-filler",
                             "rlightning_test_disk_filler", ROOT / "tests" / "fixtures" / "disk_filler_plugin.py")


def _train_until_full(fs: Path, site: Path, spare: int, *overrides: str):
    run_dir = fs / "run"
    proc = run_cli(["train", str(CARTPOLE), *SMALL, "engine.total_steps=8192", *overrides, "--run-dir",
                    str(run_dir)], pythonpath=str(site), DISK_FILLER_BALLAST=str(fs / "ballast"),
                   DISK_FILLER_SPARE_BYTES=str(spare))
    return run_dir, proc


def test_cli_checkpoint_on_a_full_disk(small_tmpfs, filler_site, training_plugins):
    """The second checkpoint does not fit: a message naming it and the first, which is intact and resumes."""
    from rlightning_core.checkpoint.manager import load_checkpoint

    run_dir, proc = _train_until_full(small_tmpfs, filler_site, 64 * 1024, "checkpoint.every=1")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "a bug" not in proc.stderr, proc.stderr
    ckpts = run_dir / "checkpoints"
    assert f"cannot write checkpoint {ckpts / 'ckpt-00000002.pt'}: No space left on device" in proc.stderr
    assert f"the last good checkpoint is {ckpts / 'ckpt-00000001.pt'}" in proc.stderr, proc.stderr
    assert f"--resume {run_dir}" in proc.stderr
    assert sorted(p.name for p in ckpts.iterdir()) == ["ckpt-00000001.pt", "index.json"]
    state, _ = load_checkpoint(ckpts / "ckpt-00000001.pt")
    assert state["engine"]["iteration"] == 1
    complete_lines(run_dir / "metrics.jsonl")

    (small_tmpfs / "ballast").unlink()  # space again: the run resumes from the checkpoint it named
    proc = run_cli(["train", str(CARTPOLE), *SMALL, "engine.total_steps=512", "checkpoint.every=1", "--resume",
                    str(run_dir)])
    assert proc.returncode == 0, proc.stderr
    assert f"resumed from {ckpts / 'ckpt-00000001.pt'}" in proc.stderr


def test_cli_metrics_on_a_full_disk(small_tmpfs, filler_site, training_plugins):
    """The disk fills at the checkpoint of iteration 8; a metrics line of the next iterations does not fit."""
    run_dir, proc = _train_until_full(small_tmpfs, filler_site, 0, "checkpoint.every=8")
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "a bug" not in proc.stderr, proc.stderr
    metrics = run_dir / "metrics.jsonl"
    assert f"cannot write metrics to {metrics}: No space left on device" in proc.stderr, proc.stderr
    assert f"the last good checkpoint is {run_dir / 'checkpoints' / 'ckpt-00000008.pt'}" in proc.stderr
    rows = complete_lines(metrics)
    iterations = [r["iteration"] for r in rows if "iteration" in r]
    assert iterations == list(range(1, len(iterations) + 1)) and 8 <= iterations[-1] < 16
