"""The ``tensorboard`` logger passes rlightning's conformance kit (``conformance``: rlightning's pytest plugin)."""

from __future__ import annotations


def test_tensorboard_logger_conforms(conformance, tmp_path):
    report = conformance.check_logger("tensorboard", {"subdir": "tb"}, run_dir=tmp_path)
    assert (tmp_path / "tb").is_dir()
    assert not report.notes
