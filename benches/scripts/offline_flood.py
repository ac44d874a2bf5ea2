"""Accounts flooding offline recipients, measured as an outsider: the relay's resident memory
(VmRSS, VmHWM, RssAnon from /proc) beside its own queue gauges (`relay_queued_bytes`,
`relay_queue_cache_bytes`, ...) at each phase. Needs Python's `cryptography` package.

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/offline_flood.py --relay-bin target/release/relay --accounts 100
    python3 benches/scripts/offline_flood.py --wrap 'heaptrack -o /tmp/flood' [...]
    MALLOC_ARENA_MAX=2 python3 benches/scripts/offline_flood.py [...]   # the relay inherits it

Starts the relay (`--pow-difficulty 0`, `--log warn`, metrics on their own port) on a fresh
SQLite data directory, registers N senders and N recipients (from 127.0.0.2, 127.0.0.3, ...:
the relay allows 10 registrations per address per hour), makes each sender a friend of its own
recipient, and keeps the recipients offline. Then, in waves:

  flood   every sender (one thread each, its own WebSocket) sends `msg` frames of the largest
          payload (48 KiB of base64) to its recipient, one at a time, until the queue bounds
          refuse (QUEUE_FULL, SENDER_QUEUE_FULL, RECIPIENT_QUEUE_FULL, RELAY_QUEUE_FULL);
          RATE_LIMITED waits and sends again
  drain   every recipient connects, sends `sync` and answers each `msg` with `delivered`, until
          the relay's `relay_queued_messages` reads 0; then the recipients disconnect

and prints memory and gauges at start (everyone registered, befriended, senders connected),
after each flood, after each drain, and --settle seconds after the last drain. Arguments after
`--` go to the relay (e.g. `--queue-cache-bytes 1048576`).
"""
import argparse, json, os, shlex, signal, socket, subprocess, sys
import tempfile, threading, time

from wsclient import Socket, befriend, request, signed_up

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                             formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--relay-bin", default="target/release/relay", help="the relay binary")
ap.add_argument("--accounts", type=int, default=100, help="senders")
ap.add_argument("--recipients", type=int, default=0,
                help="recipients (default: one per sender); sender i writes to recipient i mod R, "
                     "so each recipient has accounts/R conversations")
ap.add_argument("--ack-delay-ms", type=float, default=0,
                help="a recipient waits this long before each receipt while draining (a slow phone)")
ap.add_argument("--data", help="SQLite data directory (must not exist; default: a fresh temp dir, removed after)")
ap.add_argument("--port", type=int, default=0, help="relay port (default from the pid)")
ap.add_argument("--waves", type=int, default=2, help="flood+drain rounds")
ap.add_argument("--payload", type=int, default=48 * 1024, help="payload bytes (base64 text)")
ap.add_argument("--settle", type=float, default=5.0, help="seconds to wait before the last sample")
ap.add_argument("--wrap", default="", help="command prefix for the relay, e.g. 'heaptrack -o FILE'")
ap.add_argument("--no-drain", action="store_true", help="floods only (the recipients never connect)")
ap.add_argument("--gdb-trim", action="store_true",
                help="at the end, call glibc's malloc_trim(0) in the relay through gdb and sample again "
                     "(what RSS is free memory the allocator kept)")
ap.add_argument("--sigkill", action="store_true",
                help="end the relay with SIGKILL, not SIGTERM: under heaptrack, its 'leaked' is then "
                     "what was live at the last sample, not after a graceful shutdown")
ap.add_argument("--keep", action="store_true", help="keep the relay running at the end until Enter")
args, relay_args = ap.parse_known_args()
if relay_args and relay_args[0] == "--":
    relay_args = relay_args[1:]

port = args.port or 47000 + os.getpid() % 400 * 2
metrics_port = port + 1
REFUSED = {"QUEUE_FULL", "SENDER_QUEUE_FULL", "RECIPIENT_QUEUE_FULL", "RELAY_QUEUE_FULL"}


# --- the relay process ---------------------------------------------------------------------

def start_relay(data):
    cmd = [*shlex.split(args.wrap), args.relay_bin, "--listen", f"127.0.0.1:{port}",
           "--data", data, "--pow-difficulty", "0", "--log", "warn",
           "--metrics-listen", f"127.0.0.1:{metrics_port}", *relay_args]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         start_new_session=True)
    t0 = time.time()
    while True:
        try:
            st, _ = call("GET", "/readyz")
            if st == 200:
                break
        except OSError:
            pass
        if p.poll() is not None:
            sys.exit(f"the relay exited: {p.stderr.read().decode()[-2000:]}")
        if time.time() - t0 > 120:
            sys.exit("the relay was not ready within 120 s")
        time.sleep(0.05)
    return p, relay_pid(p.pid)


def relay_pid(root):
    """The pid of the relay binary itself: `root` or one of its descendants (under --wrap)."""
    want = os.path.realpath(args.relay_bin)
    todo = [root]
    while todo:
        pid = todo.pop()
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == want:
                return pid
            for tid in os.listdir(f"/proc/{pid}/task"):
                todo += [int(c) for c in open(f"/proc/{pid}/task/{tid}/children").read().split()]
        except OSError:
            pass
    sys.exit("could not find the relay's process")


def memory(pid):
    status = open(f"/proc/{pid}/status").read()
    kb = {l.split(":")[0]: int(l.split()[1]) for l in status.splitlines()
          if l.split(":")[0] in ("VmRSS", "VmHWM", "RssAnon", "Threads")}
    return kb


OTHER_CACHES = ("relay_tombstone_cache_bytes", "relay_account_cache_bytes",
                "relay_conversation_cache_bytes", "relay_contact_cache_bytes")


def gauges():
    _, text = call("GET", "/metrics", at=metrics_port)
    out = {}
    for line in text.decode().splitlines():
        name = line.split(" ")[0]
        if name in ("relay_queued_messages", "relay_queued_bytes", "relay_queue_cache_bytes",
                    "relay_outbound_queued_bytes", "relay_tombstone_cache_bytes",
                    "relay_account_cache_bytes", "relay_conversation_cache_bytes",
                    "relay_contact_cache_bytes", "relay_queues_read_total"):
            out[name] = float(line.split()[1])
    return out


MiB = 1 << 20
rows = []


def sample(phase, pid, extra=""):
    m, g = memory(pid), gauges()
    row = (phase, m["VmRSS"] / 1024, m["VmHWM"] / 1024, m["RssAnon"] / 1024, m["Threads"],
           g.get("relay_queued_messages", 0), g.get("relay_queued_bytes", 0) / MiB,
           g.get("relay_queue_cache_bytes", 0) / MiB, g.get("relay_outbound_queued_bytes", 0) / MiB,
           sum(v for k, v in g.items() if k.endswith("_cache_bytes") and "queue" not in k) / MiB,
           g.get("relay_queues_read_total", 0))
    rows.append(row)
    print(f"{phase:<14} RSS {row[1]:7.1f} MiB  HWM {row[2]:7.1f}  anon {row[3]:7.1f}  thr {row[4]:3d}"
          f"  | queued {row[5]:6.0f} msgs {row[6]:7.1f} MiB  queue_cache {row[7]:6.1f} MiB"
          f"  outbound {row[8]:5.1f}  other caches {row[9]:5.1f} MiB  queue reads {row[10]:.0f} {extra}", flush=True)


# --- HTTP helper (the client is benches/scripts/wsclient.py) ------------------------------------

def call(method, path, body=None, token=None, at=None, src=None):
    st, text = request(at or port, method, path, body, token, src)
    return st, (json.loads(text) if text and st < 300 and path.startswith("/api") else text)





def query(a):
    """The upgrade's query of account `a` (its token)."""
    return f"user_uuid={a['uuid']}&token={a['token']}"


# --- the phases ------------------------------------------------------------------------------

def flood(wave, senders, recipients, convs, out):
    """Each sender sends to its recipient until refused; `out` gets (parked msgs, bytes, codes)."""
    payload = ("QUJD" * (args.payload // 4 + 1))[:args.payload]

    def one(i):
        ws, to, conv = senders[i]["ws"], recipients[i % len(recipients)], convs[i]
        k, parked, code = 0, 0, None
        while True:
            mid = f"w{wave}-s{i}-{k}"
            ws.send({"type": "msg", "id": mid, "to": to["alias"], "conv_id": conv,
                     "crypto_v": 1, "payload": payload})
            while True:
                f = ws.recv()
                if f is None:
                    raise ConnectionError(f"sender {i}: closed")
                if f.get("type") == "ack" and f.get("id") == mid:
                    parked, k = parked + 1, k + 1
                    break
                if f.get("type") == "error":
                    break
            if f.get("type") == "error":
                code = f.get("error")
                if code == "RATE_LIMITED":
                    time.sleep(1)
                    continue
                if code in REFUSED:
                    break
                raise RuntimeError(f"sender {i}: {f}")
        out[i] = (parked, code)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(senders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def drain(recipients, pid):
    """Every recipient connects, syncs and acknowledges each message until the relay holds none."""
    stop = threading.Event()
    got = [0] * len(recipients)

    def one(i):
        ws = Socket(port, query(recipients[i]))
        ws.s.settimeout(0.5)
        ws.send({"type": "sync", "crypto_v": 1})
        try:
            while not stop.is_set():
                try:
                    f = ws.recv()
                except socket.timeout:
                    continue
                if f is None:
                    break
                if f.get("type") == "msg":
                    got[i] += 1
                    if args.ack_delay_ms:
                        time.sleep(args.ack_delay_ms / 1000)
                    ws.send({"type": "delivered", "conv_id": f["conv_id"], "seq": f["seq"],
                             "to": f["from"], "crypto_v": 1})
        finally:
            ws.close()

    threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(len(recipients))]
    for t in threads:
        t.start()
    t0 = time.time()
    # The highest RSS, queue cache and outbound gauges seen while the recipients drain (every
    # 50 ms): a synced recipient's queues are held in the cache whatever its bound, and the
    # frames pushed to it wait in its socket's outbound queue. `held` is the highest sum of
    # the relay's own gauges of what it holds (queue cache, outbound, the other caches).
    peak = {"rss": 0.0, "cache": 0.0, "outbound": 0.0, "held": 0.0}
    while True:
        g = gauges()
        peak["rss"] = max(peak["rss"], memory(pid)["VmRSS"] / 1024)
        cache = g.get("relay_queue_cache_bytes", 0) / MiB
        outbound = g.get("relay_outbound_queued_bytes", 0) / MiB
        others = sum(g.get(k, 0) for k in OTHER_CACHES) / MiB
        peak["cache"] = max(peak["cache"], cache)
        peak["outbound"] = max(peak["outbound"], outbound)
        peak["held"] = max(peak["held"], cache + outbound + others)
        if g.get("relay_queued_messages", 1) <= 0:
            break
        if time.time() - t0 > 600:
            print("still queued after 600 s", file=sys.stderr)
            break
        time.sleep(0.05)
    took = time.time() - t0
    # Sampled while the recipients are still connected, then they go offline again.
    sample_args = (sum(got), took, peak)
    stop.set()
    for t in threads:
        t.join()
    return sample_args


def main():
    data = args.data or tempfile.mkdtemp(prefix="offline-flood-")
    if args.data:
        os.makedirs(data, mode=0o700)
    else:
        os.rmdir(data)
    p, pid = start_relay(data)
    try:
        n = args.accounts
        r = args.recipients or n
        t0 = time.time()
        senders, recipients = [], []
        for i in range(n + r):
            src = f"127.0.{2 + i // (10 * 250)}.{2 + (i // 10) % 250}"
            (senders if i < n else recipients).append(signed_up(port, f"u{i}", src))
        convs = [befriend(port, senders[i], recipients[i % r]) for i in range(n)]
        for s in senders:
            s["ws"] = Socket(port, query(s))
            s["ws"].send({"type": "sync", "crypto_v": 1})
        print(f"{n} senders and {r} recipients registered, befriended, senders connected in "
              f"{time.time() - t0:.1f} s; relay pid {pid}; data {data}; payload {args.payload} B",
              flush=True)
        sample("start", pid)
        for wave in range(1, args.waves + 1):
            out = [None] * n
            t0 = time.time()
            flood(wave, senders, recipients, convs, out)
            took = time.time() - t0
            codes = {}
            for _, c in out:
                codes[c] = codes.get(c, 0) + 1
            parked = sum(x for x, _ in out)
            sample(f"flood {wave}", pid, f"[{parked} acked in {took:.1f} s, refused: {codes}]")
            if not args.no_drain:
                got, took, peak = drain(recipients, pid)
                sample(f"drain {wave}", pid, f"[{got} delivered in {took:.1f} s; while draining: "
                                             f"RSS up to {peak['rss']:.0f} MiB, queue_cache up to "
                                             f"{peak['cache']:.0f} MiB, outbound up to "
                                             f"{peak['outbound']:.0f} MiB, gauges' sum up to "
                                             f"{peak['held']:.0f} MiB]")
        time.sleep(args.settle)
        sample(f"+{args.settle:g} s idle", pid)
        for s in senders:
            s["ws"].close()
        time.sleep(1)
        sample("senders gone", pid)
        if args.gdb_trim:
            subprocess.run(["gdb", "-p", str(pid), "-batch", "-ex", "call (int) malloc_trim(0)"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
            sample("malloc_trim(0)", pid)
        print("\n| phase | VmRSS MiB | VmHWM MiB | RssAnon MiB | threads | queued msgs | "
              "queued MiB | queue_cache MiB | outbound MiB | other caches MiB | queues read (total) |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]:.0f} | {r[2]:.0f} | {r[3]:.0f} | {r[4]} | {r[5]:.0f} | "
                  f"{r[6]:.1f} | {r[7]:.1f} | {r[8]:.1f} | {r[9]:.1f} | {r[10]:.0f} |")
        if args.keep:
            input("relay still running; Enter stops it ")
    finally:
        os.kill(pid, signal.SIGKILL if args.sigkill else signal.SIGTERM)
        try:
            p.wait(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
        if not args.data:
            subprocess.run(["rm", "-rf", data])


main()
