#!/usr/bin/env bash
# The conformance suite against a three-node cluster at its load balancer's address
# (deploy/cluster/loopback.sh: PostgreSQL, HAProxy, three `relay --cluster-node` processes in
# test mode), every hook on: test clock (it moves on every node), payment webhook secret, Web
# Push probe.
#
#   cargo build -p relay-server --bin relay -p conformance --bin conformance
#   deploy/cluster/conformance.sh [BIN_DIR]      # e.g. target/debug
#
# Uses the database in RELAY_TEST_POSTGRES_URL when set (a schema of its own), else starts a
# throwaway PostgreSQL. Exits with the runner's code; the nodes' and HAProxy's logs are printed
# when it fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/debug}
work=$(mktemp -d /tmp/relay-cluster-conformance.XXXXXX)
chmod 755 "$work"   # a throwaway PostgreSQL runs as another user and keeps its data in here
cleanup() {
  deploy/cluster/loopback.sh stop "$work" || true
  rm -rf "$work"
}
trap cleanup EXIT

secret=conformance-webhook-secret
probe=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cluster_env=$(RELAY_PAYMENT_WEBHOOK_SECRET=$secret \
  RELAY_ARGS="--test-mode --pow-difficulty 1 --vapid-subject mailto:ops@example.org --log warn" \
  deploy/cluster/loopback.sh start "$work" "$bin")
eval "$cluster_env"

# As conformance-on-pg.sh: held to our own choices too; CALL-002 needs a TURN relay the binary
# has no flag for.
status=0
"$bin/conformance" --relay "$CLUSTER_URL" --payment-secret "$secret" --clock-hook \
  --push-probe "http://127.0.0.1:$probe" --expected-failures conformance/expected-failures.txt \
  --skip CALL-002 --profile reference --quiet || status=$?
if [ "$status" != 0 ]; then
  for log in "$work"/n*.log "$work/haproxy.log"; do
    echo "--- $log" >&2
    cat "$log" >&2
  done
fi
exit "$status"
