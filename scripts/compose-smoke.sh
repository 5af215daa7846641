#!/usr/bin/env bash
# Docker smoke test: start gateway, secrets and chat as separate containers from the FROM scratch
# image, send requests through the gateway, and tear everything down. Expects `make image` first.
set -euo pipefail
cd "$(dirname "$0")/.."

compose=(docker-compose)
if docker compose version >/dev/null 2>&1; then compose=(docker compose); fi
export COMPOSE_PROJECT_NAME=gantry-smoke
export GANTRY_HTTP_PORT=${GANTRY_HTTP_PORT:-18080} GANTRY_ADMIN_PORT=${GANTRY_ADMIN_PORT:-19901}
rest=http://127.0.0.1:$GANTRY_HTTP_PORT admin=http://127.0.0.1:$GANTRY_ADMIN_PORT

cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then "${compose[@]}" logs --no-color --tail=50 || true; fi
  "${compose[@]}" down -v --remove-orphans >/dev/null 2>&1 || true
  exit "$status"
}
trap cleanup EXIT

"${compose[@]}" up -d
# The stack is up once the secrets service answers through the gateway: 401, as no token is sent yet
# (503 while the gateway cannot reach it).
for _ in $(seq 1 60); do
  if [ "$(curl -s -o /dev/null -w '%{http_code}' "$rest/v1/value_generator")" = 401 ]; then break; fi
  sleep 0.5
done
# A user token minted in the secrets container, with the keyring of its data volume.
token=$("${compose[@]}" exec -T secrets /gantry token --from smoke --user-type user --data-dir /data --basic)

check() { # check <description> <expected status> <url> <body regex> [curl options]
  local body code
  body=$(curl -sS -o - -w '\n%{http_code}' "${@:5}" "$3")
  code=${body##*$'\n'}; body=${body%$'\n'*}
  if [ "$code" != "$2" ] || ! grep -Eq "$4" <<<"$body"; then
    echo "FAIL $1: status $code, body $body" >&2
    return 1
  fi
  echo "ok   $1: $code $body"
}
check "value_generator without a token" 401 "$rest/v1/value_generator" '"error":"authentication required'
check "value_generator through the gateway" 200 "$rest/v1/value_generator" '^\{"value":"[A-Za-z0-9]{50}"\}$' -u "$token"
check "get_team of a configured team" 200 "$rest/api/v1/chat/get_team/example-team" '"team_id":"T00000001"'
check "get_team of an unknown team" 404 "$rest/api/v1/chat/get_team/nope" '"error":"provided team_name is not configured\."'
check "server_info on the admin port" 200 "$admin/server_info" '^gantry [0-9a-f]{6}/RELEASE live [0-9]+ [0-9]+ 0$'
check "healthcheck on the REST port" 200 "$rest/healthcheck" '^OK$'
check "chat host in the admin clusters" 200 "$admin/clusters" '^chat::chat:9091::health_flags::'
check "prometheus stats on the admin port" 200 "$admin/stats/prometheus" '^envoy_cluster_upstream_rq_total\{envoy_cluster_name="chat"\} [0-9]+$'
check "admin refuses a foreign Host (DNS rebinding)" 403 "$admin/stats" '"error"' -H 'Host: evil.example'
# Least privilege inside: only the one-shot tls-init ever mounts the CA volume (ca.key); every service
# container mounts its own leaf volume, and no other.
for svc in secrets chat gateway; do
  mounts=$(docker inspect -f '{{range .Mounts}}{{.Name}}:{{.Destination}} {{end}}' "$("${compose[@]}" ps -q "$svc")")
  tls_mounts=$(grep -o "${COMPOSE_PROJECT_NAME}_tls-[a-z-]*:[^ ]*" <<<"$mounts" || true)
  if [ "$tls_mounts" != "${COMPOSE_PROJECT_NAME}_tls-$svc:/tls" ]; then
    echo "FAIL $svc mounts the internal TLS volumes '$tls_mounts', want only its own leaf at /tls" >&2
    exit 1
  fi
done
echo "ok   only tls-init mounts the CA; secrets, chat and gateway each mount their own leaf"
# Internal gRPC runs over mutual TLS, each container with its own leaf.
for svc in secrets chat gateway; do
  # Read the whole log first: grep -q stops at the first match, and with pipefail the SIGPIPE of the
  # writer would fail the check.
  svc_logs=$("${compose[@]}" logs --no-color "$svc")
  if ! grep -q 'internal gRPC uses mutual TLS' <<<"$svc_logs"; then
    echo "FAIL $svc did not start with internal mutual TLS" >&2
    exit 1
  fi
done
echo "ok   secrets, chat and gateway use internal mutual TLS"
# The image's /data is 0700, and a fresh volume mounted there keeps it: no warning about others.
secrets_logs=$("${compose[@]}" logs --no-color secrets)
if grep -q 'OPEN TO OTHER USERS' <<<"$secrets_logs"; then
  echo "FAIL secrets warns that /data is open to other users (the image's /data must be 0700)" >&2
  exit 1
fi
echo "ok   /data is not open to other users"
echo "compose smoke test passed"
