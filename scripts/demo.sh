#!/usr/bin/env bash
# The main job: build, then on the built-in tasks
#   1. `d2k demo`: start a server and play a scripted episode on vector_add over the wire;
#   2. the expert-replay and baseline agents (Python) over every task and layer, with a reward table.
# Without a GPU both compile in the sandbox for real and say plainly that evaluation needs a GPU.
# The agents run in the project's Python environment .venv/ (made by scripts/bootstrap.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
build/bin/d2k demo "$@"

echo
echo "== the agents: expert replay and baseline over every task and layer =="
sock="/tmp/d2k-demo-agents-$$.sock"
build/bin/d2k serve --endpoint "ipc://$sock" --tasks tasks 2>"/tmp/d2k-demo-agents-$$.log" &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null; rm -f "/tmp/d2k-demo-agents-$$.log"' EXIT
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
PYTHONPATH=python .venv/bin/python -m agents.demo --endpoint "ipc://$sock"
