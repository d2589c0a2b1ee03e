"""The end-of-sweep summary: a table of trials (CSV and Markdown) and a plot of the metric over trials."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import attrs

__all__ = ["SUMMARY_CSV", "SUMMARY_MD", "SUMMARY_PNG", "TrialRow", "best_row", "write_summary"]

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
SUMMARY_PNG = "summary.png"


@attrs.define
class TrialRow:
    """One trial: its number, status (COMPLETE, PRUNED, FAIL, ...), final metric, wall time, values, run dir."""

    number: int
    status: str
    value: float | None
    wall_s: float | None
    params: dict[str, Any]
    run_dir: str = ""
    error: str = ""


def best_row(rows: Sequence[TrialRow], direction: str) -> TrialRow | None:
    """The complete trial with the best metric (``None`` when none completed)."""
    done = [r for r in rows if r.status == "COMPLETE" and r.value is not None]
    if not done:
        return None
    return (max if direction == "maximize" else min)(done, key=lambda r: float(r.value))  # type: ignore[arg-type]


def _fmt(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def write_summary(sweep_dir: Path, rows: Sequence[TrialRow], *, metric: str, direction: str) -> list[Path]:
    """Write ``summary.csv``, ``summary.md`` and (with matplotlib) ``summary.png``; returns the files written."""
    sweep_dir.mkdir(parents=True, exist_ok=True)
    keys = list(dict.fromkeys(k for r in rows for k in r.params))
    rows = sorted(rows, key=lambda r: r.number)
    best = best_row(rows, direction)
    header = ["trial", "status", metric, "wall_s", *keys, "run_dir", "error"]
    csv_path = sweep_dir / SUMMARY_CSV
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        for r in rows:
            w.writerow([r.number, r.status, "" if r.value is None else r.value,
                        "" if r.wall_s is None else round(r.wall_s, 2),
                        *("" if r.params.get(k) is None else r.params[k] for k in keys), r.run_dir, r.error])
    lines = [f"# Sweep summary ({direction} {metric})", ""]
    if best is not None:
        lines += [f"Best: trial {best.number}, {metric} = {_fmt(best.value)} ({best.run_dir})", ""]
    counts = {s: sum(1 for r in rows if r.status == s) for s in dict.fromkeys(r.status for r in rows)}
    lines += [", ".join(f"{n} {s.lower()}" for s, n in counts.items()), ""]
    lines.append("| " + " | ".join(["trial", "status", metric, "wall (s)", *keys]) + " |")
    lines.append("|" + "---|" * (4 + len(keys)))
    for r in rows:
        mark = " (best)" if best is not None and r.number == best.number else ""
        cells = [f"{r.number}{mark}", r.status, _fmt(r.value), _fmt(r.wall_s), *(_fmt(r.params.get(k)) for k in keys)]
        lines.append("| " + " | ".join(cells) + " |")
    md_path = sweep_dir / SUMMARY_MD
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    written = [csv_path, md_path]
    png = _plot(sweep_dir / SUMMARY_PNG, rows, metric=metric, direction=direction)
    if png is not None:
        written.append(png)
    return written


def _plot(path: Path, rows: Sequence[TrialRow], *, metric: str, direction: str) -> Path | None:
    """Metric per trial (one marker per status) and the best so far; ``None`` without matplotlib."""
    from rlightning_core.dependencies import is_installed

    if not is_installed("matplotlib"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4))
    markers = {"COMPLETE": ("o", "tab:blue"), "PRUNED": ("x", "tab:orange")}
    for status, (marker, color) in markers.items():
        pts = [(r.number, r.value) for r in rows if r.status == status and r.value is not None]
        if pts:
            ax.scatter(*zip(*pts, strict=True), marker=marker, color=color, label=status.lower())
    best: list[tuple[int, float]] = []
    cur = math.nan
    for r in rows:
        if r.status == "COMPLETE" and r.value is not None:
            v = float(r.value)
            better = v > cur if direction == "maximize" else v < cur
            cur = v if math.isnan(cur) or better else cur
        if not math.isnan(cur):
            best.append((r.number, cur))
    if best:
        ax.step(*zip(*best, strict=True), where="post", color="tab:green", label="best so far")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.set_title("sweep")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
