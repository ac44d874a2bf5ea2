"""Starting and stopping a release `relay` on a store, measured as an outsider: the seconds from
exec to `/readyz` 200, and the process's resident memory (VmRSS) and peak (VmHWM) at that
moment. Shared by the scripts that fill a store and time the starts on it. `store` is the
relay's store arguments (`["--data", DIR]`, or `["--postgres", URL, ...]`)."""
import json, os, shutil, signal, subprocess, sys, time, urllib.error, urllib.request, uuid


def start(relay, store, port, extra=()):
    """Starts `relay` on `store` (with the arguments `extra` too); returns (process, seconds to
    ready, RSS MiB, peak RSS MiB)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([relay, "--listen", f"127.0.0.1:{port}", *store, "--log", "warn",
                          *extra],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if p.poll() is not None:
            sys.exit(f"the relay exited: {p.stderr.read().decode()[-2000:]}")
        time.sleep(0.01)
    ready = time.perf_counter() - t0
    return (p, ready, *memory_mib(p))


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def timed_starts(relay, store, port, runs=3):
    for run in range(runs):
        p, ready, rss, hwm = start(relay, store, port)
        print(f"start {run + 1}: /readyz 200 after {ready:.2f} s, RSS {rss} MiB, "
              f"peak RSS {hwm} MiB", flush=True)
        stop(p)


def memory_mib(p):
    """The RSS and peak RSS (MiB) of process `p` now."""
    status = open(f"/proc/{p.pid}/status").read()
    mem = {l.split(":")[0]: l.split()[1] for l in status.splitlines() if l.startswith("Vm")}
    return int(mem["VmRSS"]) // 1024, int(mem["VmHWM"]) // 1024


def timed_sweep(relay, store, port, n):
    """Starts `relay` on a store whose `n` queued messages are all past their TTL and times its
    expiry sweep as an outsider: from `/readyz` 200 until the `relay_queued_messages` gauge
    (metrics on `port + 1`) reads 0, meanwhile asking for a PoW challenge every 100 ms (a request
    the relay's core answers: it must keep answering while it sweeps; any status counts)."""
    p, ready, rss, _ = start(relay, store, port, ["--metrics-listen", f"127.0.0.1:{port + 1}"])
    print(f"start: /readyz 200 after {ready:.2f} s, RSS {rss} MiB", flush=True)
    t0, slowest, probes, left = time.perf_counter(), 0.0, 0, n
    while left:
        t = time.perf_counter()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/pow/challenge",
                                        timeout=30) as r:
                r.read()
        except urllib.error.HTTPError:
            pass
        slowest, probes = max(slowest, time.perf_counter() - t), probes + 1
        with urllib.request.urlopen(f"http://127.0.0.1:{port + 1}/metrics", timeout=30) as r:
            gauge = [l for l in r.read().decode().splitlines()
                     if l.startswith("relay_queued_messages ")]
        left = int(float(gauge[0].split()[1]))
        if time.perf_counter() - t0 > 3600:
            sys.exit(f"{left} messages still queued after an hour")
        time.sleep(0.1)
    took = time.perf_counter() - t0
    rss, hwm = memory_mib(p)
    print(f"swept {n} messages in {took:.1f} s ({n / took:,.0f} msgs/s); slowest of {probes} "
          f"core requests meanwhile {slowest * 1000:.0f} ms; RSS {rss} MiB, peak {hwm} MiB",
          flush=True)
    stop(p)


def fresh_store(relay, target, schema, port):
    """The store arguments for `target` (a SQLite data directory, or a PostgreSQL URL whose
    schema `schema` is dropped first; keys in a fresh /tmp/<schema>-secrets), after a first
    start of `relay` on it (stopped once ready) has created it. Returns (store args, is_pg)."""
    pg = target.startswith("postgres")
    if pg:
        secrets = f"/tmp/{schema}-secrets"
        shutil.rmtree(secrets, ignore_errors=True)
        os.mkdir(secrets, 0o700)
        store = ["--postgres", target, "--pg-schema", schema, "--secrets-dir", secrets]
        subprocess.run(["psql", target, "-qc", f"DROP SCHEMA IF EXISTS {schema} CASCADE"],
                       check=True, stdout=subprocess.DEVNULL)
    else:
        store = ["--data", target]
    p, _, _, _ = start(relay, store, port)
    stop(p)
    return store, pg


def queue_index_rows(conv_rows, expiring=False):
    """The `queue_index` rows (key, value) of the conversation rows `conv_rows` ((conv id, row
    JSON) each), from the queue summaries they carry (`queued`, per member: the layout relays
    before the queue index read, which later ones ignore); with `expiring`, each with its
    expiry too (its oldest message's acceptance plus the relay's default TTL)."""
    out = []
    for cid, value in conv_rows:
        c = json.loads(value)
        for i, q in enumerate(c["queued"]):
            if q["msgs"]:
                to, frm = c["members"][i], c["members"][1 - i]
                row = {"recipient": to, "conv_id": cid, "from": frm, "msgs": q["msgs"],
                       "bytes": q["bytes"], "oldest": q["oldest"]}
                value = json.dumps(row, separators=(",", ":")).encode()
                out.append((f"{to}/{cid}", value, q["oldest"] + OFFLINE_TTL_MS) if expiring
                           else (f"{to}/{cid}", value))
    return out


def sqlite_has_table(db, name):
    return db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = ?",
                      (name,)).fetchone()[0] == 1


def pg_has_table(url, schema, name):
    return subprocess.run(
        ["psql", url, "-tAc",
         f"SELECT count(*) FROM pg_tables WHERE schemaname = '{schema}' "
         f"AND tablename = '{name}'"],
        check=True, capture_output=True).stdout.decode().strip() == "1"


def sqlite_has_column(db, table, column):
    return db.execute("SELECT count(*) FROM pragma_table_info(?) WHERE name = ?",
                      (table, column)).fetchone()[0] == 1


def pg_has_column(url, schema, table, column):
    return subprocess.run(
        ["psql", url, "-tAc",
         f"SELECT count(*) FROM information_schema.columns WHERE table_schema = '{schema}' "
         f"AND table_name = '{table}' AND column_name = '{column}'"],
        check=True, capture_output=True).stdout.decode().strip() == "1"


# The relay's default offline TTL: a queued message expires this long after it was accepted.
OFFLINE_TTL_MS = 24 * 3600 * 1000


def pg_values(rows):
    """`rows` ((key, JSON bytes) or (key, JSON bytes, expiry) each) as the VALUES list of an
    INSERT into a `(k, v)` or `(k, v, expires_at)` table."""
    return ",\n".join(f"('{r[0]}', convert_to('{r[1].decode()}', 'UTF8')"
                       + "".join(f", {x}" for x in r[2:]) + ")" for r in rows)


def pg_queue_index_sql(url, schema, conv_rows):
    """The INSERT of the `queue_index` rows of `conv_rows` (with their expiries when the table
    has the column; nothing when the store has no such table)."""
    if not pg_has_table(url, schema, "queue_index"):
        return ""
    expiring = pg_has_column(url, schema, "queue_index", "expires_at")
    columns = "(k, v, expires_at)" if expiring else "(k, v)"
    return (f"INSERT INTO {schema}.queue_index {columns} VALUES\n"
            f"{pg_values(queue_index_rows(conv_rows, expiring))};")


def write_sqlite_queues(db, conversations, per, payload, at):
    """Writes the conversation rows `conversations` ((a, b, conv id, row) each) into the SQLite
    store `db`, and `per` queued messages from a to b in each: seqs 1..per, 36-character ids,
    message `i` (0-based over all) accepted at `at(i)`; and their `queue_index` rows (with their
    expiries when the table has the column) when the store has that table."""
    rows, conv_rows, i = [], [], 0
    for a, b, cid, value in conversations:
        conv_rows.append((cid, value))
        for s in range(1, per + 1):
            mid = str(uuid.UUID(int=(i + 1) << 40, version=4))
            msg = {"recipient": b, "conv_id": cid, "seq": s, "id": mid, "from": a,
                   "crypto_v": None, "payload": payload, "at": at(i)}
            rows.append((f"{b}/{cid}/{s:020d}", json.dumps(msg, separators=(",", ":")).encode()))
            i += 1
            if len(rows) == 50_000:
                db.executemany("INSERT OR REPLACE INTO messages VALUES (?, ?)", rows)
                rows = []
    db.executemany("INSERT OR REPLACE INTO messages VALUES (?, ?)", rows)
    db.executemany("INSERT OR REPLACE INTO conversations VALUES (?, ?)", conv_rows)
    if sqlite_has_table(db, "queue_index"):
        expiring = sqlite_has_column(db, "queue_index", "expires_at")
        db.executemany("INSERT OR REPLACE INTO queue_index VALUES (?, ?, ?)" if expiring
                       else "INSERT OR REPLACE INTO queue_index VALUES (?, ?)",
                       queue_index_rows(conv_rows, expiring))
