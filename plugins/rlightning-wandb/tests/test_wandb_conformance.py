"""The ``wandb`` logger passes rlightning's conformance kit (``conformance``: rlightning's pytest plugin)."""

from __future__ import annotations

from rlightning_wandb import read_offline_history


def test_wandb_logger_conforms(conformance, tmp_path):
    report = conformance.check_logger("wandb", {"mode": "offline"}, run_dir=tmp_path)
    assert not report.notes
    rows = read_offline_history(tmp_path)
    assert [row["_step"] for row in rows] == [0, 128, 256]
