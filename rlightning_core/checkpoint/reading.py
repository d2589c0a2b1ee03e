"""Reading checkpoints back: safe loading, full verification, and the newest checkpoint that fully loads.

Nothing in a checkpoint is ever unpickled as an arbitrary object: files load with
``torch.load(..., weights_only=True)``, so a file crafted to run code is refused unexecuted.

Two levels of checking, chosen by cost:

- :func:`probe` (listing, ``latest``, ``best``, retention): the file is a zip archive whose pickle loads
  weights-only with an rlightning header; tensor data is memory-mapped, not read. Cheap at any size, but blind
  to flipped bits in tensor data.
- :func:`load_checkpoint` (resume, eval): every archive member's CRC is checked (a full read), then the payload
  is loaded and its structure checked. :func:`load_newest` applies it to a directory, newest first, and returns
  the first checkpoint that fully loads together with the files it refused, so a resume or an evaluation
  reads the big file once and never silently skips one.
"""

from __future__ import annotations

import logging
import pickle
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

from rlightning_core._version import __version__
from rlightning_core.errors import UserError
from rlightning_core.files import set_aside

__all__ = [
    "CHECKPOINTS_DIRNAME",
    "CheckpointError",
    "CheckpointRefused",
    "LoadedCheckpoint",
    "Refusal",
    "checkpoint_directory",
    "load_checkpoint",
    "load_newest",
    "probe",
]

log = logging.getLogger("rlightning")

#: Name of the checkpoint directory inside a run directory.
CHECKPOINTS_DIRNAME = "checkpoints"
FORMAT = "rlightning-checkpoint"
FORMAT_VERSION = 1
#: ``ckpt-<iteration:08d>.pt``: the only names that count as checkpoints (``*.rejected`` files do not).
CKPT_RE = re.compile(r"^ckpt-(\d{8,})\.pt$")


class CheckpointError(UserError):
    """A checkpoint file or directory that cannot be used: missing, truncated, corrupt or unsafe."""


class CheckpointRefused(CheckpointError):
    """One checkpoint file refused: ``path`` and a short ``reason`` (``CRC error in archive/data/3``)."""

    def __init__(self, path: Path, reason: str, detail: str | None = None) -> None:
        self.path = path
        self.reason = reason
        super().__init__(detail or f"not a valid rlightning checkpoint: {path} ({reason})")


@attrs.frozen
class Refusal:
    """A checkpoint file that :func:`load_newest` passed over, and why."""

    path: Path
    reason: str


@attrs.frozen
class LoadedCheckpoint:
    """A checkpoint that fully loaded, with the newer files that were refused on the way to it."""

    path: Path
    state: dict[str, Any]
    manifest: dict[str, Any]
    meta: dict[str, Any]
    """``step``, ``iteration`` and ``eval_return`` recorded with it."""
    refused: tuple[Refusal, ...] = ()

    def report_refused(self, doing: str, *, move_aside: bool) -> list[Path]:
        """One warning per refused file; with ``move_aside`` each is renamed ``<name>.rejected`` first.

        A process about to write the directory (a resume) moves them aside, so they are kept as evidence and
        never overwritten, deleted or chosen again; a reader (``eval``) leaves the directory as it is.

        Args:
            doing: what happens instead, e.g. ``"resuming from"``; the warning ends ``<doing> <file name>``.
            move_aside: rename the refused files.

        Returns:
            The new paths of the files moved aside.
        """
        moved: list[Path] = []
        for refusal in self.refused:
            where = "left in place"
            if move_aside and (refusal.path.exists() or refusal.path.is_symlink()):
                target = set_aside(refusal.path, reason=refusal.reason)
                moved.append(target)
                where = f"moved to {target.name}"
            log.warning("checkpoint %s refused (%s), %s; %s %s", refusal.path, refusal.reason, where, doing,
                        self.path.name)
        return moved


def checkpoint_directory(path: Path) -> Path:
    """The checkpoint directory meant by a directory: ``path/checkpoints`` if it exists, else ``path``."""
    nested = path / CHECKPOINTS_DIRNAME
    return nested if nested.is_dir() else path


def load_checkpoint(path: str | Path, *, verify: bool = True) -> tuple[dict[str, Any], dict[str, Any]]:
    """Load ``(state, manifest)`` from a checkpoint file, on CPU, never unpickling arbitrary objects.

    Uses ``torch.load(path, map_location="cpu", weights_only=True)`` and accepts only files rlightning wrote
    (torch's zip format with the rlightning payload).

    Args:
        path: the checkpoint file (:func:`load_newest` finds the newest loadable one in a directory).
        verify: check every archive member's CRC first (reads the file twice; torch itself does not notice
            flipped bits in tensor data).

    Raises:
        CheckpointError: the file is missing, not a checkpoint, truncated or corrupt, or holds objects other
            than plain data (a file crafted to run code when unpickled is refused here, unexecuted).
    """
    payload = _load_payload(Path(path), verify=verify)
    return payload["state"], payload["manifest"]


def load_newest(path: str | Path, *, required_state: Sequence[str] = ()) -> LoadedCheckpoint:
    """The newest checkpoint meant by ``path`` that fully loads: a file, a checkpoint or a run directory.

    A file must load itself (no fallback). In a directory, ``ckpt-*.pt`` files are tried from the highest
    iteration down; each is CRC-checked, loaded weights-only and structurally checked (header, ``meta``
    matching the file name, the ``required_state`` sections), and the first that passes is returned with
    every newer file it passed over (see :meth:`LoadedCheckpoint.report_refused`). Nothing is moved or
    deleted here. A file that disappears while it is read (retention in a live run) is skipped, not refused.

    Args:
        path: a checkpoint file, a checkpoint directory, or a run directory (its ``checkpoints``).
        required_state: top-level ``state`` sections the caller needs (an engine's ``engine``, ``rng`` ...).

    Raises:
        CheckpointError: nothing exists at ``path``, the file does not load, or no file in the directory does
            (each refused file is named with its reason).
    """
    path = Path(path)
    if path.is_file():
        payload = _load_payload(path, verify=True)
        _check_sections(path, payload, required_state)
        return LoadedCheckpoint(path=path, state=payload["state"], manifest=payload["manifest"],
                                meta=payload["meta"])
    if not path.is_dir():
        raise CheckpointError(f"no checkpoint at {path}: no such file or directory")
    directory = checkpoint_directory(path)
    numbered = sorted(((int(m.group(1)), c) for c in directory.iterdir() if (m := CKPT_RE.match(c.name))),
                      key=lambda pair: pair[0], reverse=True)
    refused: list[Refusal] = []
    for number, candidate in numbered:
        try:
            payload = _load_payload(candidate, verify=True)
            if payload["meta"]["iteration"] != number:
                raise CheckpointRefused(candidate, f"its meta says iteration {payload['meta']['iteration']}, "
                                                   f"its name {number}")
            _check_sections(candidate, payload, required_state)
        except CheckpointRefused as exc:
            if candidate.exists() or candidate.is_symlink():
                refused.append(Refusal(path=candidate, reason=exc.reason))
            continue
        except CheckpointError:  # vanished between listing and reading
            continue
        return LoadedCheckpoint(path=candidate, state=payload["state"], manifest=payload["manifest"],
                                meta=payload["meta"], refused=tuple(refused))
    detail = (f" ({len(refused)} unreadable: " + "; ".join(f"{r.path.name}: {r.reason}" for r in refused) + ")"
              if refused else "")
    raise CheckpointError(
        f"no readable checkpoint in {directory}{detail}; pass a run directory, its "
        f"'{CHECKPOINTS_DIRNAME}' directory or a ckpt-*.pt file"
    )


def probe(path: Path) -> dict[str, Any] | None:
    """The ``meta`` of a complete, readable checkpoint file, or ``None`` (missing, partial, corrupt, foreign).

    Memory-maps the file, so tensor data is not read (and flipped bits in it are not noticed: loading does).
    """
    import torch

    try:
        if not path.is_file() or not zipfile.is_zipfile(path):
            return None
        payload = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception:  # any failure means "not usable"; load_checkpoint reports the reason
        return None
    if payload_problem(payload) is not None:
        return None
    return payload["meta"]


def payload_problem(payload: Any) -> str | None:
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


# ------------------------------------------------------------------------------------------------------------
# Helpers
# ------------------------------------------------------------------------------------------------------------


def _load_payload(path: Path, *, verify: bool) -> dict[str, Any]:
    """The checked payload of ``path``; :class:`CheckpointRefused` (a short reason) when it is not usable."""
    import torch

    if not path.is_file():
        if not (path.exists() or path.is_symlink()):
            raise CheckpointError(f"checkpoint {path} does not exist")
        what = ("is a directory (use load_newest or resolve_checkpoint)" if path.is_dir() else
                "is not a regular file (a device, a pipe or a dangling link)")
        raise CheckpointRefused(path, what.split(" (use")[0], f"checkpoint {path} {what}")
    if not zipfile.is_zipfile(path):
        raise CheckpointRefused(path, "not a torch zip archive: truncated, corrupt, or written by something else")
    if verify:
        try:
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
        except Exception as exc:  # BadZipFile, EOFError, zlib.error, OSError: all mean "damaged"
            raise CheckpointRefused(path, f"corrupt archive: {_first_line(exc)}") from exc
        if bad is not None:
            raise CheckpointRefused(
                path, f"CRC error in {bad}",
                f"not a valid rlightning checkpoint: {path} (member {bad!r} fails its CRC check: the file is "
                "corrupt; resume from an earlier checkpoint)",
            )
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = _refusal_reason(exc)
        raise CheckpointRefused(
            path, f"holds objects other than tensors and plain data, refusing to unpickle them: {reason}",
            f"not a valid rlightning checkpoint: {path} holds objects other than tensors and plain data; "
            f"refusing to unpickle them ({reason})",
        ) from None
    except Exception as exc:  # torch reports damaged archives as RuntimeError, EOFError, OSError, ...
        raise CheckpointRefused(path, f"truncated or corrupt: {_first_line(exc)}") from exc
    problem = payload_problem(payload)
    if problem is not None:
        raise CheckpointRefused(path, problem)
    return payload


def _check_sections(path: Path, payload: dict[str, Any], required: Sequence[str]) -> None:
    missing = [key for key in required if key not in payload["state"]]
    if missing:
        raise CheckpointRefused(path, f"its state lacks {', '.join(repr(k) for k in missing)}: not written by "
                                      "this kind of run")


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
