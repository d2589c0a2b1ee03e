"""``overlay_venv``: a throwaway virtual environment on top of this interpreter's packages.

For end-to-end tests of plugin distributions: ``pip install -e`` a plugin into the overlay (fast: no
downloads, no build isolation) and run commands with its python, while this environment stays untouched::

    python = overlay_venv(tmp_path / "venv")
    pip_install(python, "-e", "rlightning-gridworld")
    subprocess.run([python, "-m", "rlightning_cli", "list-plugins"], check=True)
"""

from __future__ import annotations

import os
import site
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

__all__ = ["overlay_venv", "pip_install"]


def overlay_venv(path: str | Path) -> Path:
    """Create a venv at ``path`` that also sees every package of the running interpreter; returns its python.

    The venv has no pip of its own (:func:`pip_install` drives this interpreter's pip). A ``.pth`` file adds
    the running interpreter's site-packages with ``site.addsitedir``, so their own ``.pth`` files (editable
    installs) work too; packages installed into the overlay come first.
    """
    path = Path(path)
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt", clear=True).create(path)
    python = path / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    purelib = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    outer = [*site.getsitepackages(), sysconfig.get_paths()["purelib"]]
    lines = [f"import site; site.addsitedir({p!r})" for p in dict.fromkeys(outer) if Path(p).is_dir()]
    Path(purelib, "_rlightning_overlay.pth").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return python


def pip_install(python: str | Path, *args: str, cwd: str | Path | None = None,
                timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``pip install --no-deps --no-build-isolation ARGS`` into the environment of ``python``.

    Args:
        python: the interpreter of the target environment (e.g. from :func:`overlay_venv`).
        *args: what to install, e.g. ``"-e", "rlightning-gridworld"``.
        cwd: directory relative paths in ``args`` are read from.
        timeout: seconds before pip is stopped.

    Raises:
        RuntimeError: pip failed; the message ends with pip's output.
    """
    cmd = [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-build-isolation",
           "--disable-pip-version-check", "-q", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout, cwd=cwd)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install {' '.join(args)} failed:\n{proc.stdout[-2000:]}{proc.stderr[-3000:]}")
    return proc
