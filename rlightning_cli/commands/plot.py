"""``rlightning plot RUN_DIR...``: learning curves from run directories, as a PNG.

Runs whose ``config.yaml`` is the same apart from ``seed``, ``run_dir`` and ``name`` form one group, drawn as
the mean over its runs with a band of ± one standard deviation. x is ``step`` (env steps) from
``metrics.jsonl``; each run is interpolated onto the union of its group's steps, within its own range.
matplotlib is optional and imported only here.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import click

from rlightning_core.errors import UserError

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DEFAULT_METRICS", "Run", "group_curve", "group_runs", "load_run", "plot"]

#: Metrics tried in order when ``--metric`` is not given.
DEFAULT_METRICS = ("eval/episode_return_mean", "rollout/episode_return_mean")
#: Config keys that differ between seeds of one experiment and are ignored when grouping runs.
IGNORED_KEYS = ("seed", "run_dir", "name")


@attrs.define
class Run:
    """One run directory: its metrics rows and what groups it with other runs."""

    path: Path
    rows: list[dict[str, Any]]
    group: str
    """Hash of ``config.yaml`` without :data:`IGNORED_KEYS` (the directory itself when it has no config)."""
    name: str
    seed: Any = None

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """``(steps, values)`` of ``metric`` (rows without it, or with ``null``, are skipped)."""
        import numpy as np

        pts = [(r["step"], r[metric]) for r in self.rows if isinstance(r.get(metric), int | float)]
        pts.sort(key=lambda p: p[0])
        return np.array([p[0] for p in pts], dtype=float), np.array([p[1] for p in pts], dtype=float)


def load_run(path: str | Path) -> Run:
    """Read ``metrics.jsonl`` (and ``config.yaml`` when present) of a run directory.

    Raises:
        UserError: no ``metrics.jsonl`` in ``path``.
    """
    import yaml

    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise UserError(f"{path} is not a run directory: it has no metrics.jsonl")
    rows = []
    for line in metrics.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line being written by a live run
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    config: dict[str, Any] = {}
    cfg_file = path / "config.yaml"
    if cfg_file.is_file():
        loaded = yaml.safe_load(cfg_file.read_text(encoding="utf-8"))
        config = loaded if isinstance(loaded, dict) else {}
    if config:
        kept = {k: v for k, v in config.items() if k not in IGNORED_KEYS}
        group = hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()[:8]
    else:
        group = str(path.resolve())
    name = str(config.get("name") or path.name)
    return Run(path=path, rows=rows, group=group, name=name, seed=config.get("seed"))


def group_runs(runs: list[Run]) -> dict[str, list[Run]]:
    """Runs by group, in the order groups first appear."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    return groups


def group_curve(runs: list[Run], metric: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(steps, mean, std, count)`` of ``metric`` over the runs of one group.

    Each run is linearly interpolated onto the union of the group's steps inside its own step range; at each
    step the mean and (population) standard deviation are taken over the runs that cover it.
    """
    import numpy as np

    series = [r.series(metric) for r in runs]
    series = [(x, y) for x, y in series if len(x)]
    if not series:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    steps = np.unique(np.concatenate([x for x, _ in series]))
    grid = np.full((len(series), len(steps)), np.nan)
    for i, (x, y) in enumerate(series):
        inside = (steps >= x[0]) & (steps <= x[-1])
        grid[i, inside] = np.interp(steps[inside], x, y)
    count = np.sum(~np.isnan(grid), axis=0)
    mean = np.nanmean(grid, axis=0)
    std = np.nanstd(grid, axis=0)
    return steps, mean, std, count


def _pick_metric(runs: list[Run], metric: str | None) -> str:
    present = {k for r in runs for row in r.rows for k, v in row.items() if isinstance(v, int | float)}
    if metric is not None:
        if metric not in present:
            raise UserError(f"no run has metric {metric!r}; available: {', '.join(sorted(present - {'step'}))}")
        return metric
    for candidate in DEFAULT_METRICS:
        if candidate in present:
            return candidate
    raise UserError(f"none of {', '.join(DEFAULT_METRICS)} was logged; pick one with --metric from: "
                    f"{', '.join(sorted(present - {'step'})) or '(no metrics yet)'}")


@click.command("plot")
@click.argument("run_dirs", nargs=-1, required=True, metavar="RUN_DIR...",
                type=click.Path(exists=True, file_okay=False))
@click.option("--metric", "-m", default=None,
              help="Metric to plot (default: eval/episode_return_mean, else rollout/episode_return_mean).")
@click.option("--output", "-o", default="learning_curves.png", show_default=True, type=click.Path(dir_okay=False),
              help="PNG file to write.")
@click.option("--title", default=None, help="Figure title (default: the metric).")
def plot(run_dirs: tuple[str, ...], metric: str | None, output: str, title: str | None) -> int:
    """Plot learning curves of RUN_DIRs; runs that differ only in seed are averaged (mean ± std)."""
    from rlightning_core.dependencies import import_module

    matplotlib = import_module("matplotlib", pip="rlightning[plot]", needed_by="rlightning plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = [load_run(d) for d in run_dirs]
    chosen = _pick_metric(runs, metric)
    groups = group_runs(runs)
    names = [g[0].name for g in groups.values()]
    fig, ax = plt.subplots(figsize=(8, 4.8), dpi=100)
    for i, (key, members) in enumerate(groups.items()):
        steps, mean, std, _count = group_curve(members, chosen)
        if not len(steps):
            click.echo(f"note: {members[0].name}: no {chosen} values", err=True)
            continue
        color = f"C{i % 10}"
        label = members[0].name if names.count(members[0].name) == 1 else f"{members[0].name} [{key[:8]}]"
        label += f" ({len(members)} seeds)" if len(members) > 1 else ""
        ax.plot(steps, mean, color=color, linewidth=2, label=label)
        if len(members) > 1:
            ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.25, linewidth=0)
    ax.set_xlabel("env steps")
    ax.set_ylabel(chosen)
    ax.set_title(title or chosen)
    ax.grid(True, alpha=0.3)
    if ax.lines:
        ax.legend(loc="best")
    fig.tight_layout()
    out = Path(output)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)
    plt.close(fig)
    click.echo(f"Wrote {out} ({chosen}; {len(runs)} run(s) in {len(groups)} group(s))")
    return 0
