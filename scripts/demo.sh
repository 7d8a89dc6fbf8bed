#!/usr/bin/env bash
# The main job: build, start a server on the built-in tasks and play a scripted episode on vector_add.
# Without a GPU it compiles in the sandbox for real and says plainly that evaluate/submit need a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec build/bin/d2k demo "$@"
