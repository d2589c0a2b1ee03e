#!/usr/bin/env bash
# The GPU checks of Ray mode in one short run on a CUDA machine that has torch but no Ray and no network.
#
#   bash benchmarks/gpu_check.sh prepare   # here: wheels into .whl/ (Ray without its Java jars and libraries
#                                          # we don't use, the deps the image lacks, rlightning and plugins)
#   bash benchmarks/gpu_check.sh run       # there, from the repo root, with .whl/ copied along; logs in $OUT
#                                          # (STEPS="pytest_gpu train_ray" runs only the steps named)
#
# run: GPU weight sync numbers (benchmarks/gpu_sync.py), the `-m gpu` tests, CartPole PPO trained on the GPU
# from the CLI in Ray mode and in local mode, short DQN / SAC runs with a GPU learner under the async engine, and
# Atari PPO with a GPU learner beside SB3's (benchmarks/atari_throughput.py --device cuda).
# The machine's own python3 (and torch) is used; WHEEL_PYTHON picks the wheels' Python version (default 3.12).
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}

prepare() {
    set -e
    rm -rf .whl && mkdir -p .whl
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || { mkdir -p .git/info; echo '/.whl/' >> .git/info/exclude; }
    local tags=(--only-binary=:all: --python-version "${WHEEL_PYTHON:-3.12}" --implementation cp
                --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64)
    local ray_version
    ray_version=$("$PY" -c 'import importlib.metadata as m; print(m.version("ray"))')
    "$PY" -m pip download -q --no-deps "${tags[@]}" -d .whl/raw "ray==$ray_version"
    "$PY" -m pip download -q --no-deps "${tags[@]}" -d .whl "gymnasium>=1.1" farama-notifications "cattrs>=24.1" \
        jsonschema referencing rpds-py jsonschema-specifications "ale-py>=0.9" "stable-baselines3>=2.3" \
        "attrs>=25.4" typing-extensions
    # A wheel over the device tool's 64 MiB: drop the Java jars and the libraries rlightning never imports.
    "$PY" - <<'EOF'
import base64, glob, hashlib, os, zipfile
drop = ("ray/jars/", "ray/rllib/", "ray/data/", "ray/serve/", "ray/tune/", "ray/train/", "ray/llm/",
        "ray/dashboard/client/build/")
src = glob.glob(".whl/raw/ray-*.whl")[0]
dst = os.path.join(".whl", os.path.basename(src))
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
    record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
    kept = []
    for info in zin.infolist():
        if info.filename.startswith(drop) or info.filename == record_name:
            continue
        data = zin.read(info)
        zout.writestr(info, data)
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        kept.append(f"{info.filename},sha256={digest},{len(data)}")
    zout.writestr(record_name, "\n".join(kept + [f"{record_name},,"]) + "\n")
print(f"{dst}: {os.path.getsize(dst) / 2**20:.1f} MiB (was {os.path.getsize(src) / 2**20:.1f})")
EOF
    rm -rf .whl/raw
    "$PY" -m pip wheel -q --no-deps --no-build-isolation -w .whl . plugins/rlightning-gymnasium \
        plugins/rlightning-ppo plugins/rlightning-dqn plugins/rlightning-sac plugins/rlightning-td3 \
        plugins/rlightning-appo plugins/rlightning-recurrent-ppo plugins/rlightning-tensorboard
    du -sh .whl
}

step() {  # step NAME TIMEOUT CMD...: the whole log in $OUT/NAME.log, its end and the time here
    local name=$1 limit=$2 t0=$SECONDS
    shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
    echo "== $name: $*"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    tail -n 25 "$OUT/$name.log"
    echo "== $name: exit $rc after $((SECONDS - t0)) s"
}

run() {
    OUT=${OUT:-gpu-out}
    mkdir -p "$OUT"
    export PYTHONUNBUFFERED=1
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
        .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
    nvidia-smi -L
    "$PY" -c 'import torch, ray, gymnasium, rlightning_core; print("torch", torch.__version__, "cuda",
torch.cuda.is_available(), "ray", ray.__version__, "gymnasium", gymnasium.__version__)'
    rlightning list-plugins 2>&1 | tail -12
    step gpu_sync 150 "$PY" benchmarks/gpu_sync.py
    step pytest_gpu 150 "$PY" -m pytest -m gpu -W default -v tests/integration/test_ray_gpu.py \
        tests/integration/test_ray_offload.py tests/unit/test_resolve_device.py tests/integration/test_gpu_training.py
    # CartPole PPO from the CLI with the learner on the GPU: on Ray (2 CPU env runners), then in one process.
    step train_ray 150 rlightning train examples/cartpole_ppo_ray.yaml policy.device=cuda \
        cluster.learner_num_gpus=1 logging.progress=false --run-dir "$OUT/ray_run"
    step train_local 90 rlightning train examples/cartpole_ppo.yaml policy.device=cuda logging.progress=false \
        --run-dir "$OUT/local_run"
    # The off-policy learners on the GPU under the async engine on Ray (short runs: the mechanics, not a score).
    step train_dqn_ray 90 rlightning train examples/cartpole_dqn.yaml cluster.mode=ray env.num_workers=2 \
        policy.device=cuda cluster.learner_num_gpus=1 engine.total_steps=4096 logging.progress=false \
        --run-dir "$OUT/dqn_run"
    step train_sac_ray 90 rlightning train examples/pendulum_sac_ray.yaml policy.device=cuda \
        cluster.learner_num_gpus=1 engine.total_steps=2048 logging.progress=false --run-dir "$OUT/sac_run"
    # Atari PPO with the learner on the GPU beside SB3's on the same GPU (rl-zoo settings, same work).
    step atari_gpu 240 "$PY" benchmarks/atari_throughput.py --device cuda --steps 8192 --repeats 2
    rm -rf "$OUT/ray_run" "$OUT/local_run" "$OUT/dqn_run" "$OUT/sac_run"
}

"${1:?prepare or run}"
