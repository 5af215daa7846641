#!/usr/bin/env bash
# with-cpu-hogs.sh runs a command beside a busy loop on every core (HOGS=n for another count), as CI's
# machine is loaded while it runs the tests: a test that waits for an amount of wall time instead of
# an event fails here, not three landings later. The hogs end with the command, whatever its exit.
#   scripts/with-cpu-hogs.sh go test -race ./services/chat/...
set -euo pipefail
HOGS=${HOGS:-$(nproc)}
hogs=()
stop() { ((${#hogs[@]})) && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null || true; }
trap stop EXIT
for ((i = 0; i < HOGS; i++)); do
  (while :; do :; done) &
  hogs+=($!)
done
echo "with-cpu-hogs: $HOGS CPU hogs beside: $*" >&2
"$@"
