#!/usr/bin/env bash
# Runs the protocol conformance suite (tests/conformance, PROTOCOL.md v1).
#
#   tests/conformance/run.sh [--endpoint EP] [pytest args...]
#
# With --endpoint (or $D2K_ENDPOINT): runs the suite against that server, nothing else.
# Without: starts the built server twice on ipc sockets in a temporary state dir,
#   main:   build/bin/d2k serve --tasks tasks --no-record --max-sessions 32
#   timers: the same with short timers (idle 2 s, compile deadline 4 s, shutdown grace 5 s),
#           for idle reaping, a compile past its deadline, and shutting_down (the suite stops it)
# waits until both answer, runs the suite, stops them and removes the state dir.
#
# Python: $D2K_PYTHON if set (it needs pytest, pyzmq, msgpack), else tests/conformance/.venv,
# created with those packages on first use. $D2K_BIN is the server binary (default build/bin/d2k),
# $D2K_TASKS_DIR the tasks folder (default tasks). Exit status: pytest's.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

python="${D2K_PYTHON:-}"
if [ -z "$python" ]; then
  python="$here/.venv/bin/python"
  if ! "$python" -c 'import pytest, zmq, msgpack' 2>/dev/null; then
    python3 -m venv "$here/.venv"
    "$python" -m pip install --quiet -r "$here/requirements.txt"
  fi
fi

endpoint="${D2K_ENDPOINT:-}"
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --endpoint) endpoint="$2"; shift 2 ;;
    --endpoint=*) endpoint="${1#--endpoint=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done

if [ -n "$endpoint" ]; then
  cd "$here"
  exec "$python" -m pytest --endpoint "$endpoint" "${args[@]+"${args[@]}"}"
fi

bin="${D2K_BIN:-$root/build/bin/d2k}"
tasks="${D2K_TASKS_DIR:-$root/tasks}"
if [ ! -x "$bin" ]; then
  echo "run.sh: no server binary at $bin (build the d2k and d2k-runner targets, or set D2K_BIN)" >&2
  exit 2
fi

state="$(mktemp -d "${TMPDIR:-/tmp}/d2k-conformance.XXXXXX")"
main_pid=""
timers_pid=""
stop_servers() {
  for pid in $main_pid $timers_pid; do
    if kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for pid in $main_pid $timers_pid; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$state"
}
trap stop_servers EXIT

main_ep="ipc://$state/main.sock"
timers_ep="ipc://$state/timers.sock"
cat >"$state/timers.json" <<'EOF'
{"idle_timeout_s": 2, "compile_deadline_s": 4, "shutdown_grace_s": 5}
EOF

"$bin" serve --tasks "$tasks" --endpoint "$main_ep" --state-dir "$state/main" --no-record --events none \
  --max-sessions 32 2>"$state/main.log" &
main_pid=$!
"$bin" serve --tasks "$tasks" --endpoint "$timers_ep" --state-dir "$state/timers" --no-record --events none \
  --config "$state/timers.json" --idle-timeout 2 --shutdown-grace 5 2>"$state/timers.log" &
timers_pid=$!

# Ready when hello answers (the server binds before it serves; tasks load first).
"$python" - "$main_ep" "$timers_ep" <<'EOF'
import sys, time
import msgpack, zmq
ctx = zmq.Context.instance()
for ep in sys.argv[1:]:
    deadline = time.monotonic() + 60
    while True:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.connect(ep)
        s.send(msgpack.packb({"v": 1, "id": 1, "op": "hello"}))
        answered = s.poll(500)
        s.close()
        if answered:
            break
        if time.monotonic() > deadline:
            sys.exit(f"run.sh: {ep} did not answer hello within 60 s")
EOF

cd "$here"
set +e
"$python" -m pytest --endpoint "$main_ep" --timers-endpoint "$timers_ep" \
  --stop-endpoint "$timers_ep" --stop-pid "$timers_pid" "${args[@]+"${args[@]}"}"
status=$?
set -e
if [ "$status" -ne 0 ]; then
  echo "run.sh: server logs follow (main, then timers)" >&2
  tail -n 40 "$state/main.log" "$state/timers.log" >&2 || true
fi
exit "$status"
