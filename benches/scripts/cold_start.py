"""A cold start, measured as an outsider: after a restart (what a standby that takes over after
a failover starts from: nothing of any user in memory), many users make their first request
and upgrade at once while others already served exchange messages. Needs Python's
`cryptography` package.

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/cold_start.py target/release/relay DIR USERS [--postgres URL] [-- RELAY ARGS]

Starts the relay on a fresh store (SQLite in DIR, or with `--postgres URL` the schema
`coldbench` of that database, dropped first and left behind, keys in DIR), registers USERS
accounts over HTTP (each network address registers ten: the script's clients bind to
127.0.x.y, and the relay keys its bounds on the whole address, `--ipv4-prefix 32`) plus five
pairs of friends (their message and frame limits lifted), signs every one in, and restarts the
relay. Then:

* **warm**: the five pairs connect and each sender sends a message, waits for its ack and sends
  the next, for 3 s: the ack times of a relay with nothing cold to read (the baseline);
* **cold start**: the same exchange goes on while eight client threads take the USERS cold
  accounts, each asking a WebSocket ticket (`POST /api/v1/ws/ticket`: the account is read)
  and upgrading with it (the first touch of a user): the pairs' ack times meanwhile, and each
  first touch's time;
* **warm touches**: the same touches again, every account now in memory: the same load
  without a read, the fair baseline for the cold start's ack times.

Prints the three phases' ack times (p50, p99, max), the cold start's p99 over the others', the first touches' times, and
the relay's read counters from its metrics. Arguments after `--` go to the relay (e.g.
`--read-threads 0`: every read on the core task).
"""
import json, os, subprocess, sys, threading, time

from relaystart import start, stop
from wsclient import Socket, b64, befriend, request, signed_up

args, relay_args = sys.argv[1:], []
if "--" in args:
    args, relay_args = args[:args.index("--")], args[args.index("--") + 1:]
postgres = None
if "--postgres" in args:
    i = args.index("--postgres")
    postgres = args[i + 1]
    args = args[:i] + args[i + 2:]
relay, data, users = args[0], args[1], int(args[2])
port = 48050 + os.getpid() % 40
metrics_port = port + 40
os.makedirs(data, mode=0o700, exist_ok=True)
if postgres:
    subprocess.run(["psql", postgres, "-qc", "DROP SCHEMA IF EXISTS coldbench CASCADE"],
                   check=True, stdout=subprocess.DEVNULL)
    where = ["--postgres", postgres, "--pg-schema", "coldbench", "--secrets-dir", data]
else:
    where = ["--data", data]
store = [*where, "--pow-difficulty", "0", "--ipv4-prefix", "32",
         "--msgs-per-min-per-user", "1000000", "--frames-per-min-per-conn", "10000000",
         "--frame-burst-per-conn", "100000", "--max-connections-per-addr", "1000",
         "--metrics-listen", f"127.0.0.1:{metrics_port}"]


def address(i):
    """The client address of account `i` (ten accounts per address)."""
    k = i // 10
    return f"127.0.{k // 250}.{k % 250 + 2}"


def call(method, path, body=None, token=None, src="127.0.0.1"):
    st, text = request(port, method, path, body, token, src)
    return st, (json.loads(text) if text and st < 300 else text)


def account(i):
    return signed_up(port, f"u{i}", address(i))


def in_threads(n, items, work):
    """Runs `work(item)` for every item on `n` threads; returns the results in order."""
    out, lock, it, failed = [None] * len(items), threading.Lock(), iter(range(len(items))), []

    def run():
        while not failed:
            with lock:
                i = next(it, None)
            if i is None:
                return
            try:
                out[i] = work(items[i])
            except Exception as e:  # reported after the join, with the item's index
                failed.append((i, repr(e)))

    threads = [threading.Thread(target=run) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failed:
        sys.exit(f"failed: {failed[:3]}")
    return out


def first_touch(a):
    """A cold user's first request and upgrade; returns its ms."""
    t = time.perf_counter()
    st, tk = call("POST", "/api/v1/ws/ticket", {}, a["token"], src=a["src"])
    assert st == 200, (st, tk)
    ws = Socket(port, f"user_uuid={a['uuid']}&ticket={tk['ticket']}", src=a["src"])
    ms = (time.perf_counter() - t) * 1000
    ws.close()
    return ms


class Pairs:
    """Five senders, each sending a message, waiting for its ack and sending the next; every ack
    time kept with when it came."""

    def __init__(self, pairs):
        self.acks, self.stop, self.threads = [], False, []
        for x, y, conv in pairs:
            ws = Socket(port, f"user_uuid={x['uuid']}&token={x['token']}")
            peer = Socket(port, f"user_uuid={y['uuid']}&token={y['token']}")
            peer.send({"type": "sync", "crypto_v": 1})
            t = threading.Thread(target=self.talk, args=(ws, peer, y, conv))
            r = threading.Thread(target=self.receive, args=(peer, x, conv), daemon=True)
            t.start()
            r.start()
            self.threads.append(t)

    def receive(self, peer, x, conv):
        """The recipient acknowledges each message as a client does (its queue stays short)."""
        while not self.stop:
            try:
                f = peer.recv()
            except (AssertionError, OSError):
                return
            if f and f.get("type") == "msg":
                peer.send({"type": "delivered", "conv_id": conv, "seq": f["seq"],
                           "to": x["alias"]})

    def talk(self, ws, peer, y, conv):
        payload, i = b64(os.urandom(200)), 0
        while not self.stop:
            i += 1
            t = time.perf_counter()
            ws.send({"type": "msg", "id": f"m-{id(ws)}-{i}", "to": y["alias"], "conv_id": conv,
                     "crypto_v": 1, "payload": payload})
            while True:
                f = ws.recv()
                if f and f.get("type") == "ack":
                    break
                assert not (f and f.get("type") == "error"), f
            self.acks.append((time.perf_counter(), (time.perf_counter() - t) * 1000))
            time.sleep(0.001)

    def between(self, start, end):
        return [ms for at, ms in self.acks if start <= at <= end]

    def end(self):
        self.stop = True
        for t in self.threads:
            t.join()


def quantiles(xs):
    xs = sorted(xs)
    if not xs:
        return "none", 0.0
    p99 = xs[min(len(xs) - 1, len(xs) * 99 // 100)]
    return (f"{len(xs)}: p50 {xs[len(xs) // 2]:.2f} ms, p99 {p99:.2f} ms, "
            f"max {xs[-1]:.2f} ms"), p99


def counters():
    text = request(metrics_port, "GET", "/metrics")[1].decode()
    names = ("relay_requests_parked_total", "relay_frames_parked_total",
             "relay_reads_inline_total", "relay_accounts_read_total")
    return {n: float(l.split()[1]) for l in text.splitlines() for n in names
            if l.startswith(n + " ")}


p, _, _, _ = start(relay, store, port)
t0 = time.perf_counter()
everyone = in_threads(4, list(range(users + 10)), account)
pairs = [(everyone[users + 2 * k], everyone[users + 2 * k + 1]) for k in range(5)]
pairs = [(x, y, befriend(port, x, y)) for x, y in pairs]
cold = everyone[:users]
print(f"{users + 10} accounts registered and signed in in {time.perf_counter() - t0:.1f} s",
      flush=True)
stop(p)

p, ready, _, _ = start(relay, store, port, relay_args)
try:
    talk = Pairs(pairs)
    time.sleep(0.5)
    w0 = time.perf_counter()
    time.sleep(3)
    w1 = time.perf_counter()
    c0 = time.perf_counter()
    touches = in_threads(8, cold, first_touch)
    c1 = time.perf_counter()
    time.sleep(0.5)
    a0 = time.perf_counter()
    again = in_threads(8, cold, first_touch)
    a1 = time.perf_counter()
    time.sleep(0.2)
    talk.end()
    warm, warm_p99 = quantiles(talk.between(w0, w1))
    during, during_p99 = quantiles(talk.between(c0, c1))
    busy, busy_p99 = quantiles(talk.between(a0, a1))
    first, _ = quantiles(touches)
    second, _ = quantiles(again)
    print(f"relay args {relay_args or '(default)'}; store {'PostgreSQL' if postgres else 'SQLite'}")
    print(f"warm, nothing cold: acks {warm}")
    print(f"cold start, {users} first touches in {c1 - c0:.2f} s: acks {during} "
          f"(p99 {during_p99 / warm_p99:.2f}x warm)")
    print(f"the same touches again, warm, in {a1 - a0:.2f} s: acks {busy} "
          f"(cold start's p99 {during_p99 / busy_p99:.2f}x this)")
    print(f"first touches (ticket + upgrade): {first}; again: {second}")
    print(f"counters: {counters()}")
finally:
    stop(p)
