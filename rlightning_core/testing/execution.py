"""``check_execution``: does an execution keep each promise of :class:`~rlightning_core.engine.contract.Execution`?

Run it on an execution built for a small run (CartPole or the testing env, an on-policy buffer) in each mode an
engine may meet: ``LocalExecution`` and ``RayExecution`` on a real cluster. It drives the execution as an engine
would, through the contract only, and compares what comes back with what the promise says.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rlightning_core.testing._common import ConformanceReport, Subject, checkpoint_round_trip, trees_equal

__all__ = ["check_execution"]

_FIX = "see rlightning_core/engine/contract.py for what each call must do"


def check_execution(execution: Any, *, num_steps: int = 8, seed: int = 0,
                    run_dir: str | Path | None = None) -> ConformanceReport:
    """Check every call of the execution contract on ``execution``, then close it (twice).

    Verifies: all members present; ``reset``; ``collect`` steps every runner and counts the steps;
    ``learn`` returns metrics and, after ``sync``, the rollout copies hold new weights equal to the learner's bit
    for bit with ``version`` bumped and the next chunk collected with that version; ``collect_chunks`` +
    ``add_chunks`` + ``learn``; the streaming calls (``start_collect``, ``wait``, ``finish_collect``,
    ``start_learn`` with and without stale chunks, ``finish_learn``, ``publish_weights``); ``state_dict``
    through ``torch.save``/``torch.load(weights_only=True)`` and back with ``load_state_dict``;
    ``reseed_runner``; ``attach_run_dir``; ``close`` twice.

    Args:
        execution: a built execution (not reset yet), with an on-policy buffer.
        num_steps: steps per env of each collect (the buffer's rollout length).
        seed: the seed of :meth:`~rlightning_core.engine.contract.Execution.reset`.
        run_dir: the directory given to ``attach_run_dir`` (default: a temporary one).

    Raises:
        ConformanceError: the first broken promise, with what was seen.
    """
    from rlightning_core.engine.contract import Execution

    s = Subject(kind="execution", label=f"execution {type(execution).__qualname__}", factory=type(execution),
                params=None, takes_params=False)
    try:
        if not isinstance(execution, Execution):
            members = {*Execution.__annotations__, *(n for n in vars(Execution) if not n.startswith("_"))}
            missing = [m for m in sorted(members) if not hasattr(execution, m)]
            s.fail(f"does not honour the Execution protocol: missing {', '.join(missing)}", _FIX)
        s.ok("has every member of the Execution protocol")
        with tempfile.TemporaryDirectory(prefix="rlightning-execution-") as tmp:
            s.call("attach_run_dir(run_dir)", execution.attach_run_dir, Path(run_dir or tmp))
            s.ok("attach_run_dir accepts the run directory")
            s.call(f"reset({seed})", execution.reset, seed)
            _check_batch(s, execution, num_steps)
            _check_chunks(s, execution, num_steps)
            _check_streaming(s, execution, num_steps)
            _check_state(s, execution, num_steps, seed)
    finally:
        s.call("close()", execution.close)
    s.call("close() a second time", execution.close)
    s.ok("close() releases the execution and a second close() does nothing")
    return s.report


def _eval_weights(s: Subject, execution: Any) -> dict[str, np.ndarray]:
    policy = s.call("eval_policy()", execution.eval_policy)
    return {k: np.array(v, copy=True) for k, v in s.call("eval_policy().get_weights()", policy.get_weights).items()}


def _learner_weights(s: Subject, execution: Any) -> dict[str, np.ndarray]:
    """The learner's weights as its checkpoint section holds them (``policy.learner.modules``)."""
    state = s.call("state_dict()", execution.state_dict)
    try:
        modules = state["policy"]["learner"]["modules"]
    except (KeyError, TypeError):
        s.fail("state_dict()['policy']['learner'] holds no 'modules' (BasePolicy.state_dict's layout)",
               "return the learner policy's state_dict() under state['policy']['learner']")
    return {f"{m}.{k}": np.asarray(v.detach().cpu().numpy() if hasattr(v, "detach") else v)
            for m, tensors in modules.items() for k, v in tensors.items()}


def _collected(s: Subject, execution: Any, stats: Any, num_steps: int, what: str) -> None:
    n = execution.num_runners
    if len(stats) != n:
        s.fail(f"{what} returned {len(stats)} stats for {n} runners", "return one RolloutStats per runner, in order")
    steps = sum(int(x.steps) for x in stats)
    want = execution.steps_per_collect(num_steps)
    if steps != want:
        s.fail(f"{what} counted {steps} env steps, steps_per_collect({num_steps}) says {want}",
               "count every env step of every runner in RolloutStats.steps")
    versions = {int(x.weight_version) for x in stats}
    if versions != {execution.version}:
        s.fail(f"{what}: chunks collected with weight versions {sorted(versions)}, the learner is at "
               f"{execution.version}", "after sync() every runner must collect with the learner's version")


def _check_batch(s: Subject, execution: Any, num_steps: int) -> None:
    version = execution.version
    stats = s.call(f"collect({num_steps})", execution.collect, num_steps)
    _collected(s, execution, stats, num_steps, f"collect({num_steps})")
    s.ok(f"collect({num_steps}) steps every runner: {sum(x.steps for x in stats)} env steps, version {version}")
    before = _eval_weights(s, execution)
    metrics = s.call("learn(0.5)", execution.learn, 0.5)
    if not isinstance(metrics, dict) or not metrics or not all(isinstance(v, int | float) for v in metrics.values()):
        s.fail(f"learn() returned {metrics!r}", "return the policy's metrics as a non-empty dict of floats")
    s.ok(f"learn() returns metrics ({', '.join(sorted(metrics)[:4])}, ...)")
    got = s.call("sync()", execution.sync)
    if not (isinstance(got, tuple) and len(got) == 2 and got[0] == version + 1 == execution.version):
        s.fail(f"sync() returned {got!r} (version before: {version}, now {execution.version})",
               "bump version by one and return (version, metrics)")
    after = _eval_weights(s, execution)
    if trees_equal(before, after):
        s.fail("the rollout weights are the same before learn() and after sync()",
               "learn() must update the learner and sync() copy its weights to the rollout copies")
    learner = _learner_weights(s, execution)
    if not trees_equal({k: after[k] for k in learner}, learner) or set(learner) - set(after):
        diff = sorted(k for k in learner if k not in after or not np.array_equal(after[k], learner[k]))
        s.fail(f"after sync() the rollout copy differs from the learner in {diff[:5]}",
               "sync() must copy every parameter and buffer bit for bit")
    s.ok(f"learn() changes the weights; after sync() (version {execution.version}) the rollout copy equals the "
         "learner bit for bit")
    stats = s.call(f"collect({num_steps})", execution.collect, num_steps)
    _collected(s, execution, stats, num_steps, f"collect({num_steps}) after sync()")
    s.call("learn(0.5)", execution.learn, 0.5)
    s.call("sync()", execution.sync)
    s.ok("the next collect uses the synced version")


def _check_chunks(s: Subject, execution: Any, num_steps: int) -> None:
    pairs = s.call(f"collect_chunks({num_steps})", execution.collect_chunks, num_steps)
    _collected(s, execution, [st for _, st in pairs], num_steps, f"collect_chunks({num_steps})")
    size = s.call("buffer_size()", execution.buffer_size)
    if not isinstance(size, int) or size < 0:
        s.fail(f"buffer_size() returned {size!r}", "return the number of transitions held, an int >= 0")
    s.call("add_chunks(chunks)", execution.add_chunks, [c for c, _ in pairs])
    before = _eval_weights(s, execution)
    s.call("learn(0.6)", execution.learn, 0.6)
    s.call("sync()", execution.sync)
    if trees_equal(before, _eval_weights(s, execution)):
        s.fail("learn() after add_chunks() did not change the weights",
               "add_chunks() must store the chunks for the next learn()")
    s.ok("collect_chunks() + add_chunks() + learn() learn from the chunks; buffer_size() is an int")


def _check_streaming(s: Subject, execution: Any, num_steps: int) -> None:
    n = execution.num_runners
    launched = [s.call(f"start_collect({i}, {num_steps})", execution.start_collect, i, num_steps) for i in range(n)]
    pending = [h for _, h in launched]
    seen: set[Any] = set()
    while len(seen) < n:
        done = s.call("wait(handles, 60)", execution.wait, [h for h in pending if h not in seen], 60.0)
        if not done or any(h not in pending for h in done):
            s.fail(f"wait() returned {done!r}", "return the finished handles among those given")
        seen.update(done)
    stats = [s.call(f"finish_collect({i}, handle)", execution.finish_collect, i, h) for i, (_, h) in
             enumerate(launched)]
    if any(x is None for x in stats):
        s.fail("finish_collect() returned None with no runner failing", "return the chunk's RolloutStats")
    _collected(s, execution, stats, num_steps, "start_collect()/finish_collect() over every runner")
    version = execution.version
    handle = s.call("start_learn(...)", execution.start_learn, 0.7, [c for c, _ in launched], version=version,
                    max_staleness=None)
    s.call("wait([learn handle], 60)", execution.wait, [handle], 60.0)
    result = s.call("finish_learn(handle)", execution.finish_learn, handle)
    for key in ("metrics", "lags", "dropped", "busy_s"):
        if key not in result:
            s.fail(f"finish_learn() returned no {key!r} ({sorted(result)})", "return a LearnResult")
    if list(result["lags"]) != [version - int(x.weight_version) for x in stats] or result["dropped"] != 0:
        s.fail(f"finish_learn(): lags {result['lags']}, dropped {result['dropped']}, for chunks of versions "
               f"{[x.weight_version for x in stats]} at version {version}", "report each stored chunk's policy lag")
    if float(result["metrics"].get("stats/updates", 1.0)) <= 0:
        s.fail("start_learn() with a whole rollout (a chunk of every runner) did not learn",
               "learn once the on-policy buffer is full")
    s.ok("start_collect/wait/finish_collect/start_learn/finish_learn collect and learn a whole rollout")
    stale = [s.call("start_collect(i, ...)", execution.start_collect, i, num_steps) for i in range(n)]
    for i, (_, h) in enumerate(stale):
        s.call("wait([handle], 60)", execution.wait, [h], 60.0)
        s.call("finish_collect(i, handle)", execution.finish_collect, i, h)
    handle = s.call("start_learn(stale)", execution.start_learn, 0.7, [c for c, _ in stale], version=version + 5,
                    max_staleness=2)
    s.call("wait([learn handle], 60)", execution.wait, [handle], 60.0)
    result = s.call("finish_learn(handle)", execution.finish_learn, handle)
    if result["dropped"] != n or list(result["lags"]):
        s.fail(f"chunks 5 versions old with max_staleness=2: dropped {result['dropped']}, stored lags "
               f"{result['lags']}", "drop every chunk whose policy lag exceeds max_staleness")
    s.ok("start_learn drops chunks past max_staleness")
    got = s.call("publish_weights()", execution.publish_weights)
    if got[0] != version + 1 or execution.version != version + 1:
        s.fail(f"publish_weights() returned {got!r} at version {execution.version} (was {version})",
               "bump version by one and return (version, metrics)")
    chunk, h = s.call("start_collect(0, ...)", execution.start_collect, 0, num_steps)
    s.call("wait([handle], 60)", execution.wait, [h], 60.0)
    st = s.call("finish_collect(0, handle)", execution.finish_collect, 0, h)
    if st is None or int(st.weight_version) != execution.version:
        s.fail(f"the chunk after publish_weights() has version {getattr(st, 'weight_version', None)}, the learner "
               f"{execution.version}", "the next chunk a runner starts must use the published weights")
    s.ok("publish_weights() bumps the version and the next chunk is collected with it")
    # the lone chunk above leaves an on-policy buffer part-full: fill the rollout, then a sync makes all equal
    rest = [s.call("start_collect(i, ...)", execution.start_collect, i, num_steps) for i in range(1, n)]
    h = s.call("start_learn(rest)", execution.start_learn, 0.8, [chunk, *[c for c, _ in rest]],
               version=execution.version, max_staleness=None)
    s.call("wait", execution.wait, [h], 60.0)
    s.call("finish_learn", execution.finish_learn, h)
    for i, (_, sh) in enumerate(rest, start=1):
        s.call("finish_collect", execution.finish_collect, i, sh)
    s.call("sync()", execution.sync)


def _check_state(s: Subject, execution: Any, num_steps: int, seed: int) -> None:
    from rlightning_core.checkpoint.manager import to_numpy_tree, to_tensor_tree

    state = s.call("state_dict()", execution.state_dict)
    for key in ("policy", "preprocessors", "buffer", "runners"):
        if key not in state:
            s.fail(f"state_dict() has no {key!r} section ({sorted(state)})", _FIX)
    saved_version, saved = execution.version, _learner_weights(s, execution)
    for key in ("preprocessors", "runners"):  # numpy parts travel as tensors, as BaseEngine writes them
        state[key] = to_tensor_tree(state[key])
    state = checkpoint_round_trip(s, state, "state_dict()")
    for key in ("preprocessors", "runners"):
        state[key] = to_numpy_tree(state[key])
    s.call(f"collect({num_steps})", execution.collect, num_steps)
    s.call("learn(0.9)", execution.learn, 0.9)
    s.call("sync()", execution.sync)
    restored = s.call("load_state_dict(state)", execution.load_state_dict, state)
    if len(restored) != execution.num_runners or not all(isinstance(x, bool) for x in restored):
        s.fail(f"load_state_dict() returned {restored!r}", "return one bool per runner")
    if execution.version != saved_version:
        s.fail(f"after load_state_dict() the version is {execution.version}, saved {saved_version}",
               "restore the weight version")
    now = _eval_weights(s, execution)
    if not trees_equal({k: now[k] for k in saved}, saved) or not trees_equal(_learner_weights(s, execution), saved):
        s.fail("after load_state_dict() the learner or the rollout copy differs from the saved weights",
               "restore the learner and sync it into the rollout copies")
    s.ok("state_dict() survives torch.save/torch.load(weights_only=True); load_state_dict() restores weights "
         "and version into learner and rollout copies")
    for i, ok in enumerate(restored):
        if not ok:
            s.call(f"reseed_runner({i}, ...)", execution.reseed_runner, i, seed + 1 + i)
    s.call("reseed_runner(0, ...)", execution.reseed_runner, 0, seed + 100)
    stats = s.call(f"collect({num_steps}) after the resume", execution.collect, num_steps)
    _collected(s, execution, stats, num_steps, "collect() after load_state_dict()")
    s.ok("reseed_runner() resets a runner and collection goes on")
