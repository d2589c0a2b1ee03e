"""An env that refuses its params (a ``ValueError``/``TypeError`` while being built or on its first reset) stops the
run at once with a config error naming the env config and the plugin (exit code 2), in local and in Ray mode; it is
not recreated as a flaky worker. The deliberately faulty env of tests/fixtures/faulty_env_plugin.py, installed as a
real distribution; real CLI subprocesses."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from reliability_helpers import CARTPOLE, RLIGHTNING, ROOT, SMALL, child_env, wait_for_no_session_processes

pytestmark = pytest.mark.slow

RAY = ("cluster.mode=ray", "cluster.num_cpus=2", "env[0].num_cpus=0.5")


def _train(tmp_path: Path, faulty_site: Path, mode: str, *extra: str) -> subprocess.CompletedProcess[str]:
    """``rlightning train`` with the faulty env in ``mode``; checks that it left no process behind (Ray's)."""
    args = [str(RLIGHTNING), "train", str(CARTPOLE), *SMALL, "env[0].type=faulty", f"env[0].params.mode={mode}",
            "checkpoint.every=0", *extra, "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(args, env=child_env(str(faulty_site)), cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    out, err = proc.communicate(timeout=300)
    left = wait_for_no_session_processes(proc.pid)
    for pid, _ in left:  # processes of the session this test started
        os.kill(pid, signal.SIGKILL)
    assert not left, left
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _refused(proc: subprocess.CompletedProcess[str], *lines: str) -> None:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "recreating" not in proc.stderr  # no restart was spent on it
    assert "invalid configuration" in proc.stderr
    for line in lines:
        assert line in proc.stderr, proc.stderr


@pytest.mark.parametrize("mode_extra", [(), RAY], ids=["local", "ray"])
def test_an_env_refusing_its_params_while_built_is_a_config_error(tmp_path, faulty_site, training_plugins,
                                                                 mode_extra):
    proc = _train(tmp_path, faulty_site, "refuse_build", *mode_extra)
    _refused(proc, "env[0].params: env 'faulty' from rlightning-test-faulty 1.0 raised ValueError while being "
                   "built: faulty env: the constructor refuses these params on purpose",
             "a restart would fail the same way, so none is tried")


@pytest.mark.parametrize("mode_extra", [(), RAY], ids=["local", "ray"])
def test_an_env_refusing_its_params_on_its_first_reset_is_a_config_error(tmp_path, faulty_site, training_plugins,
                                                                        mode_extra):
    proc = _train(tmp_path, faulty_site, "refuse_reset", *mode_extra)
    _refused(proc, "env[0].params: ", "failed in reset(): TypeError: faulty env: reset() refuses these params",
             "'faulty'")



def test_a_user_error_of_an_env_in_its_ray_actor_is_reported_as_it_is(tmp_path, training_plugins):
    """The pettingzoo env refuses a num_envs that is no multiple of its agents: its own message, exit code 2."""
    pytest.importorskip("mpe2")
    args = [str(RLIGHTNING), "train", str(ROOT / "examples" / "simple_spread_ppo.yaml"), *RAY, "env.num_envs=4",
            "--run-dir", str(tmp_path / "run")]
    proc = subprocess.Popen(args, env=child_env(), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    _, err = proc.communicate(timeout=300)
    left = wait_for_no_session_processes(proc.pid)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, left
    assert proc.returncode == 2, err
    assert "env.num_envs: mpe2.simple_spread_v3 has 3 agents" in err and "got 4" in err
    assert "Traceback" not in err and "failed" not in err and "recreating" not in err
