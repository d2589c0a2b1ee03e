"""The ``swanlab`` logger passes rlightning's conformance kit (``conformance``: rlightning's pytest plugin)."""

from __future__ import annotations


def test_swanlab_logger_conforms(conformance, tmp_path, read_swanlab):
    report = conformance.check_logger("swanlab", {"monitor": False}, run_dir=tmp_path)
    assert not report.notes
    run = read_swanlab(tmp_path)
    assert run["finished"]
    assert run["scalars"]["iteration"] == [(0, 1.0), (128, 2.0)]
