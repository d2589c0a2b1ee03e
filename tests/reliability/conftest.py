"""Fixtures of the reliability tests: a small CartPole run, the faulty env plugin, real CLI subprocesses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from reliability_helpers import CARTPOLE, RLIGHTNING, ROOT, SMALL, run_cli, write_plugin_dist


def _have(kind: str, name: str) -> bool:
    from rlightning_core.plugins import get_plugins

    return name in get_plugins().registry.names(kind)


@pytest.fixture(scope="session")
def training_plugins() -> None:
    """Skip when the gymnasium and ppo plugins are not installed (the core-only matrix cell)."""
    if not (_have("env", "gymnasium") and _have("policy", "ppo")):
        pytest.skip("needs the rlightning-gymnasium and rlightning-ppo plugins installed")


@pytest.fixture(scope="session")
def cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """``cli(args, timeout=, cwd=, pythonpath=, **env)``: run the console script in a subprocess."""
    assert RLIGHTNING.exists(), f"console script not found next to {sys.executable}"
    return run_cli


@pytest.fixture(scope="session")
def small_run(tmp_path_factory: pytest.TempPathFactory, training_plugins: None) -> Path:
    """A finished small CartPole run directory (config, metrics, checkpoints), made once per session."""
    run_dir = tmp_path_factory.mktemp("small") / "run"
    proc = run_cli(["train", str(CARTPOLE), *SMALL, "checkpoint.every=4", "--run-dir", str(run_dir)])
    assert proc.returncode == 0, proc.stderr
    return run_dir


@pytest.fixture(scope="session")
def faulty_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The faulty env test plugin (tests/fixtures/faulty_env_plugin.py) as an installed distribution, *not*
    on sys.path: for subprocesses (``PYTHONPATH``) and Ray workers."""
    return write_plugin_dist(tmp_path_factory.mktemp("faulty-site"), "rlightning-test-faulty",
                             "rlightning_test_faulty", ROOT / "tests" / "fixtures" / "faulty_env_plugin.py")


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 2 MiB filesystem (tmpfs) that fills up: ENOSPC as a user with a full disk meets it.

    Mounting needs root (CAP_SYS_ADMIN); elsewhere the test is skipped with the reason. Always unmounted.
    """
    mountpoint = tmp_path / "small-fs"
    mountpoint.mkdir()
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(mountpoint)],
                              capture_output=True, text=True, check=False)
    except FileNotFoundError:
        pytest.skip("cannot mount a 2 MiB tmpfs to fill: no mount command")
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a 2 MiB tmpfs to fill (needs root): {proc.stderr.strip() or proc.returncode}")
    try:
        yield mountpoint
    finally:
        if subprocess.run(["umount", str(mountpoint)], capture_output=True, check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True, check=False)
