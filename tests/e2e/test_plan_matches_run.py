"""``train --dry-run`` prints the plan the run then follows: for every example config, the dry run's lines equal
the plan the run logs at start-up (one iteration each, real processes; ray configs on a real local cluster).

The run logs the plan with the choices its execution made (on Ray: the weight sync it set up), the dry run the
ones it predicts, so a dry run that describes something else than what runs fails here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXE = Path(sys.executable).parent / "rlightning"
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.yaml"))
#: One iteration (total_steps below one iteration's steps), three evaluation episodes (simple_spread: a multiple
#: of its 3 agents).
SHORT = ("engine.total_steps=1", "engine.eval_episodes=3", "logging.progress=false")
#: Beyond the files: `weight_sync: auto` on Ray, where a small policy's weights ride inline (its dry run measures
#: them), and the learner in the driver.
CASES = [(name, ()) for name in EXAMPLES] + [
    ("cartpole_ppo.yaml", ("cluster.mode=ray",)),
    ("cartpole_ppo.yaml", ("cluster.mode=ray", "cluster.num_learners=0")),
]
TOKEN = "plan-test-token-0123456789"

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLIGHTNING_") and k != "RAY_ADDRESS"}
    env["RLIGHTNING_ENV_TOKEN"] = TOKEN  # the remote example's clients authenticate with it
    return env


def _plan_in_log(stderr: str) -> list[str]:
    """The plan block the run logged: its header line (``[rlightning] Plan (...``) and the indented lines after."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("[rlightning] Plan (")]
    assert len(starts) == 1, stderr[-3000:]
    block = [lines[starts[0]].removeprefix("[rlightning] ")]
    for line in lines[starts[0] + 1:]:
        if not line.startswith("  "):
            break
        block.append(line)
    return block


def _serve_remote_envs(config: Path, address_file: Path, trainer: subprocess.Popen[str], log_dir: Path) -> list:
    """Two ``rlightning env-client`` processes for the remote example, once its server wrote its address."""
    deadline = time.monotonic() + 300
    while not (address_file.exists() and address_file.read_text().strip()):
        if trainer.poll() is not None or time.monotonic() > deadline:
            return []
        time.sleep(0.1)
    port = json.loads(address_file.read_text())["port"]
    clients = []
    for name in ("a", "b"):
        out = open(log_dir / f"client-{name}.log", "w")  # noqa: SIM115 (closed with the process)
        clients.append((subprocess.Popen([str(EXE), "env-client", "--connect", f"127.0.0.1:{port}", "--name", name,
                                          "--retry-s", "60", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                         env=_env(), cwd=ROOT), out))
    return clients


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=[" ".join((n, *o)) for n, o in CASES])
def test_the_dry_run_prints_the_plan_the_run_logs_at_start(name, overrides, tmp_path):
    config = ROOT / "examples" / name
    run_dir = tmp_path / "run"
    args = [*SHORT, *overrides]
    remote = "remote" in name
    if remote:
        args.append(f"env.params.address_file={tmp_path / 'address.json'}")
    dry = subprocess.run([str(EXE), "train", str(config), *args, "--dry-run", "--run-dir", str(run_dir)],
                         capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=600)
    if dry.returncode == 2 and "pip install" in dry.stderr:
        pytest.skip(f"{name} needs an optional dependency: {dry.stderr.strip().splitlines()[-1]}")
    assert dry.returncode == 0, dry.stderr
    planned = dry.stdout.splitlines()
    assert planned[0].startswith(f"Plan for {config} (")
    assert not run_dir.exists()
    with open(tmp_path / "train.err", "w+") as err:
        trainer = subprocess.Popen([str(EXE), "train", str(config), *args, "--run-dir", str(run_dir)],
                                   stdout=subprocess.DEVNULL, stderr=err, text=True, env=_env(), cwd=ROOT)
        clients = _serve_remote_envs(config, tmp_path / "address.json", trainer, tmp_path) if remote else []
        try:
            code = trainer.wait(timeout=900)
        finally:
            for proc, out in clients:
                proc.kill()
                proc.wait(timeout=60)
                out.close()
            if trainer.poll() is None:
                trainer.kill()
                trainer.wait(timeout=60)
        err.seek(0)
        stderr = err.read()
    assert code == 0, stderr[-4000:]
    logged = _plan_in_log(stderr)
    assert logged[0] == planned[0].replace(f" for {config}", "")
    assert logged[1:] == planned[1:]
