"""The one atomic-write helper: every file that must never be seen half-written goes through it."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest

from rlightning_core.errors import StorageError
from rlightning_core.files import write_text_atomic

ROOT = Path(__file__).resolve().parents[2]


def test_write_text_atomic_replaces_the_file_and_leaves_no_temp_file(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("old\n")
    write_text_atomic(path, "new: ü\n", what="run config")
    assert path.read_text(encoding="utf-8") == "new: ü\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.yaml"]


def test_a_failed_write_names_the_file_keeps_the_old_one_and_removes_the_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "address.json"
    path.write_text("old\n")

    def full_disk(fd: int) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(StorageError, match=r"cannot write remote env address file .*address\.json: No space left "
                                           r"on device \(ENOSPC\)"):
        write_text_atomic(path, "new\n", what="remote env address file")
    monkeypatch.undo()
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["address.json"]


def test_no_other_module_renames_files_into_place_itself() -> None:
    """Writers call :func:`rlightning_core.files.atomic_write` instead of their own temp-file-and-rename."""
    pattern = re.compile(r"\bos\.replace\(|\bos\.rename\(|\.replace\(path\)|\bos\.fsync\(|NamedTemporaryFile")
    offenders = []
    for top in ("rlightning_core", "rlightning_cli", "plugins"):
        for source in sorted((ROOT / top).rglob("*.py")):
            if source == ROOT / "rlightning_core" / "files.py" or "tests" in source.relative_to(ROOT).parts:
                continue
            for n, line in enumerate(source.read_text(encoding="utf-8").splitlines(), 1):
                if pattern.search(line):
                    offenders.append(f"{source.relative_to(ROOT)}:{n}: {line.strip()}")
    assert offenders == []
