"""Atomic checkpoints with retention, safe loading and compatibility manifests.

A checkpoint is one file, ``ckpt-<iteration:08d>.pt``, written by :func:`torch.save` as::

    {"format": "rlightning-checkpoint", "format_version": 1,
     "meta": {"step": int, "iteration": int, "eval_return": float | None},
     "manifest": {...},   # versions, plugins, config hash (rlightning_core.run.build_manifest)
     "state": {...}}      # whatever the run needs to continue

and loaded back with ``torch.load(..., weights_only=True)``: nothing in a checkpoint is ever unpickled as an
arbitrary object (DESIGN §8). ``state`` and ``manifest`` may therefore hold only tensors, ``dict``,
``list``, ``tuple``, ``str``, ``bytes``, ``int``, ``float``, ``bool``, ``None``, ``torch.dtype``,
``torch.device`` and ``torch.Size``. Numpy arrays are *not* allowed: convert them with :func:`to_tensor_tree`
before saving and back with :func:`to_numpy_tree` after loading (dtypes round-trip exactly).
:meth:`CheckpointManager.save` checks the tree before writing and names the first offending path, so a bad
state fails at save time, not at resume.

Writes are atomic: the payload goes to a hidden temp file in the same directory, is flushed and fsynced, and
renamed over the final name; the directory is fsynced after the rename. ``index.json`` (also written
atomically) lists the checkpoints with their step, iteration and eval return, plus ``latest`` and ``best``;
it is a convenience: :meth:`CheckpointManager.latest` and :meth:`CheckpointManager.best` verify the file they
return (a complete archive with an rlightning header; tensor data is memory-mapped, not read) and fall back to
scanning the directory when the index is missing, corrupt or stale. :func:`load_checkpoint` also checks every
archive member's CRC, so flipped bits in tensor data fail loudly instead of resuming from wrong weights.

"Latest" means the highest iteration number. Retention keeps the ``keep_last`` highest iterations, the best
one (``keep_best``) and always the file just written; unreadable ``ckpt-*.pt`` files are never deleted.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import zipfile
from collections import OrderedDict
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import IO, Any

import attrs
import numpy as np

from rlightning_core._version import __version__
from rlightning_core.errors import UserError
from rlightning_core.registry import normalize_dist_name

__all__ = [
    "CHECKPOINTS_DIRNAME",
    "INDEX_NAME",
    "CheckpointError",
    "CheckpointInfo",
    "CheckpointManager",
    "check_manifest",
    "load_checkpoint",
    "resolve_checkpoint",
    "to_numpy_tree",
    "to_tensor_tree",
]

#: Name of the checkpoint directory inside a run directory.
CHECKPOINTS_DIRNAME = "checkpoints"
#: Name of the index file inside a checkpoint directory.
INDEX_NAME = "index.json"
FORMAT = "rlightning-checkpoint"
FORMAT_VERSION = 1
INDEX_FORMAT = "rlightning-checkpoint-index"
#: Core's distribution: its version is checked by major number, not as a plugin.
CORE_DISTRIBUTION = "rlightning"

_CKPT_RE = re.compile(r"^ckpt-(\d{8,})\.pt$")
_TEMP_RE = re.compile(r"^\.(ckpt-\d{8,}\.pt|index\.json)\.[0-9a-f]+\.tmp$")


class CheckpointError(UserError):
    """A checkpoint file or directory that cannot be used: missing, truncated, corrupt or unsafe."""


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
        directory: the checkpoint directory (usually ``RUN_DIR/checkpoints``); created on first save.
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
        _check_tree(state, "state")
        _check_tree(manifest, "manifest")
        score = _finite_or_none(eval_return)

        self.directory.mkdir(parents=True, exist_ok=True)
        self.cleanup_temp_files()
        path = self.path_for(iteration)
        payload = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "meta": {"step": step, "iteration": iteration, "eval_return": score},
            "manifest": dict(manifest),
            "state": dict(state),
        }
        _atomic_write(path, lambda fh: torch.save(payload, fh))

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
            if _TEMP_RE.match(child.name) and child.is_file():
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
        _atomic_write(self.index_path, lambda fh: fh.write(data))

    # -- finding -------------------------------------------------------------------------------------------

    def checkpoints(self) -> list[CheckpointInfo]:
        """Every readable checkpoint in the directory, oldest first (verified, not taken from the index)."""
        return sorted((e for e in self._known_entries() if _probe(e.path) is not None),
                      key=lambda e: e.iteration)

    def latest(self) -> Path | None:
        """The checkpoint with the highest iteration that is complete and readable, or ``None``.

        Truncated or corrupt files are skipped (the previous good one is returned); temp files are ignored.
        """
        for entry in sorted(self._known_entries(), key=lambda e: e.iteration, reverse=True):
            if _probe(entry.path) is not None:
                return entry.path
        return None

    def best(self) -> Path | None:
        """The readable checkpoint with the highest ``eval_return`` (earliest on ties).

        ``None`` when no checkpoint recorded an evaluation return.
        """
        scored = [e for e in self._known_entries() if e.eval_return is not None]
        for entry in sorted(scored, key=lambda e: (-(e.eval_return or 0.0), e.iteration)):
            meta = _probe(entry.path)
            if meta is not None and meta.get("eval_return") is not None:
                return entry.path
        return None

    def _known_entries(self) -> list[CheckpointInfo]:
        """Checkpoints from ``index.json`` plus files the index does not list (read from their ``meta``).

        Unverified: the index may name files that were since deleted or damaged; callers that return a path
        verify it with :func:`_probe`.
        """
        if not self.directory.is_dir():
            return []
        by_name = {e.path.name: e for e in self._read_index()}
        for child in self.directory.iterdir():
            match = _CKPT_RE.match(child.name)
            if child.name in by_name or match is None:
                continue
            meta = _probe(child)
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
                match = _CKPT_RE.match(row["file"])
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


# ------------------------------------------------------------------------------------------------------------
# Loading and resolving
# ------------------------------------------------------------------------------------------------------------


def load_checkpoint(path: str | Path, *, verify: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load ``(state, manifest)`` from a checkpoint file, on CPU, never unpickling arbitrary objects.

    Uses ``torch.load(path, map_location="cpu", weights_only=True)`` and accepts only files rlightning wrote
    (torch's zip format with the rlightning payload).

    Args:
        path: the checkpoint file (:func:`resolve_checkpoint` turns a run or checkpoint directory into one).
        verify: check every archive member's CRC first (reads the file twice; torch itself does not notice
            flipped bits in tensor data).

    Raises:
        CheckpointError: the file is missing, not a checkpoint, truncated or corrupt, or holds objects other
            than plain data (a file crafted to run code when unpickled is refused here, unexecuted).
    """
    import pickle

    import torch

    path = Path(path)
    if not path.is_file():
        what = "is a directory (use resolve_checkpoint)" if path.is_dir() else "does not exist"
        raise CheckpointError(f"checkpoint {path} {what}")
    if not zipfile.is_zipfile(path):
        raise CheckpointError(
            f"not a valid rlightning checkpoint: {path} (not a torch zip archive: truncated, corrupt, or "
            "written by something else)"
        )
    if verify:
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
        except Exception as exc:  # BadZipFile, EOFError, zlib.error, OSError: all mean "damaged"
            raise CheckpointError(
                f"not a valid rlightning checkpoint: {path} (corrupt archive: {_first_line(exc)})"
            ) from exc
        if bad is not None:
            raise CheckpointError(
                f"not a valid rlightning checkpoint: {path} (member {bad!r} fails its CRC check: the file is "
                "corrupt; resume from an earlier checkpoint)"
            )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"not a valid rlightning checkpoint: {path} holds objects other than tensors and plain data; "
            f"refusing to unpickle them ({_refusal_reason(exc)})"
        ) from None
    except Exception as exc:  # torch reports damaged archives as RuntimeError, EOFError, OSError, ...
        raise CheckpointError(
            f"not a valid rlightning checkpoint: {path} (truncated or corrupt: {_first_line(exc)})"
        ) from exc
    problem = _payload_problem(payload)
    if problem is not None:
        raise CheckpointError(f"not a valid rlightning checkpoint: {path} ({problem})")
    return payload["state"], payload["manifest"]


def resolve_checkpoint(path: str | Path) -> Path:
    """The checkpoint file meant by ``path``: a file, a checkpoint directory, or a run directory.

    A directory resolves to its latest readable checkpoint; a run directory to that of
    ``RUN_DIR/checkpoints``.

    Raises:
        CheckpointError: nothing exists at ``path``, or the directory holds no readable checkpoint.
    """
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint at {path}: no such file or directory")
    nested = path / CHECKPOINTS_DIRNAME
    directory = nested if nested.is_dir() else path
    found = CheckpointManager(directory).latest()
    if found is not None:
        return found
    unreadable = sorted(c.name for c in directory.iterdir() if _CKPT_RE.match(c.name))
    detail = f" ({len(unreadable)} unreadable: {', '.join(unreadable)})" if unreadable else ""
    raise CheckpointError(
        f"no readable checkpoint in {directory}{detail}; pass a run directory, its "
        f"'{CHECKPOINTS_DIRNAME}' directory or a ckpt-*.pt file"
    )


# ------------------------------------------------------------------------------------------------------------
# Manifests
# ------------------------------------------------------------------------------------------------------------


def check_manifest(manifest: Mapping[str, Any], *, expected: Mapping[str, Any]) -> list[str]:
    """Human-readable reasons a checkpoint may not fit this installation and config; empty if none.

    Both arguments are manifests as :func:`rlightning_core.run.build_manifest` writes them; the keys read are
    ``rlightning`` (core version), ``plugins`` (``{distribution: version}`` of the plugins loaded then),
    ``components`` (``{slot: {"distribution": ..., "version": ...}}``, the providers of the components the run
    used) and ``config_hash``. Each check runs only when ``expected`` has its key:

    - rlightning's major version differs (minor and patch releases keep the checkpoint layout);
    - a plugin distribution that provided a component of the checkpoint's run (all its loaded plugins when
      it records no ``components``) is missing now or has another version; plugins loaded but unused are
      not reported, and core's own distribution is covered by the version check above;
    - the config hash differs (the keys of ``training_config`` that differ are named, with both values).

    Args:
        manifest: the checkpoint's manifest (from :func:`load_checkpoint`).
        expected: the manifest of the run about to start (or of this installation).

    Returns:
        One sentence per problem, ready to print; the caller decides whether they are fatal.
    """
    problems: list[str] = []
    want_core, got_core = expected.get("rlightning"), manifest.get("rlightning")
    if want_core is not None:
        if got_core is None:
            problems.append("the checkpoint does not record which rlightning version wrote it")
        elif _major(str(got_core)) != _major(str(want_core)):
            problems.append(f"written by rlightning {got_core}, this is rlightning {want_core} (major "
                            "version differs; the state layout may have changed)")
    if "plugins" in expected:
        have = {normalize_dist_name(k): str(v) for k, v in (expected.get("plugins") or {}).items()}
        used = _plugins_used(manifest)
        if used is None:
            problems.append("the checkpoint does not record which plugins wrote it")
        for dist, (version, slots) in sorted((used or {}).items()):
            where = f" (for {', '.join(slots)})" if slots else ""
            if dist not in have:
                problems.append(f"plugin distribution {dist} {version}{where} wrote this checkpoint but is "
                                f"not installed or did not load (pip install '{dist}=={version}')")
            elif have[dist] != version:
                problems.append(f"plugin distribution {dist}{where}: checkpoint written with {version}, "
                                f"installed is {have[dist]}")
    want_hash = expected.get("config_hash")
    if want_hash is not None:
        got_hash = manifest.get("config_hash")
        if got_hash is None:
            problems.append("the checkpoint does not record a config hash")
        elif got_hash != want_hash:
            from rlightning_core.checkpoint.config_diff import config_mismatch

            problems.append(config_mismatch(manifest, expected))  # names the keys that differ
    return problems


def _plugins_used(manifest: Mapping[str, Any]) -> dict[str, tuple[str, list[str]]] | None:
    """``{distribution: (version, [slots])}`` of the external plugins a checkpoint depends on, or ``None``."""
    core = normalize_dist_name(CORE_DISTRIBUTION)
    components = manifest.get("components")
    if isinstance(components, Mapping):
        used: dict[str, tuple[str, list[str]]] = {}
        for slot, comp in components.items():
            if not isinstance(comp, Mapping) or "distribution" not in comp:
                return None
            dist = normalize_dist_name(str(comp["distribution"]))
            if dist != core:
                used.setdefault(dist, (str(comp.get("version")), []))[1].append(str(slot))
        return used
    plugins = manifest.get("plugins")
    if isinstance(plugins, Mapping):
        return {normalize_dist_name(k): (str(v), []) for k, v in plugins.items()
                if normalize_dist_name(k) != core}
    return None


# ------------------------------------------------------------------------------------------------------------
# numpy <-> tensor trees
# ------------------------------------------------------------------------------------------------------------


def to_tensor_tree(obj: Any) -> Any:
    """Convert numpy arrays and scalars in a tree of dicts/lists/tuples to CPU tensors of the same dtype.

    The result can be saved in a checkpoint. Arrays are copied (the tensor does not share memory with the
    array); numpy scalars become 0-d tensors (and come back from :func:`to_numpy_tree` as 0-d arrays).

    Raises:
        TypeError: an array whose dtype torch cannot represent (object, strings, datetimes).
    """
    import torch

    if isinstance(obj, np.ndarray | np.generic):
        arr = np.asarray(obj)
        if not arr.dtype.isnative:
            arr = arr.astype(arr.dtype.newbyteorder("="))
        try:
            return torch.from_numpy(np.array(arr, order="C", copy=True))
        except TypeError as exc:
            raise TypeError(f"numpy dtype {arr.dtype} has no torch equivalent and cannot be checkpointed; "
                            "convert it first") from exc
    if isinstance(obj, Mapping):
        return {k: to_tensor_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_tensor_tree(v) for v in obj]
    if type(obj) is tuple:
        return tuple(to_tensor_tree(v) for v in obj)
    return obj


def to_numpy_tree(obj: Any) -> Any:
    """Convert tensors in a tree of dicts/lists/tuples to numpy arrays of the same dtype.

    The inverse of :func:`to_tensor_tree`; arrays are copies, detached from the tensors.

    Raises:
        TypeError: a tensor whose dtype numpy cannot represent exactly (e.g. ``bfloat16``): it is not
            reinterpreted silently.
    """
    import torch

    if isinstance(obj, torch.Tensor):
        try:
            return obj.detach().cpu().numpy().copy()
        except TypeError as exc:
            raise TypeError(f"tensor dtype {obj.dtype} has no numpy equivalent; keep it a tensor or "
                            "convert it explicitly") from exc
    if isinstance(obj, Mapping):
        return {k: to_numpy_tree(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [to_numpy_tree(v) for v in obj]
    if type(obj) is tuple:
        return tuple(to_numpy_tree(v) for v in obj)
    return obj


# ------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------

_SCALARS = (str, bytes, int, float, bool, complex, type(None))


def _check_tree(obj: Any, where: str) -> None:
    """Raise ``TypeError`` naming the first value in ``obj`` that ``weights_only`` loading would refuse."""
    import torch

    kind = type(obj)
    if kind in _SCALARS or isinstance(obj, torch.Tensor | torch.dtype | torch.device | torch.Size):
        return
    if kind in (dict, OrderedDict):
        for key, value in obj.items():
            if type(key) not in _SCALARS:
                raise TypeError(f"{where}: key {key!r} of type {type(key).__name__} cannot be checkpointed; "
                                "use str or int keys")
            _check_tree(value, f"{where}[{key!r}]")
        return
    if kind in (list, tuple):
        for i, value in enumerate(obj):
            _check_tree(value, f"{where}[{i}]")
        return
    hint = (" (convert numpy values with rlightning_core.checkpoint.manager.to_tensor_tree)"
            if kind.__module__.split(".")[0] == "numpy" else "")
    raise TypeError(
        f"{where}: {kind.__module__}.{kind.__qualname__} cannot be stored in a checkpoint, which holds only "
        f"tensors, dicts, lists, tuples, str, bytes, int, float, bool and None{hint}"
    )


def _atomic_write(path: Path, write: Callable[[IO[bytes]], Any]) -> None:
    """Write ``path`` through a temp file in its directory: write, flush, fsync, rename, fsync the dir."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with os.fdopen(fd, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    """Make a rename durable (POSIX; other systems cannot open a directory and need not)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _probe(path: Path) -> dict[str, Any] | None:
    """The ``meta`` of a complete, readable checkpoint file, or ``None`` (missing, partial, corrupt, foreign).

    Memory-maps the file, so tensor data is not read.
    """
    import torch

    try:
        if not path.is_file() or not zipfile.is_zipfile(path):
            return None
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # any failure means "not usable"; load_checkpoint reports the reason
        return None
    if _payload_problem(payload) is not None:
        return None
    return payload["meta"]


def _payload_problem(payload: Any) -> str | None:
    """Why ``payload`` is not an rlightning checkpoint payload, or ``None`` if it is one."""
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        return "no rlightning checkpoint header"
    version = payload.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        return (f"checkpoint format version {version!r}; this rlightning ({__version__}) reads up to "
                f"{FORMAT_VERSION}: upgrade rlightning")
    meta = payload.get("meta")
    if (not isinstance(meta, dict) or not isinstance(meta.get("step"), int)
            or not isinstance(meta.get("iteration"), int)
            or not isinstance(meta.get("eval_return"), float | None)):
        return "missing or malformed 'meta'"
    for key in ("manifest", "state"):
        if not isinstance(payload.get(key), dict):
            return f"missing or malformed {key!r}"
    return None


def _best_of(entries: list[CheckpointInfo]) -> CheckpointInfo | None:
    """The entry with the highest finite eval return (earliest on ties)."""
    scored = [e for e in entries if e.eval_return is not None]
    return min(scored, key=lambda e: (-(e.eval_return or 0.0), e.iteration)) if scored else None


def _finite_or_none(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _major(version: str) -> str:
    return version.split(".", 1)[0]


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _refusal_reason(exc: BaseException) -> str:
    """The one informative line of torch's weights_only refusal (which global it refused)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    for line in text.splitlines():
        if "GLOBAL" in line or "WeightsUnpickler" in line:
            return line.strip()
    return _first_line(exc)
