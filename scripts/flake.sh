#!/usr/bin/env bash
# flake.sh runs one test many times with a CPU hog on every core beside it: a concurrency or timing
# test that passes here is one that CI's load will not break (make flake; CONTRIBUTING.md).
#   PKG    the package (./services/chat)           RUN   the -run pattern (anchor it: ^TestX$)
#   COUNT  runs (default 50)                        RACE  1 (default) runs under -race
#   HOGS   CPU hogs (default: one per core)
set -euo pipefail
: "${PKG:?PKG=./path/to/package is required}" "${RUN:?RUN=^TestName$ is required}"
COUNT=${COUNT:-50}
RACE=${RACE:-1}

# Build first, so the hogs load the test runs and not the compiler.
race=(); [[ $RACE == 1 ]] && race=(-race)
go test "${race[@]}" -count=1 -run '^$' "$PKG" >/dev/null

echo "flake: $PKG -run '$RUN' x$COUNT ${race[*]}"
start=$SECONDS
if "$(dirname "$0")"/with-cpu-hogs.sh go test "${race[@]}" -count="$COUNT" -timeout 60m -run "$RUN" "$PKG"; then
  echo "flake: $COUNT of $COUNT passed in $((SECONDS - start)) s"
else
  echo "flake: FAILED (see above); a test that fails 1 run in $COUNT here fails CI" >&2
  exit 1
fi
