"""Atomic checkpoints with retention, safe loading and compatibility manifests.

A checkpoint is one file, ``ckpt-<iteration:08d>.pt``, written by :func:`torch.save` as::

    {"format": "rlightning-checkpoint", "format_version": 1,
     "meta": {"step": int, "iteration": int, "eval_return": float | None},
     "manifest": {...},   # versions, plugins, config hash (rlightning_core.run.build_manifest)
     "state": {...}}      # whatever the run needs to continue

and loaded back with ``torch.load(..., weights_only=True)``: nothing in a checkpoint is ever unpickled as an
arbitrary object. ``state`` and ``manifest`` may therefore hold only tensors, ``dict``,
``list``, ``tuple``, ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None``, ``torch.dtype``,
``torch.device`` and ``torch.Size``. Numpy arrays are *not* allowed: convert them with :func:`to_tensor_tree`
before saving and back with :func:`to_numpy_tree` after loading (dtypes round-trip exactly).
:meth:`CheckpointManager.save` checks the tree before writing and names the first offending path, so a bad
state fails at save time, not at resume.

The package is split by job; this module is the manager and the public import path of all of it:

- :mod:`rlightning_core.files` (shared with the run's other files): atomic writes (temp file, fsync, rename,
  fsync the directory), refused files set aside as ``*.rejected``, storage failures (a full disk) as
  ``StorageError``;
- :mod:`~rlightning_core.checkpoint.reading`: safe loading, full verification (every member's CRC, the
  payload's structure) and :func:`load_newest`, the newest checkpoint of a directory that fully loads;
- :mod:`~rlightning_core.checkpoint.manifest`: :func:`check_manifest`;
- :mod:`~rlightning_core.checkpoint.trees`: numpy <-> tensor trees.

``index.json`` (also written atomically) lists the checkpoints with their step, iteration and eval return,
plus ``latest`` and ``best``; it is a convenience: :meth:`CheckpointManager.latest` and
:meth:`CheckpointManager.best` check the file they return cheaply (a complete archive with an rlightning
header; tensor data is memory-mapped, not read) and fall back to scanning the directory when the index is
missing, corrupt or stale. Resuming and evaluating use :func:`load_newest`, which reads the whole file once
and checks every CRC, so flipped bits in tensor data are refused (and reported) instead of resumed from.

"Latest" means the highest iteration number. Retention keeps the ``keep_last`` highest iterations, the best
one (``keep_best``) and always the file just written; unreadable ``ckpt-*.pt`` files are never deleted, and
``*.rejected`` files are not checkpoints: never counted, listed or deleted.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from rlightning_core.checkpoint.manifest import CORE_DISTRIBUTION, check_manifest
from rlightning_core.checkpoint.reading import (
    CHECKPOINTS_DIRNAME,
    CKPT_RE,
    FORMAT,
    FORMAT_VERSION,
    CheckpointError,
    CheckpointRefused,
    LoadedCheckpoint,
    Refusal,
    checkpoint_directory,
    load_checkpoint,
    load_newest,
    probe,
)
from rlightning_core.checkpoint.trees import check_tree, to_numpy_tree, to_tensor_tree
from rlightning_core.errors import StorageError
from rlightning_core.files import atomic_write, describe_os_error, set_aside

__all__ = [
    "CHECKPOINTS_DIRNAME",
    "CORE_DISTRIBUTION",
    "INDEX_NAME",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointManager",
    "CheckpointRefused",
    "LoadedCheckpoint",
    "Refusal",
    "check_manifest",
    "checkpoint_directory",
    "load_checkpoint",
    "load_newest",
    "resolve_checkpoint",
    "to_numpy_tree",
    "to_tensor_tree",
]

log = logging.getLogger("rlightning")

#: Name of the index file inside a checkpoint directory.
INDEX_NAME = "index.json"
INDEX_FORMAT = "rlightning-checkpoint-index"
#: Temp files of interrupted writes (``.ckpt-00000012.pt.1a2b3c4d.tmp``, ``.index.json.1a2b3c4d.tmp``), in the
#: shape :func:`~rlightning_core.files.atomic_write` names them.
TEMP_RE = re.compile(r"^\.(ckpt-\d{8,}\.pt|index\.json)\.[0-9a-f]+\.tmp$")


@attrs.frozen(kw_only=True)
class CheckpointInfo:
    """One checkpoint on disk, as listed in ``index.json``."""

    path: Path
    step: int
    """Environment steps when it was written."""
    iteration: int
    """Training iterations when it was written (its file name carries this number)."""
    eval_return: float | None = None
    """Mean evaluation return recorded with it, if an evaluation ran (``None`` otherwise)."""

    def to_json(self) -> dict[str, Any]:
        """The ``index.json`` row (file name relative to the checkpoint directory)."""
        return {"file": self.path.name, "step": self.step, "iteration": self.iteration,
                "eval_return": self.eval_return}


# ------------------------------------------------------------------------------------------------------------
# The manager
# ------------------------------------------------------------------------------------------------------------


class CheckpointManager:
    """Writes checkpoints into one directory, keeps the newest few (and the best), and finds them again.

    Only the run's driver writes; any number of readers (``latest``, ``best``, ``load``) may look at the same
    directory meanwhile. Stale temp files from a crashed write are ignored by readers and removed by the next
    :meth:`save`.

    Args:
        directory: the checkpoint directory (usually ``RUN_DIR/checkpoints``); created by :meth:`prepare` or
            the first save.
        keep_last: how many of the newest checkpoints to keep (>= 1).
        keep_best: also keep the checkpoint with the highest ``eval_return``, however old.
    """

    def __init__(self, directory: str | Path, *, keep_last: int = 3, keep_best: bool = True) -> None:
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 1:
            raise ValueError(f"keep_last must be an integer >= 1, got {keep_last!r}")
        self.directory = Path(directory)
        self.keep_last = keep_last
        self.keep_best = keep_best

    @property
    def index_path(self) -> Path:
        """The ``index.json`` file of this directory."""
        return self.directory / INDEX_NAME

    def path_for(self, iteration: int) -> Path:
        """The file name a checkpoint of ``iteration`` gets: ``ckpt-<iteration:08d>.pt``."""
        return self.directory / f"ckpt-{iteration:08d}.pt"

    # -- writing -------------------------------------------------------------------------------------------

    def prepare(self) -> None:
        """Make the directory ready to write: create it, remove stale temp files, set aside a foreign index.

        A run calls this at its start, so a directory that cannot be written fails before any training;
        :meth:`save` does it too.

        Raises:
            CheckpointError: the directory's path is taken by a file.
            StorageError: the directory cannot be created (a read-only filesystem, no space).
        """
        if self.directory.exists() and not self.directory.is_dir():
            raise CheckpointError(f"cannot write checkpoints into {self.directory}: it is a file, not a directory; "
                                  "move it away or choose another run directory")
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the checkpoint directory {self.directory}: "
                               f"{describe_os_error(exc)}") from exc
        self.cleanup_temp_files()
        index = self.index_path
        if (index.exists() or index.is_symlink()) and not (index.is_file() or index.is_symlink()):
            moved = set_aside(index, reason="not a file")
            log.warning("%s is not a file (a directory?) and cannot be the checkpoint index: moved to %s; the "
                        "index is rebuilt from the checkpoint files", index, moved.name)

    def save(
        self,
        state: Mapping[str, Any],
        *,
        step: int,
        iteration: int,
        eval_return: float | None = None,
        manifest: Mapping[str, Any],
    ) -> Path:
        """Write one checkpoint atomically, update ``index.json`` and apply retention.

        Args:
            state: everything needed to continue the run; weights_only-loadable values only (see the module
                docstring; convert numpy arrays with :func:`to_tensor_tree`).
            step: environment steps so far.
            iteration: training iterations so far; names the file (the same iteration overwrites).
            eval_return: mean evaluation return at this point, if one was measured; ranks ``best``.
            manifest: versions, plugins and config hash (``rlightning_core.run.build_manifest``),
                checked on resume by :func:`check_manifest`.

        Returns:
            The path of the checkpoint just written (complete on disk when this returns).

        Raises:
            TypeError: ``state`` or ``manifest`` holds a value ``weights_only`` loading would refuse; the
                message names its path, e.g. ``state['obs_norm']['mean']: numpy.ndarray``.
            ValueError: ``step`` or ``iteration`` is not an integer >= 0.
            StorageError: the filesystem refused the write (e.g. the disk is full); the message names the file,
                and the previous checkpoints are untouched.
        """
        import torch

        if isinstance(iteration, bool) or not isinstance(iteration, int) or iteration < 0:
            raise ValueError(f"iteration must be an integer >= 0, got {iteration!r}")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"step must be an integer >= 0, got {step!r}")
        if not isinstance(state, Mapping):
            raise TypeError(f"state must be a dict, got {type(state).__name__}")
        if not isinstance(manifest, Mapping):
            raise TypeError(f"manifest must be a dict, got {type(manifest).__name__}")
        check_tree(state, "state")
        check_tree(manifest, "manifest")
        score = _finite_or_none(eval_return)

        self.prepare()
        path = self.path_for(iteration)
        if path.is_file() and probe(path) is None:  # a damaged or foreign file is evidence: never overwrite it
            moved = set_aside(path, reason="not a readable checkpoint")
            log.warning("checkpoint %s is not a readable checkpoint: moved to %s before writing iteration %d",
                        path, moved.name, iteration)
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "meta": {"step": step, "iteration": iteration, "eval_return": score},
            "manifest": dict(manifest),
            "state": dict(state),
        }
        atomic_write(path, lambda fh: torch.save(payload, fh), what="checkpoint")

        new = CheckpointInfo(path=path, step=step, iteration=iteration, eval_return=score)
        entries = {e.iteration: e for e in self._known_entries()}
        entries[iteration] = new
        ordered = sorted(entries.values(), key=lambda e: e.iteration)
        keep = {e.iteration for e in ordered[-self.keep_last:]} | {iteration}
        best = _best_of(ordered)
        if self.keep_best and best is not None:
            keep.add(best.iteration)
        kept = [e for e in ordered if e.iteration in keep]
        self._write_index(kept)
        for entry in ordered:  # only after the index no longer lists them
            if entry.iteration not in keep:
                with contextlib.suppress(FileNotFoundError):
                    entry.path.unlink()
        return path

    def cleanup_temp_files(self) -> list[Path]:
        """Remove temp files left by an interrupted write; returns what was removed.

        Call only from the process that writes this directory (``save`` does): a temp file may belong to a
        write in progress.
        """
        removed: list[Path] = []
        if not self.directory.is_dir():
            return removed
        for child in self.directory.iterdir():
            if TEMP_RE.match(child.name) and child.is_file():
                with contextlib.suppress(FileNotFoundError):
                    child.unlink()
                    removed.append(child)
        return removed

    def _write_index(self, kept: list[CheckpointInfo]) -> None:
        best = _best_of(kept)
        index = {
            "format": INDEX_FORMAT,
            "format_version": FORMAT_VERSION,
            "checkpoints": [e.to_json() for e in kept],
            "latest": kept[-1].path.name if kept else None,
            "best": best.path.name if best is not None else None,
        }
        data = (json.dumps(index, indent=2) + "\n").encode("utf-8")
        atomic_write(self.index_path, lambda fh: fh.write(data), what="checkpoint index")

    # -- finding -------------------------------------------------------------------------------------------

    def checkpoints(self) -> list[CheckpointInfo]:
        """Every readable checkpoint in the directory, oldest first (verified, not taken from the index)."""
        return sorted((e for e in self._known_entries() if probe(e.path) is not None),
                      key=lambda e: e.iteration)

    def latest(self) -> Path | None:
        """The checkpoint with the highest iteration that is complete and readable, or ``None``.

        Truncated, foreign and unsafe files are skipped (the previous good one is returned); temp files and
        ``*.rejected`` files are ignored. The check is cheap (tensor data is not read), so flipped bits in
        tensor data go unnoticed here: use :func:`load_newest` to get the newest checkpoint that fully loads.
        """
        for entry in sorted(self._known_entries(), key=lambda e: e.iteration, reverse=True):
            if probe(entry.path) is not None:
                return entry.path
        return None

    def best(self) -> Path | None:
        """The readable checkpoint with the highest ``eval_return`` (earliest on ties).

        ``None`` when no checkpoint recorded an evaluation return.
        """
        scored = [e for e in self._known_entries() if e.eval_return is not None]
        for entry in sorted(scored, key=lambda e: (-(e.eval_return or 0.0), e.iteration)):
            meta = probe(entry.path)
            if meta is not None and meta.get("eval_return") is not None:
                return entry.path
        return None

    def _known_entries(self) -> list[CheckpointInfo]:
        """Checkpoints from ``index.json`` plus files the index does not list (read from their ``meta``).

        Unverified: the index may name files that were since deleted or damaged; callers that return a path
        verify it with :func:`~rlightning_core.checkpoint.reading.probe`.
        """
        if not self.directory.is_dir():
            return []
        by_name = {e.path.name: e for e in self._read_index()}
        for child in self.directory.iterdir():
            match = CKPT_RE.match(child.name)
            if child.name in by_name or match is None:
                continue
            meta = probe(child)
            if meta is not None and meta["iteration"] == int(match.group(1)):
                by_name[child.name] = CheckpointInfo(path=child, step=meta["step"],
                                                     iteration=meta["iteration"],
                                                     eval_return=meta["eval_return"])
        return [e for e in by_name.values() if e.path.exists()]

    def _read_index(self) -> list[CheckpointInfo]:
        """The entries of ``index.json``; an unreadable or malformed index counts as empty."""
        try:
            index = json.loads(self.index_path.read_text(encoding="utf-8"))
            rows = index["checkpoints"] if index.get("format") == INDEX_FORMAT else []
            entries = []
            for row in rows:
                match = CKPT_RE.match(row["file"])
                if match is None or int(match.group(1)) != row["iteration"]:
                    return []
                entries.append(CheckpointInfo(path=self.directory / row["file"], step=int(row["step"]),
                                              iteration=int(row["iteration"]),
                                              eval_return=_finite_or_none(row["eval_return"])))
            return entries
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            return []

    # -- loading -------------------------------------------------------------------------------------------

    @staticmethod
    def load(path: str | Path, *, verify: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
        """Load ``(state, manifest)`` from a checkpoint file safely; see :func:`load_checkpoint`."""
        return load_checkpoint(path, verify=verify)


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint file meant by ``path``: a file, a checkpoint directory, or a run directory.

    A directory resolves to its latest readable checkpoint (:meth:`CheckpointManager.latest`: a cheap check
    that does not read tensor data); a run directory to that of ``RUN_DIR/checkpoints``. To load the newest
    checkpoint that fully loads, CRC-checked, use :func:`load_newest` (what ``--resume`` and ``eval`` do).

    Raises:
        CheckpointError: nothing exists at ``path``, or the directory holds no readable checkpoint.
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint at {path}: no such file or directory")
    directory = checkpoint_directory(path)
    found = CheckpointManager(directory).latest()
    if found is not None:
        return found
    unreadable = sorted(c.name for c in directory.iterdir() if CKPT_RE.match(c.name))
    detail = f" ({len(unreadable)} unreadable: {', '.join(unreadable)})" if unreadable else ""
    raise CheckpointError(
        f"no readable checkpoint in {directory}{detail}; pass a run directory, its "
        f"'{CHECKPOINTS_DIRNAME}' directory or a ckpt-*.pt file"
    )


# ------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------


def _best_of(entries: list[CheckpointInfo]) -> CheckpointInfo | None:
    """The entry with the highest finite eval return (earliest on ties)."""
    scored = [e for e in entries if e.eval_return is not None]
    return min(scored, key=lambda e: (-(e.eval_return or 0.0), e.iteration)) if scored else None


def _finite_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) else None
