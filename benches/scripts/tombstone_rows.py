"""A relay's start with many message-id tombstones in its SQLite store, measured as an outsider:
the time from exec to `/readyz` 200 and the process's resident memory then.

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/tombstone_rows.py target/release/relay DIR 1000000 [AUTHORS] [--author-keys]

Creates the data directory DIR with the relay itself (first start, stopped once ready), writes
N tombstone rows (AUTHORS authors, 10,000 by default; 40-character message ids; expiring 7 days
from now, accepted over the last hour) straight into `DIR/relay.sqlite3` in one transaction,
then starts the relay on it three times and prints, for each start, the seconds to `/readyz`
200 and the RSS (VmRSS) and peak RSS (VmHWM) at that moment. The rows are written the way the
store keeps them: with the `expires_at` column when the schema has it (version 2 and later),
without it for an older relay (whose first start of a newer build then migrates them), keyed
`conv/id/author` (997 conversations) as the relay keys them. With `--author-keys` the rows are
keyed `author/id` and the meta row saying the tombstones are keyed by conversation is deleted:
the store an older relay, which deduplicated per author, left; the first of the three starts
then rekeys them (the migration's cost), the others start on the rekeyed store.
"""
import json, os, sqlite3, sys, time, uuid

from relaystart import start, stop, timed_starts

author_keys = "--author-keys" in sys.argv
args = [a for a in sys.argv if a != "--author-keys"]
relay, data, n = args[1], args[2], int(args[3])
authors = int(args[4]) if len(args) > 4 else 10_000
port = 47900 + os.getpid() % 50


p, _, _, _ = start(relay, ["--data", data], port)
stop(p)
db = sqlite3.connect(os.path.join(data, "relay.sqlite3"))
columns = [r[1] for r in db.execute("PRAGMA table_info(tombstones)")]
now_ms = int(time.time() * 1000)
ttl = 7 * 24 * 3600 * 1000
people = [str(uuid.UUID(int=i + 1, version=4)) for i in range(authors)]
t0 = time.perf_counter()
with db:
    rows = []
    for i in range(n):
        author = people[i % authors]
        mid = f"{uuid.UUID(int=(i + 1) << 32, version=4)}-{i % 1000:03d}"
        expires = now_ms + ttl - (n - i) * 3_600_000 // n
        value = json.dumps({"author": author, "id": mid, "conv_id": f"c{i % 997}",
                            "seq": i // authors + 1, "expires_at": expires,
                            "retracted": False}, separators=(",", ":")).encode()
        key = f"{author}/{mid}" if author_keys else f"c{i % 997}/{mid}/{author}"
        rows.append((key, value, expires) if "expires_at" in columns else (key, value))
        if len(rows) == 50_000 or i == n - 1:
            marks = "?, ?, ?" if "expires_at" in columns else "?, ?"
            db.executemany(f"INSERT OR REPLACE INTO tombstones VALUES ({marks})", rows)
            rows = []
    if author_keys:
        db.execute("DELETE FROM meta WHERE k = 'tombstones_by_conversation'")
db.close()
size = os.path.getsize(os.path.join(data, "relay.sqlite3")) // (1 << 20)
print(f"{n} tombstones of {authors} authors written in {time.perf_counter() - t0:.1f} s "
      f"(schema columns: {', '.join(columns)}; database {size} MiB)")
timed_starts(relay, ["--data", data], port)
