"""A sender with a week of message ids, measured as an outsider: the time each of its messages
takes to be acknowledged once its tombstones outweigh the relay's tombstone cache. Needs
Python's `cryptography` package.

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/heavy_author.py target/release/relay DIR 1000000 [MESSAGES] [--bystander] [-- RELAY ARGS]
    python3 benches/scripts/heavy_author.py target/release/relay DIR 1000000 --postgres URL [...]

Starts the relay on a fresh SQLite data directory DIR (`--pow-difficulty 0`), registers two
accounts over HTTP and makes them friends, stops it, writes N tombstone rows of the first
account straight into `DIR/relay.sqlite3` (40-character ids, accepted over the last week,
~150 bytes each as the cache weighs them: 1,000,000 of them are ~2.5x the default 64 MiB
cache), starts it again and sends MESSAGES (default 50) `msg` frames from that account over its
WebSocket, one at a time, each timed from send to its `ack`. Prints the first message's time
(whatever the relay reads for that author at its first message), the median and the maximum of
the rest, and the relay's tombstone counters from its metrics.

With `--bystander`, two more accounts are friends too; after the restart one of them sends a
message to the other, waits for its ack and sends the next 1 ms later, all along (the relay's
per-user message limit is lifted for it), and another thread asks `GET /healthz` every 5 ms: the script prints the bystander's ack times and `/healthz`'s while
the heavy author's first message was in flight (p50, p99, max), which is what a relay that reads
on the task serving everyone makes everyone else wait. Arguments after `--` go to the relay
(e.g. `--read-threads 0` to read on that task).

With `--postgres URL` the relay runs on that database instead (schema `heavybench`, dropped
first and left behind; keys in DIR), and the tombstones are written with one `INSERT … SELECT
FROM generate_series` through `psql`.
"""
import http.client, json, os, sqlite3, sys, threading, time, uuid

from relaystart import start, stop
from wsclient import Socket, b64, befriend, login, request, signed_up

args, relay_args = sys.argv[1:], []
if "--" in args:
    args, relay_args = args[:args.index("--")], args[args.index("--") + 1:]
bystander = "--bystander" in args
args = [x for x in args if x != "--bystander"]
postgres = None
if "--postgres" in args:
    i = args.index("--postgres")
    postgres = args[i + 1]
    args = args[:i] + args[i + 2:]
relay, data, n = args[0], args[1], int(args[2])
messages = int(args[3]) if len(args) > 3 else 50
port = 47950 + os.getpid() % 40
metrics_port = port + 40
if postgres:
    import subprocess
    subprocess.run(["psql", postgres, "-qc", "DROP SCHEMA IF EXISTS heavybench CASCADE"],
                   check=True, stdout=subprocess.DEVNULL)
    os.makedirs(data, mode=0o700, exist_ok=True)
    where = ["--postgres", postgres, "--pg-schema", "heavybench", "--secrets-dir", data]
else:
    where = ["--data", data]
store = [*where, "--pow-difficulty", "0",
         "--metrics-listen", f"127.0.0.1:{metrics_port}", *relay_args]
if bystander:
    # The bystander sends all along: past the default per-user message limit.
    store += ["--msgs-per-min-per-user", "1000000"]


def call(method, path, body=None, token=None, at=port):
    st, text = request(at, method, path, body, token)
    return st, (json.loads(text) if text and st < 300 and path != "/metrics" else text)


def tombstone_counters():
    _, text = call("GET", "/metrics", at=metrics_port)
    out = {}
    for line in text.decode().splitlines():
        for name in ("relay_tombstone_sets_read_total", "relay_tombstone_rows_read_total"):
            if line.startswith(name + " "):
                out[name] = float(line.split()[1])
    return out


def send_and_wait(ws, mid, to, conv, payload):
    """Sends `msg` `mid` and returns the ms until its ack."""
    t = time.perf_counter()
    ws.send({"type": "msg", "id": mid, "to": to["alias"], "conv_id": conv, "crypto_v": 1,
             "payload": payload})
    while True:
        f = ws.recv()
        if f and f.get("type") == "ack" and f.get("id") == mid:
            return (time.perf_counter() - t) * 1000
        assert not (f and f.get("type") == "error"), f


def quantiles(xs):
    xs = sorted(xs)
    if not xs:
        return "none"
    return (f"{len(xs)} of them: p50 {xs[len(xs) // 2]:.1f} ms, "
            f"p99 {xs[min(len(xs) - 1, len(xs) * 99 // 100)]:.1f} ms, max {xs[-1]:.1f} ms")


class Bystanders:
    """A pair exchanging messages one at a time and a `/healthz` poller, each time kept with
    when it ended."""

    def __init__(self, c, d, conv):
        self.stop, self.acks, self.health = threading.Event(), [], []
        login(port, c)
        self.ws = Socket(port, f"user_uuid={c['uuid']}&token={c['token']}")
        self.ws.send({"type": "sync", "crypto_v": 1})
        send_and_wait(self.ws, "warm", d, conv, b64(b"warm"))
        self.threads = [threading.Thread(target=self.talk, args=(d, conv)),
                        threading.Thread(target=self.poll)]
        for t in self.threads:
            t.start()

    def talk(self, d, conv):
        i = 0
        while not self.stop.is_set():
            ms = send_and_wait(self.ws, f"by-{i}", d, conv, b64(os.urandom(100)))
            self.acks.append((time.perf_counter(), ms))
            i += 1
            time.sleep(0.001)

    def poll(self):
        while not self.stop.is_set():
            t = time.perf_counter()
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            c.request("GET", "/healthz")
            c.getresponse().read()
            c.close()
            self.health.append((time.perf_counter(), (time.perf_counter() - t) * 1000))
            time.sleep(0.005)

    def during(self, start, end):
        """The times of what was in flight at some moment in [start, end]."""
        pick = lambda xs: [ms for at, ms in xs if at >= start and at - ms / 1000 <= end]
        return pick(self.acks), pick(self.health)

    def end(self):
        self.stop.set()
        for t in self.threads:
            t.join()


p, _, _, _ = start(relay, store, port)
a, b = signed_up(port, "heavy"), signed_up(port, "peer")
conv = befriend(port, a, b)
if bystander:
    c, d = signed_up(port, "by"), signed_up(port, "stander")
    by_conv = befriend(port, c, d)
stop(p)

now_ms = int(time.time() * 1000)
week = 7 * 24 * 3600 * 1000
t0 = time.perf_counter()
if postgres:
    # The same rows as below, written by the database itself.
    subprocess.run(["psql", postgres, "-qc", f"""
        INSERT INTO heavybench.tombstones (k, v, expires_at)
        SELECT '{a["uuid"]}/' || m, convert_to(json_build_object('author', '{a["uuid"]}',
               'id', m, 'conv_id', '{conv}', 'seq', i, 'expires_at', e,
               'retracted', false)::text, 'UTF8'), e
        FROM (SELECT i, md5(i::text) || '-' || lpad((i % 1000)::text, 3, '0') AS m,
                     {now_ms + week} - ({n} - i + 1) * {week // 2} / {n} AS e
              FROM generate_series(1::bigint, {n}) AS i) s"""],
                   check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["psql", postgres, "-qc", "VACUUM ANALYZE heavybench.tombstones"],
                   check=True, stdout=subprocess.DEVNULL)
db = None if postgres else sqlite3.connect(os.path.join(data, "relay.sqlite3"))
with db or open(os.devnull):
    rows = []
    for i in range(0 if postgres else n):
        mid = f"{uuid.UUID(int=(i + 1) << 32, version=4)}-{i % 1000:03d}"
        expires = now_ms + week - (n - i) * (week // 2) // n
        value = json.dumps({"author": a["uuid"], "id": mid, "conv_id": conv, "seq": i + 1,
                            "expires_at": expires, "retracted": False},
                           separators=(",", ":")).encode()
        rows.append((f"{a['uuid']}/{mid}", value, expires))
        if len(rows) == 50_000 or i == n - 1:
            db.executemany("INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?)", rows)
            rows = []
if db:
    db.close()
print(f"{n} tombstones of one author written in {time.perf_counter() - t0:.1f} s")

p, _, _, _ = start(relay, store, port)
try:
    login(port, a)
    ws = Socket(port, f"user_uuid={a['uuid']}&token={a['token']}")
    ws.send({"type": "sync", "crypto_v": 1})
    payload = b64(os.urandom(300))
    others = Bystanders(c, d, by_conv) if bystander else None
    if others:
        time.sleep(0.5)
    times, first_at = [], time.perf_counter()
    for i in range(messages):
        times.append(send_and_wait(ws, f"fresh-{i}", b, conv, payload))
    if others:
        time.sleep(0.3)
        others.end()
        acks, health = others.during(first_at, first_at + times[0] / 1000)
        print(f"while the first message was in flight ({times[0]:.1f} ms): bystander acks "
              f"{quantiles(acks)}; /healthz {quantiles(health)}")
        print(f"all along: bystander acks {quantiles([ms for _, ms in others.acks])}; "
              f"/healthz {quantiles([ms for _, ms in others.health])}")
    rest = sorted(times[1:])
    print(f"{messages} messages from an author with {n} tombstones: first {times[0]:.1f} ms, "
          f"then p50 {rest[len(rest) // 2]:.2f} ms, max {rest[-1]:.2f} ms; "
          f"total {sum(times) / 1000:.2f} s; {tombstone_counters()}")
finally:
    stop(p)
