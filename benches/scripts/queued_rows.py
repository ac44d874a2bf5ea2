"""A relay's start with many undelivered messages in its SQLite store, measured as an outsider:
the time from exec to `/readyz` 200 and the process's resident memory then; then the first
`sync` of one recipient, whose queue is read then.

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/queued_rows.py target/release/relay DIR 1000000 [CONVERSATIONS]

Creates the data directory DIR with the relay itself (first start, stopped once ready), then
writes CONVERSATIONS conversations (N / 10 by default) between fresh pairs of users and N queued
messages spread evenly over them (for the second member; 36-character ids, 700-character
payloads, accepted over the last hour) straight into `DIR/relay.sqlite3` in one transaction,
each conversation's row with the counts a relay keeps in it (`queued`: messages, bytes as the
queue bounds count them, oldest). Then starts the relay on it three times and prints, for each
start, the seconds to `/readyz` 200 and the RSS and peak RSS at that moment. (A relay that
loads every queue at start ignores the `queued` field; one that reads them lazily needs it.)
"""
import json, os, sqlite3, sys, time, uuid

from relaystart import start, stop, timed_starts

relay, data, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
convs = int(sys.argv[4]) if len(sys.argv) > 4 else max(1, n // 10)
port = 47950 + os.getpid() % 40
OVERHEAD = 256  # relay_core::limits::QUEUED_MESSAGE_OVERHEAD_BYTES

p, _, _, _ = start(relay, data, port)
stop(p)
db = sqlite3.connect(os.path.join(data, "relay.sqlite3"))
now_ms = int(time.time() * 1000)
payload = "QUJD" * 175
t0 = time.perf_counter()


def user(i):
    return str(uuid.UUID(int=(i + 1) << 16, version=4))


with db:
    per = [n // convs + (1 if c < n % convs else 0) for c in range(convs)]
    rows, i = [], 0
    conv_rows = []
    for c in range(convs):
        a, b, cid = user(2 * c), user(2 * c + 1), f"bench-{c:08d}"
        seqs = per[c]
        oldest, nbytes = None, 0
        for s in range(1, seqs + 1):
            mid = str(uuid.UUID(int=(i + 1) << 40, version=4))
            at = now_ms - 3_600_000 + i * 3_600_000 // max(n, 1)
            oldest = at if oldest is None else min(oldest, at)
            nbytes += len(mid) + len(payload) + OVERHEAD
            value = json.dumps({"recipient": b, "conv_id": cid, "seq": s, "id": mid, "from": a,
                                "crypto_v": None, "payload": payload, "at": at},
                               separators=(",", ":")).encode()
            rows.append((f"{b}/{cid}/{s:020d}", value))
            i += 1
            if len(rows) == 50_000:
                db.executemany("INSERT OR REPLACE INTO messages VALUES (?, ?)", rows)
                rows = []
        queued = [{"msgs": 0, "bytes": 0, "oldest": 0},
                  {"msgs": seqs, "bytes": nbytes, "oldest": oldest or 0}]
        conv_rows.append((cid, json.dumps({"id": cid, "members": [a, b], "last_seq": seqs,
                                           "last_authored": [seqs, 0], "queued": queued},
                                          separators=(",", ":")).encode()))
    db.executemany("INSERT OR REPLACE INTO messages VALUES (?, ?)", rows)
    db.executemany("INSERT OR REPLACE INTO conversations VALUES (?, ?)", conv_rows)
db.close()
size = os.path.getsize(os.path.join(data, "relay.sqlite3")) // (1 << 20)
print(f"{n} queued messages in {convs} conversations written in "
      f"{time.perf_counter() - t0:.1f} s (database {size} MiB)", flush=True)
timed_starts(relay, data, port)
