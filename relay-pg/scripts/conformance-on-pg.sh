#!/usr/bin/env bash
# The conformance suite against `relay --postgres` (a separate process, test mode) on the
# database in RELAY_TEST_POSTGRES_URL, in a schema of its own (dropped first: each run starts
# from an empty relay). Every hook: test clock, payment webhook secret, Web Push push probe.
#
#   eval "$(relay-pg/scripts/pg-test-cluster.sh start /tmp/pg)"
#   cargo build -p relay-server --bin relay && cargo build -p conformance --bin conformance
#   relay-pg/scripts/conformance-on-pg.sh [target/debug]
#
# Exits with the runner's code (0: every MUST case passed or is an expected failure). The
# relay's log goes to $BIN_DIR/conformance-on-pg.relay.log (printed when the run fails).
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/debug}
: "${RELAY_TEST_POSTGRES_URL:?RELAY_TEST_POSTGRES_URL is not set (start a cluster with pg-test-cluster.sh)}"

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])' 2>/dev/null \
    || echo $((20000 + RANDOM % 40000))
}

work=$(mktemp -d /tmp/relay-conformance-pg.XXXXXX)
log="$bin/conformance-on-pg.relay.log"
relay_pid=
cleanup() {
  if [ -n "$relay_pid" ]; then kill "$relay_pid" 2>/dev/null || true; wait "$relay_pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

schema=conformance_$$
port=$(free_port)
probe=$(free_port)
secret=conformance-webhook-secret
RELAY_PAYMENT_WEBHOOK_SECRET=$secret "$bin/relay" --postgres "$RELAY_TEST_POSTGRES_URL" \
  --pg-schema "$schema" --secrets-dir "$work/secrets" --test-mode --pow-difficulty 1 \
  --vapid-subject mailto:ops@example.org --listen "127.0.0.1:$port" --log warn >"$log" 2>&1 &
relay_pid=$!

# Ready once it leads (its own schema: nobody else campaigns there).
for _ in $(seq 1 300); do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null \
    && printf 'GET /readyz HTTP/1.0\r\n\r\n' | timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$port; cat >&3; cat <&3" 2>/dev/null | grep -q '"ready"'; then
    break
  fi
  if ! kill -0 "$relay_pid" 2>/dev/null; then cat "$log" >&2; echo "the relay exited" >&2; exit 2; fi
  sleep 0.1
done

# Held to our own choices too (`--profile reference`). CALL-002 needs a TURN relay, which the
# `relay` binary has no flag for yet (the embedded
# relay of the conformance tests configures one): not a store matter, skipped here.
status=0
"$bin/conformance" --relay "http://127.0.0.1:$port" --payment-secret "$secret" --clock-hook \
  --push-probe "http://127.0.0.1:$probe" --expected-failures conformance/expected-failures.txt \
  --skip CALL-002 --profile reference --quiet || status=$?
if [ "$status" != 0 ]; then
  echo "--- relay log" >&2
  cat "$log" >&2
fi
exit "$status"
