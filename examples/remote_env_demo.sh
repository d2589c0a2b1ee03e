#!/usr/bin/env bash
# Remote envs on loopback: a trainer whose env server picks a free port, and two env clients in their own
# processes serving CartPole to it. Solves CartPole like examples/cartpole_ppo.yaml (~10 s here, start-up included).
#   bash examples/remote_env_demo.sh [RUN_DIR]
# See docs/remote-envs.md.
set -euo pipefail
cd "$(dirname "$0")/.."

work=$(mktemp -d)
run_dir=${1:-$work/run}
address_file=$work/address.json
export RLIGHTNING_ENV_TOKEN=${RLIGHTNING_ENV_TOKEN:-$(python -c 'import secrets; print(secrets.token_hex(16))')}
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work/address.json"
}
trap cleanup EXIT

echo "== trainer (run dir: $run_dir)"
rlightning train examples/cartpole_ppo_remote.yaml --run-dir "$run_dir" \
    "env.params.address_file=$address_file" &
trainer=$!
pids+=("$trainer")

for _ in $(seq 300); do  # the server writes its address once the socket is bound
    [[ -s $address_file ]] && break
    kill -0 "$trainer" 2>/dev/null || { echo "the trainer exited early" >&2; exit 1; }
    sleep 0.1
done
port=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['port'])" "$address_file")
echo "== env server on 127.0.0.1:$port; starting two env clients"

for name in client-a client-b; do
    # The run's own config: the client serves its env.params.local_env with num_envs / num_clients envs.
    rlightning env-client --connect "127.0.0.1:$port" --name "$name" examples/cartpole_ppo_remote.yaml &
    pids+=("$!")
done

wait "$trainer"
echo "== done; metrics in $run_dir/metrics.jsonl (env/CartPole-v1/clients_connected, client_dropped_episodes, ...)"
