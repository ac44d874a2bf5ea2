#!/usr/bin/env bash
# A relay cluster on loopback: PostgreSQL, three `relay --cluster-node` processes sharing its
# shards, and HAProxy in front of them at one address (for tests, benches and trying it out).
#
#   deploy/cluster/loopback.sh start DIR [BIN_DIR]   # prints `export CLUSTER_URL=…` lines
#   deploy/cluster/loopback.sh kill DIR NODE         # kill -9 one node (n1, n2, n3)
#   deploy/cluster/loopback.sh pause DIR NODE        # SIGSTOP; `resume DIR NODE`: SIGCONT
#   deploy/cluster/loopback.sh restart DIR NODE      # start a killed node again (same name)
#   deploy/cluster/loopback.sh stop DIR              # everything down, DIR kept (logs)
#
# PostgreSQL: the database in RELAY_TEST_POSTGRES_URL, else a throwaway cluster started in
# DIR/pg by relay-pg/scripts/pg-test-cluster.sh (Debian's postgresql package). Each start uses
# a schema of its own. HAProxy: `haproxy` on the PATH (Debian's haproxy package).
#
# Settings from the environment: CLUSTER_NODES (3), CLUSTER_SHARDS (6), CLUSTER_PORT (the
# load balancer's port; default a free one), RELAY_ARGS (more flags for every node, e.g.
# "--test-mode --pow-difficulty 1"), RELAY_PAYMENT_WEBHOOK_SECRET (passed to every node).
# Every node logs to DIR/NODE.log, HAProxy to DIR/haproxy.log; each node's metrics are at the
# CLUSTER_N<i>_METRICS address it prints. The nodes believe HAProxy's
# X-Forwarded-For (--trusted-proxy 127.0.0.1): on loopback every local process could claim
# an address; on machines of their own, name the load balancer's address only.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
[ $# -ge 2 ] || usage
cmd=$1
dir=$2
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# GET PATH from 127.0.0.1:PORT; prints the answer (headers and body) or nothing.
http_get() {
  timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1; printf 'GET $2 HTTP/1.0\r\n\r\n' >&3; cat <&3" 2>/dev/null || true
}

# Starts node $1 (its port in DIR/$1.port) in the background; its pid goes to DIR/$1.pid.
start_node() {
  local node=$1 port
  port=$(cat "$dir/$node.port")
  # shellcheck disable=SC1091
  . "$dir/cluster.env"
  [ -f "$dir/$node.metrics" ] || free_port >"$dir/$node.metrics"
  # shellcheck disable=SC2086
  "$BIN_DIR/relay" --postgres "$PG_URL" --pg-schema "$SCHEMA" --secrets-dir "$dir/secrets" \
    --shards "$SHARDS" --cluster-node "$node" --listen "127.0.0.1:$port" \
    --metrics-listen "127.0.0.1:$(cat "$dir/$node.metrics")" \
    --trusted-proxy 127.0.0.1 ${RELAY_ARGS:-} >>"$dir/$node.log" 2>&1 &
  echo $! >"$dir/$node.pid"
}

# The number of shards node $1 serves now (its /readyz), or nothing.
served() {
  http_get "$(cat "$dir/$1.port")" /readyz | grep -o '"shards":\[[0-9,]*\]' | tr -cd ',0-9' \
    | awk -F, '{ print ($0 == "" ? 0 : NF) }' || true
}

# Waits until every node is ready and serves its even share of the shards (the moves of the
# nodes' joins are over), the load balancer answers, and then LEVELS_S more seconds: a shard's
# new core learns how full the other shards' queues are within about a second, and refuses a
# message to another shard's user until it does (STORAGE_UNAVAILABLE, "send it again").
wait_ready() {
  local lb=$1 nodes=$2 shards=$3 share
  share=$((shards / nodes))
  for _ in $(seq 1 600); do
    local even=0 total=0 count
    for n in $(seq 1 "$nodes"); do
      count=$(served "n$n")
      count=${count:-0}
      total=$((total + count))
      [ "$count" -ge "$share" ] && [ "$count" -le $((share + 1)) ] && even=$((even + 1))
    done
    if [ "$even" = "$nodes" ] && [ "$total" = "$shards" ] && http_get "$lb" /readyz | grep -q '"ready"'; then
      sleep "${LEVELS_S:-1.5}"
      return 0
    fi
    sleep 0.1
  done
  echo "the cluster did not become ready with an even spread of shards; logs in $dir" >&2
  return 1
}

write_haproxy() {
  local lb=$1 nodes=$2
  {
    # No global maxconn: HAProxy derives it from the open-file limit it is given.
    echo "global"
    echo "defaults"
    echo "    mode http"
    echo "    timeout connect 2s"
    echo "    timeout client 90s"
    echo "    timeout server 90s"
    echo "    timeout tunnel 1h"
    echo "    timeout http-request 10s"
    echo "    log stdout format raw local0 err"
    echo "frontend relay"
    echo "    bind 127.0.0.1:$lb"
    echo "    http-request deny deny_status 404 if { path_beg /cluster/ }"
    echo "    option forwardfor"
    echo "    default_backend nodes"
    echo "backend nodes"
    echo "    balance roundrobin"
    echo "    option httpchk GET /readyz"
    echo "    http-check expect status 200"
    echo "    retry-on conn-failure empty-response"
    echo "    retries 2"
    echo "    option redispatch"
    for n in $(seq 1 "$nodes"); do
      echo "    server n$n 127.0.0.1:$(cat "$dir/n$n.port") check inter 250ms fall 2 rise 1"
    done
  } >"$dir/haproxy.cfg"
}

case "$cmd" in
  start)
    BIN_DIR=$(cd "${3:-$root/target/debug}" && pwd)
    nodes=${CLUSTER_NODES:-3}
    shards=${CLUSTER_SHARDS:-6}
    command -v haproxy >/dev/null || { echo "haproxy is not installed (apt-get install haproxy)" >&2; exit 2; }
    [ -x "$BIN_DIR/relay" ] || { echo "no $BIN_DIR/relay (cargo build -p relay-server --bin relay)" >&2; exit 2; }
    pg_url=${RELAY_TEST_POSTGRES_URL:-}
    if [ -z "$pg_url" ]; then
      chmod 755 "$dir"   # the throwaway PostgreSQL runs as another user and keeps its data here
      "$root/relay-pg/scripts/pg-test-cluster.sh" start "$dir/pg" >"$dir/pg.env"
      pg_url=$(sed -n "s/^export RELAY_TEST_POSTGRES_URL='\(.*\)'$/\1/p" "$dir/pg.env")
    fi
    lb=${CLUSTER_PORT:-$(free_port)}
    {
      echo "BIN_DIR='$BIN_DIR'"
      echo "PG_URL='$pg_url'"
      echo "SCHEMA='cluster_$$_$(date +%s)'"
      echo "SHARDS=$shards"
      echo "RELAY_ARGS='${RELAY_ARGS:-}'"
    } >"$dir/cluster.env"
    for n in $(seq 1 "$nodes"); do
      free_port >"$dir/n$n.port"
      start_node "n$n"
      # The first node creates the cluster and its keys; the others copy nothing: they share
      # DIR/secrets (on machines of their own, copy the directory).
      if [ "$n" = 1 ]; then
        for _ in $(seq 1 300); do
          [ -f "$dir/secrets/cluster.key" ] && http_get "$(cat "$dir/n1.port")" /readyz | grep -q '"ready"' && break
          kill -0 "$(cat "$dir/n1.pid")" 2>/dev/null || { cat "$dir/n1.log" >&2; exit 2; }
          sleep 0.1
        done
      fi
    done
    write_haproxy "$lb" "$nodes"
    haproxy -f "$dir/haproxy.cfg" >"$dir/haproxy.log" 2>&1 &
    echo $! >"$dir/haproxy.pid"
    wait_ready "$lb" "$nodes" "$shards"
    echo "export CLUSTER_URL=http://127.0.0.1:$lb"
    for n in $(seq 1 "$nodes"); do
      echo "export CLUSTER_N${n}_URL=http://127.0.0.1:$(cat "$dir/n$n.port")"
      echo "export CLUSTER_N${n}_METRICS=http://127.0.0.1:$(cat "$dir/n$n.metrics")/metrics"
    done
    ;;
  kill)
    kill -9 "$(cat "$dir/$3.pid")"
    ;;
  pause)
    kill -STOP "$(cat "$dir/$3.pid")"
    ;;
  resume)
    kill -CONT "$(cat "$dir/$3.pid")"
    ;;
  restart)
    if kill -0 "$(cat "$dir/$3.pid")" 2>/dev/null; then
      echo "$3 is running" >&2
      exit 2
    fi
    start_node "$3"
    ;;
  stop)
    for pidfile in "$dir"/n*.pid "$dir/haproxy.pid"; do
      [ -f "$pidfile" ] || continue
      pid=$(cat "$pidfile")
      kill -CONT "$pid" 2>/dev/null || true
      kill "$pid" 2>/dev/null || true
    done
    for pidfile in "$dir"/n*.pid "$dir/haproxy.pid"; do
      [ -f "$pidfile" ] || continue
      pid=$(cat "$pidfile")
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      rm -f "$pidfile"
    done
    if [ -d "$dir/pg" ]; then
      "$root/relay-pg/scripts/pg-test-cluster.sh" stop "$dir/pg" >/dev/null 2>&1 || true
    fi
    ;;
  *)
    usage
    ;;
esac
