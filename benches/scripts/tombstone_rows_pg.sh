#!/usr/bin/env bash
# A relay's start with N message-id tombstones in PostgreSQL, measured as an outsider: the time
# from exec to `/readyz` 200 and the process's resident memory then (three starts).
#
#   eval "$(relay-pg/scripts/pg-test-cluster.sh start /tmp/pg)"
#   cargo build --release -p relay-server --bin relay
#   benches/scripts/tombstone_rows_pg.sh target/release/relay 1000000 [--author-keys]
#
# Uses the database in RELAY_TEST_POSTGRES_URL, schema `tombbench` (dropped first and left
# behind: drop it after), keys in a fresh /tmp/pgsecrets. The relay creates its tables on a
# first start; the rows (10,000 authors, 40-character ids, expiring 7 days from now, accepted
# over the last hour) are then written with one INSERT … SELECT FROM generate_series. Needs
# psql, curl and bc. Rows are keyed `conv/id/author` (997 conversations) as the relay keys them;
# with --author-keys they are keyed `author/id` and the meta row saying the tombstones are keyed
# by conversation is deleted: an older relay's store, which the first of the three starts rekeys.
set -e
relay=$1; n=$2; url=$RELAY_TEST_POSTGRES_URL
key="'c' || (i % 997) || '/' || m || '/' || a"
[ "${3:-}" = --author-keys ] && key="a || '/' || m"
rm -rf /tmp/pgsecrets && mkdir -m 700 /tmp/pgsecrets
psql "$url" -qc "DROP SCHEMA IF EXISTS tombbench CASCADE" >/dev/null
start() {
  local t0=$(date +%s.%N)
  $relay --listen 127.0.0.1:47998 --postgres "$url" --pg-schema tombbench --secrets-dir /tmp/pgsecrets --log warn > /tmp/pgrelay.log 2>&1 &
  pid=$!
  until curl -sf http://127.0.0.1:47998/readyz >/dev/null 2>&1; do sleep 0.01; done
  local t1=$(date +%s.%N)
  echo "ready after $(echo "$t1 - $t0" | bc) s, RSS $(grep VmRSS /proc/$pid/status | awk '{print int($2/1024)}') MiB, peak $(grep VmHWM /proc/$pid/status | awk '{print int($2/1024)}') MiB"
  kill -TERM $pid; wait $pid || true
}
start > /dev/null
now=$(($(date +%s) * 1000)); ttl=$((7*24*3600*1000))
t0=$(date +%s)
psql "$url" -qc "INSERT INTO tombbench.tombstones (k, v, expires_at)
  SELECT $key, convert_to(json_build_object('author', a, 'id', m, 'conv_id', 'c' || (i % 997), 'seq', i / 10000 + 1, 'expires_at', e, 'retracted', false)::text, 'UTF8'), e
  FROM (SELECT i, '00000000-0000-4000-8000-' || lpad(to_hex(i % 10000 + 1), 12, '0') AS a,
               md5(i::text) || '-' || lpad((i % 1000)::text, 3, '0') AS m,
               $now + $ttl - ($n - i) * 3600000 / $n AS e FROM generate_series(1::bigint, $n) AS i) s" >/dev/null
[ "${3:-}" = --author-keys ] && psql "$url" -qc "DELETE FROM tombbench.meta WHERE k = 'tombstones_by_conversation'" >/dev/null
psql "$url" -qc "VACUUM ANALYZE tombbench.tombstones" >/dev/null
echo "$n rows written in $(( $(date +%s) - t0 )) s; table $(psql "$url" -tAc "SELECT pg_size_pretty(pg_total_relation_size('tombbench.tombstones'))")"
for r in 1 2 3; do start; done
