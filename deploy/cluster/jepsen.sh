#!/usr/bin/env bash
# Jepsen mode against a three-node cluster at its load balancer's address
# (deploy/cluster/loopback.sh), with process faults on single nodes during the traffic
# window: kill -9 of one node and its restart, then SIGSTOP of another past its lease and its
# SIGCONT. The simulator's apps run the scenario through the load balancer (and its fault
# proxy's toxics), then heal and judge what every client saw (README "Testing another relay
# implementation": delivered exactly once, seq order, acks never lost, receipts, liveness).
#
#   cargo build --release -p relay-server --bin relay -p sim --bin simulate
#   deploy/cluster/jepsen.sh [BIN_DIR] [SEED]     # e.g. target/release 1
#
# Settings: WINDOW_MS (the traffic window, 24000), CLUSTER_SHARDS (6), PROXY_TOXICS (the
# proxy's toxics; `none` leaves the node faults alone); the faults' times are fractions of the
# window. Also prints each message's latency by the phase it was sent in. Writes DIR/jepsen.json (the report with its history), prints the
# simulator's verdict and, from the nodes' logs, how long the faulted nodes' shards were away,
# and from their metrics what their shards' outboxes hold at the end; exits with the
# simulator's code, 4 when a fault did not land (no shard moved), 5 when an outbox did not
# drain.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${1:-target/release}
seed=${2:-1}
window=${WINDOW_MS:-24000}
work=$(mktemp -d /tmp/relay-cluster-jepsen.XXXXXX)
chmod 755 "$work"
faults=
cleanup() {
  [ -n "$faults" ] && kill "$faults" 2>/dev/null || true
  deploy/cluster/loopback.sh stop "$work" || true
}
trap cleanup EXIT

secret=jepsen-webhook-secret
export RELAY_PAYMENT_WEBHOOK_SECRET=$secret   # a restarted node needs it too
cluster_env=$(RELAY_ARGS="--pow-difficulty 0 --log info" deploy/cluster/loopback.sh start "$work" "$bin")
eval "$cluster_env"
echo "cluster at $CLUSTER_URL (logs in $work)"

# The faults, timed from the start of the run (the apps' setup takes a second or two first).
at() { python3 -c "print($window * $1 / 1000)"; }
stamp() { python3 -c 'import time; print(time.time())' >"$work/$1.at"; }
(
  sleep "$(at 0.25)"; echo "fault: kill -9 n2"; stamp kill; deploy/cluster/loopback.sh kill "$work" n2
  sleep "$(at 0.15)"; echo "fault: restart n2"; stamp restarted
  deploy/cluster/loopback.sh restart "$work" n2
  sleep "$(at 0.15)"; echo "fault: SIGSTOP n3 (past its 3 s lease)"; stamp pause
  deploy/cluster/loopback.sh pause "$work" n3
  sleep 5; echo "fault: SIGCONT n3"; stamp resumed; deploy/cluster/loopback.sh resume "$work" n3
) &
faults=$!

status=0
stamp start
"$bin/simulate" --relay-url "$CLUSTER_URL" --payment-secret "$secret" --seed "$seed" \
  --window-ms "$window" --proxy-toxics "${PROXY_TOXICS:-latency,bandwidth,slicer,reset_peer,hold}" \
  --history "$work/jepsen.json" || status=$?
wait "$faults" || true
faults=

# Did the faults land, and how long were the shards of the killed and the paused node away?
# (From the nodes' logs: when another node owned them, and when it served them.)
python3 - "$work" <<'PY' || status=4
import datetime, json, re, sys
work = sys.argv[1]
def at(line):
    stamp = re.search(r"\d{4}-\d\d-\d\dT[\d:.]+Z", re.sub(r"\x1b\[[0-9;]*m", "", line))
    return datetime.datetime.fromisoformat(stamp.group(0).replace("Z", "+00:00")).timestamp() if stamp else None
def lines(node):
    return [re.sub(r"\x1b\[[0-9;]*m", "", l) for l in open(f"{work}/{node}.log", errors="replace")]
def first_after(nodes, t, text):
    found = [at(l) for n in nodes for l in lines(n) if text in l and (at(l) or 0) > t]
    return min(found) if found else None
ok = True
for fault, node, others in [("kill", "n2", ["n1", "n3"]), ("pause", "n3", ["n1", "n2"])]:
    t = float(open(f"{work}/{fault}.at").read())
    owned = first_after(others, t, "the shards this node owns changed")
    served = first_after(others, t, "the shards served here changed")
    if owned is None or served is None:
        print(f"{fault} of {node}: its shards never moved (the fault did not land)")
        ok = False
        continue
    print(f"{fault} of {node}: its shards owned elsewhere {1000 * (owned - t):.0f} ms after, served {1000 * (served - t):.0f} ms after (lease 3000 ms)")
# Each message's latency (sent → the recipient's socket had it), by the phase it was sent in.
start = float(open(f"{work}/start.at").read())
history = json.load(open(f"{work}/jepsen.json"))["history"]
sent = {e["what"]["send"]: e["t_ms"] for e in history if "send" in e["what"]}
got = {}
for e in history:
    if "message" in e["what"] and not e["what"].get("is_me"):
        got.setdefault(e["what"]["message"], e["t_ms"])
marks = [("before", 0.0)] + [(name, 1000 * (float(open(f"{work}/{f}.at").read()) - start)) for f, name in
         [("kill", "n2 killed"), ("restarted", "n2 joins again"), ("pause", "n3 paused"), ("resumed", "n3 resumed")]]
for i, (name, begin) in enumerate(marks):
    end = marks[i + 1][1] if i + 1 < len(marks) else float("inf")
    xs = sorted(got[m] - t for m, t in sent.items() if m in got and begin <= t < end)
    if xs:
        print(f"  sent {name:<15} {len(xs):>4} messages, latency p50 {xs[len(xs) // 2]} ms, p99 {xs[min(len(xs) - 1, int(len(xs) * 0.99))]} ms, max {xs[-1]} ms")
rejoined = sum("joined the cluster" in l for l in lines("n2"))
lost = any("cluster membership lost" in l for l in lines("n3"))
print(f"n2 joined {rejoined} times; n3 lost its membership: {lost}")
sys.exit(0 if ok and rejoined >= 2 and lost else 1)
PY
# The nodes' metrics once the run is over: every shard's outbox drained (a row left is a
# hand-off its recipient's shard never took), and the upgrades each node held after a start
# until it knew how full the other shards' queues are. Exits 5 when an outbox stays full.
python3 - <<'PY' || { if [ "$status" = 0 ]; then status=5; fi; }
import os, re, sys, time, urllib.request
nodes = {f"n{i}": os.environ[f"CLUSTER_N{i}_METRICS"] for i in (1, 2, 3)}
def scrape(url):
    with urllib.request.urlopen(url, timeout=5) as r:
        text = r.read().decode()
    outbox = {int(m.group(1)): int(float(m.group(2)))
              for m in re.finditer(r'^relay_shard_outbox\{shard="(\d+)"\} (\S+)$', text, re.M)}
    held = re.search(r"^relay_upgrades_held_total (\S+)$", text, re.M)
    return outbox, int(float(held.group(1))) if held else 0
deadline = time.time() + 10
while True:
    seen = {n: scrape(url) for n, url in nodes.items()}
    left = {n: {s: k for s, k in o.items() if k} for n, (o, _) in seen.items()}
    if not any(left.values()) or time.time() > deadline:
        break
    time.sleep(0.5)
for n, (outbox, held) in seen.items():
    print(f"{n}: upgrades held after a start {held}; outbox rows by shard {dict(sorted(outbox.items()))}")
if any(left.values()):
    print(f"outboxes not drained 10 s after the run: {left}")
    sys.exit(1)
PY
echo "report: $work/jepsen.json; node logs: $work/n*.log"
exit "$status"
