#!/usr/bin/env bash
# test-load.sh runs the unit suite (every package but the end-to-end and chaos suites, which start
# whole stacks and have make targets of their own) COUNT times with -race beside a CPU hog on every
# core (make test-load; CI runs it once). A test that waits for an amount of wall time rather than
# for an event fails here, at the landing that adds it.
#   COUNT  runs of each test (default 1)   HOGS  CPU hogs (default: one per core)
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-1}
mapfile -t pkgs < <(go list ./... ./proto/... | grep -v -e '/internal/e2e$' -e '/internal/chaos$')
# Build first, so the hogs load the tests and not the compiler (in CI make test built them already).
go test -race -count=1 -run '^$' "${pkgs[@]}" >/dev/null
start=$SECONDS
scripts/with-cpu-hogs.sh go test -race -count="$COUNT" -timeout 60m "${pkgs[@]}"
echo "test-load: ${#pkgs[@]} packages x$COUNT passed beside CPU hogs in $((SECONDS - start)) s"
