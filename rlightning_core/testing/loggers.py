"""``check_logger``: does a logger component take metrics rows and close cleanly?"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlightning_core.testing._common import ConformanceReport, resolve_subject

__all__ = ["check_logger"]


def check_logger(component: str | Callable[..., Any], params: Any = None, *, config: type | None = None,
                 registry: Any = None, run_dir: str | Path | None = None) -> ConformanceReport:
    """Check a logger: it builds with ``run_dir=``, takes the rows a run produces, and closes.

    Rows hold floats, NaN and infinities, and many keys, as the run's metrics hub sends them.

    Args:
        component: a registered logger name, or the factory itself.
        params: its params (a mapping as in a config file, an instance, or ``None`` for the defaults).
        config: the params class when ``component`` is a factory.
        registry: the registry to resolve a name against.
        run_dir: the run directory to give it (default: a temporary one).

    Raises:
        ConformanceError: the first broken rule, with the fix.
    """
    s = resolve_subject("logger", component, params, config=config, registry=registry)
    with tempfile.TemporaryDirectory(prefix="rlightning-logger-") as tmp:
        path = Path(run_dir) if run_dir is not None else Path(tmp)
        logger = s.build("the factory (run_dir=...)", run_dir=path)
        for method in ("log", "close"):
            if not callable(getattr(logger, method, None)):
                s.fail(f"the factory returned a {type(logger).__name__} without {method}()",
                       "implement log(step: int, metrics: dict[str, float]) and close()")
        s.ok("builds with (params, run_dir=) and has log() and close()")
        rows = [  # what the run's metrics hub sends: float values only
            (0, {"rollout/episode_return_mean": 1.5, "iteration": 1.0}),
            (128, {"loss/policy": float("nan"), "perf/sps": 1e4, "stats/kl": float("inf"), "iteration": 2.0}),
            (256, {f"env/cartpole/metric_{i}": float(i) for i in range(50)}),
        ]
        for step, metrics in rows:
            s.call(f"log({step}, {{...{len(metrics)} metrics}})", logger.log, step, metrics)
        s.ok("log(step, metrics) accepts float rows, NaN and infinities included, with many keys")
        if callable(getattr(logger, "log_video", None)):  # optional: receives logging.video_every's MP4s
            video = _tiny_mp4(Path(tmp) / "iter_1.mp4")
            if video is None:
                s.note("log_video() not checked: moviepy is not installed")
            else:
                s.call("log_video(256, path, tag='video', fps=10)", logger.log_video, 256, video, tag="video",
                       fps=10)
                s.ok("log_video(step, path, *, tag, fps) takes an MP4")
        s.call("close()", logger.close)
        s.ok("close() works")
        if not any(path.iterdir()):
            s.note("the logger wrote nothing into the run directory")
    return s.report


def _tiny_mp4(path: Path) -> Path | None:
    """An 8-frame 32x32 MP4 (a bar moving right), or ``None`` without moviepy."""
    import importlib.util

    if importlib.util.find_spec("moviepy") is None:
        return None
    import numpy as np

    from rlightning_core.video import Mp4Writer

    writer = Mp4Writer(path, fps=10)
    for i in range(8):
        frame = np.zeros((32, 32, 3), np.uint8)
        frame[:, 4 * i: 4 * i + 4] = 255
        writer.write(frame)
    return writer.close()
