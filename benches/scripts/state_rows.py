"""A relay's start on a large store, measured as an outsider: USERS accounts (with their
`account_index` rows), TOMBSTONES message-id tombstones, MESSAGES queued messages (in
MESSAGES / 10 conversations) and CONTACTS accepted friendships per user (each with its
conversation; 0 by default), the time from exec to `/readyz` 200 and the resident memory then
(three starts).

    cargo build --release -p relay-server --bin relay
    python3 benches/scripts/state_rows.py target/release/relay DIR 1000000 10000000 1000000 [CONTACTS]
    python3 benches/scripts/state_rows.py target/release/relay "$RELAY_TEST_POSTGRES_URL" 1000000 10000000 1000000 [CONTACTS]

Run with an older relay it writes only the tables that relay has (no `account_index`: the
accounts alone; no `contacts` or `queue_index`: the friendships by id and the queue summaries
in the conversation rows, which is where that relay reads them), for before/after comparisons.

The second argument is a SQLite data directory (created by the relay's first start) or a
PostgreSQL URL (schema `statebench`, dropped first and left behind: drop it after; keys in a
fresh /tmp/statebench-secrets; needs `psql`). After a first start (stopped once ready) the
script writes the rows straight into the store, the way the relay keeps them:

* accounts: 36-character uuids, 10-digit aliases, a nickname, two public keys, and for each
  the three index rows (`alias/…`, `ed25519/<hex>`, `x25519/<hex>` -> uuid);
* tombstones: 10,000 authors, 40-character message ids, expiring within 7 days;
* conversations and messages: between the first 2 × MESSAGES / 10 users, 10 messages each
  (36-character ids, 700-character payloads, accepted over the last hour), each
  conversation's row (with the queue summaries older relays read there) and its `queue_index`
  row;
* friendships: USERS × CONTACTS / 2, user `a` with `a + 1 + r` (mod USERS) in round `r`, each
  accepted with a conversation of its own (no messages), by id and, when the store has the
  table, once per member in `contacts`.
"""
import base64, json, os, sqlite3, subprocess, sys, time, uuid

from relaystart import (fresh_store, pg_has_table, pg_queue_index_sql, sqlite_has_table,
                        timed_starts, write_sqlite_queues)

relay, target = sys.argv[1], sys.argv[2]
users, tombstones, messages = (int(a) for a in sys.argv[3:6])
contacts = int(sys.argv[6]) if len(sys.argv) > 6 else 0
if contacts % 2 or contacts >= users:
    sys.exit("CONTACTS must be even and below USERS")
friendships = users * contacts // 2
PER = 10
convs = messages // PER
if 2 * convs > users:
    sys.exit("USERS must be at least MESSAGES / 5 (two members per conversation)")
port = 47850 + os.getpid() % 40
OVERHEAD = 256  # relay_core::limits::QUEUED_MESSAGE_OVERHEAD_BYTES
PAYLOAD = "QUJD" * 175
ID_LEN = 36
BYTES = PER * (ID_LEN + len(PAYLOAD) + OVERHEAD)
HOUR = 3_600_000
TTL = 7 * 24 * HOUR
AUTHORS = 10_000
now_ms = int(time.time() * 1000)
store, pg = fresh_store(relay, target, "statebench", port)
t0 = time.perf_counter()


def user(i):
    return str(uuid.UUID(int=(i + 1) << 16, version=4))


def key(i, kind):
    return (i * 2 + kind).to_bytes(32, "little")


def account(i):
    """The account row of user `i` and its three index rows."""
    u, alias = user(i), f"{i + 1_000_000_000:010d}"
    ed, x = key(i, 0), key(i, 1)
    row = {"uuid": u, "alias_id": alias, "nickname": f"user {i}",
           "ed25519_public_key": base64.b64encode(ed).decode(),
           "x25519_public_key": base64.b64encode(x).decode(),
           "created_at": now_ms - HOUR, "current_jti": None}
    uid = json.dumps(u).encode()
    index = [(f"alias/{alias}", uid), (f"ed25519/{ed.hex()}", uid), (f"x25519/{x.hex()}", uid)]
    return (u, json.dumps(row, separators=(",", ":")).encode()), index


def friendship(j):
    """Friendship `j` (id j + 1): its row, and its conversation's id and row."""
    a = j % users
    b = (a + 1 + j // users) % users
    cid = f"f-{j:010d}"
    f = {"id": j + 1, "requester": user(a), "addressee": user(b), "status": "accepted",
         "conversation_id": cid, "created_at": now_ms - HOUR}
    conv = {"id": cid, "members": [user(a), user(b)], "last_seq": 0, "last_authored": [0, 0]}
    return f, cid, json.dumps(conv, separators=(",", ":")).encode()


def conversation(c):
    a, b, cid = user(2 * c), user(2 * c + 1), f"bench-{c:08d}"
    queued = [{"msgs": 0, "bytes": 0, "oldest": 0},
              {"msgs": PER, "bytes": BYTES, "oldest": now_ms - HOUR + c * PER * HOUR // messages}]
    row = {"id": cid, "members": [a, b], "last_seq": PER, "last_authored": [PER, 0],
           "queued": queued}
    return a, b, cid, json.dumps(row, separators=(",", ":")).encode()


if pg:
    ident = "statebench"
    hexkey = "encode(int8send(({i}) * 2 + {k}) || int8send(0) || int8send(0) || int8send(0), 'hex')"
    # int8send is big-endian; the relay only compares keys, so any fixed encoding of the
    # account's keys works as long as the row and its index rows agree: the row's base64
    # is of the same 32 bytes.
    keybytes = "(int8send(({i}) * 2 + {k}) || int8send(0) || int8send(0) || int8send(0))"
    uid = "('00000000-0000-4000-8000-' || lpad(to_hex(({i} + 1) << 16), 12, '0'))"
    conv_sql = ",\n".join(
        f"('{cid}', convert_to('{value.decode()}', 'UTF8'))"
        for _, _, cid, value in map(conversation, range(convs)))
    has_index = pg_has_table(target, ident, "account_index")
    has_contacts = pg_has_table(target, ident, "contacts")
    queue_sql = pg_queue_index_sql(
        target, ident, [(c, v) for _, _, c, v in map(conversation, range(convs))])
    # Friendship j: a = j % USERS, b = (a + 1 + j / USERS) % USERS (as `friendship` above).
    fa, fb = "(j % {n})".format(n=users), "(((j % {n}) + 1 + j / {n}) % {n})".format(n=users)
    fsel = f"""SELECT j, lpad((j + 1)::text, 20, '0') AS k, {uid.format(i=fa)} AS a,
                      {uid.format(i=fb)} AS b, 'f-' || lpad(j::text, 10, '0') AS cid
                 FROM generate_series(0::bigint, {friendships - 1}) AS j"""
    fvalue = ("convert_to(json_build_object('id', j + 1, 'requester', a, 'addressee', b, "
              f"'status', 'accepted', 'conversation_id', cid, 'created_at', {now_ms - HOUR})::text, 'UTF8')")
    contacts_sql = f"""
INSERT INTO {ident}.contacts (k, v)
  SELECT a || '/' || k, {fvalue} FROM ({fsel}) q
  UNION ALL SELECT b || '/' || k, {fvalue} FROM ({fsel}) q;""" if has_contacts else ""
    friends_sql = f"""
INSERT INTO {ident}.friendships (k, v) SELECT k, {fvalue} FROM ({fsel}) q;
INSERT INTO {ident}.conversations (k, v)
  SELECT cid, convert_to(json_build_object('id', cid, 'members', json_build_array(a, b),
           'last_seq', 0, 'last_authored', json_build_array(0, 0))::text, 'UTF8')
  FROM ({fsel}) q;
{contacts_sql}
INSERT INTO {ident}.meta (k, v) VALUES ('next_friendship_id', convert_to('"{friendships + 1}"', 'UTF8'))
  ON CONFLICT (k) DO UPDATE SET v = excluded.v;""" if friendships else ""
    index_sql = f"""
INSERT INTO {ident}.account_index (k, v)
  SELECT k, convert_to(to_json(u)::text, 'UTF8') FROM (
    SELECT 'alias/' || lpad((i + 1000000000)::text, 10, '0') AS k, {uid.format(i='i')} AS u
      FROM generate_series(0::bigint, {users - 1}) AS i
    UNION ALL
    SELECT 'ed25519/' || {hexkey.format(i='i', k=0)}, {uid.format(i='i')}
      FROM generate_series(0::bigint, {users - 1}) AS i
    UNION ALL
    SELECT 'x25519/' || {hexkey.format(i='i', k=1)}, {uid.format(i='i')}
      FROM generate_series(0::bigint, {users - 1}) AS i) q;""" if has_index else ""
    sql = f"""
BEGIN;
INSERT INTO {ident}.accounts (k, v)
  SELECT {uid.format(i='i')}, convert_to(json_build_object(
           'uuid', {uid.format(i='i')}, 'alias_id', lpad((i + 1000000000)::text, 10, '0'),
           'nickname', 'user ' || i,
           'ed25519_public_key', encode({keybytes.format(i='i', k=0)}, 'base64'),
           'x25519_public_key', encode({keybytes.format(i='i', k=1)}, 'base64'),
           'created_at', {now_ms - HOUR}, 'current_jti', null)::text, 'UTF8')
  FROM generate_series(0::bigint, {users - 1}) AS i;
{index_sql}
INSERT INTO {ident}.tombstones (k, v, expires_at)
  SELECT a || '/' || m, convert_to(json_build_object('author', a, 'id', m,
           'conv_id', 'c' || (i % 997), 'seq', i / {AUTHORS} + 1, 'expires_at', e,
           'retracted', false)::text, 'UTF8'), e
  FROM (SELECT i, {uid.format(i='(i % ' + str(AUTHORS) + ')')} AS a,
               md5(i::text)::uuid::text || '-' || lpad((i % 1000)::text, 3, '0') AS m,
               {now_ms + TTL} - ({tombstones} - i) * {HOUR} / {tombstones} AS e
        FROM generate_series(0::bigint, {tombstones - 1}) AS i) q;
INSERT INTO {ident}.conversations (k, v) VALUES
{conv_sql};
{queue_sql}
{friends_sql}
INSERT INTO {ident}.messages (k, v)
  SELECT b || '/' || cid || '/' || lpad(s::text, 20, '0'),
         convert_to(json_build_object('recipient', b, 'conv_id', cid, 'seq', s, 'id', m,
                    'from', a, 'crypto_v', null, 'payload', '{PAYLOAD}',
                    'at', {now_ms - HOUR} + i * {HOUR} / {messages})::text, 'UTF8')
  FROM (SELECT i, (i % {PER}) + 1 AS s, md5(i::text)::uuid::text AS m,
               'bench-' || lpad((i / {PER})::text, 8, '0') AS cid,
               {uid.format(i='2 * (i / ' + str(PER) + ')')} AS a,
               {uid.format(i='2 * (i / ' + str(PER) + ') + 1')} AS b
        FROM generate_series(0::bigint, {messages - 1}) AS i) q;
COMMIT;
VACUUM ANALYZE;
"""
    subprocess.run(["psql", target, "-q", "-v", "ON_ERROR_STOP=1"], input=sql.encode(),
                   check=True, stdout=subprocess.DEVNULL)
    size = subprocess.run(
        ["psql", target, "-tAc",
         f"SELECT pg_size_pretty(sum(pg_total_relation_size(format('%I.%I', schemaname, tablename)))) "
         f"FROM pg_tables WHERE schemaname = '{ident}'"],
        check=True, capture_output=True).stdout.decode().strip()
else:
    db = sqlite3.connect(os.path.join(target, "relay.sqlite3"))
    has_index = sqlite_has_table(db, "account_index")
    has_contacts = sqlite_has_table(db, "contacts")
    with db:
        accounts, index = [], []
        for i in range(users):
            row, idx = account(i)
            accounts.append(row)
            index.extend(idx)
            if len(accounts) == 50_000 or i == users - 1:
                db.executemany("INSERT OR REPLACE INTO accounts VALUES (?, ?)", accounts)
                if has_index:
                    db.executemany("INSERT OR REPLACE INTO account_index VALUES (?, ?)", index)
                accounts, index = [], []
        people = [user(i) for i in range(AUTHORS)]
        rows = []
        for i in range(tombstones):
            author = people[i % AUTHORS]
            mid = f"{uuid.UUID(int=(i + 1) << 32, version=4)}-{i % 1000:03d}"
            expires = now_ms + TTL - (tombstones - i) * HOUR // tombstones
            value = json.dumps({"author": author, "id": mid, "conv_id": f"c{i % 997}",
                                "seq": i // AUTHORS + 1, "expires_at": expires,
                                "retracted": False}, separators=(",", ":")).encode()
            rows.append((f"{author}/{mid}", value, expires))
            if len(rows) == 50_000 or i == tombstones - 1:
                db.executemany("INSERT OR REPLACE INTO tombstones VALUES (?, ?, ?)", rows)
                rows = []
        write_sqlite_queues(db, map(conversation, range(convs)), PER, PAYLOAD,
                            lambda i: now_ms - HOUR + i * HOUR // messages)
        fs, cs, ks = [], [], []
        for j in range(friendships):
            f, cid, conv = friendship(j)
            value = json.dumps(f, separators=(",", ":")).encode()
            fs.append((f"{j + 1:020d}", value))
            cs.append((cid, conv))
            if has_contacts:
                ks.append((f"{f['requester']}/{j + 1:020d}", value))
                ks.append((f"{f['addressee']}/{j + 1:020d}", value))
            if len(fs) == 50_000 or j == friendships - 1:
                db.executemany("INSERT OR REPLACE INTO friendships VALUES (?, ?)", fs)
                db.executemany("INSERT OR REPLACE INTO conversations VALUES (?, ?)", cs)
                if has_contacts:
                    db.executemany("INSERT OR REPLACE INTO contacts VALUES (?, ?)", ks)
                fs, cs, ks = [], [], []
        if friendships:
            db.execute("INSERT OR REPLACE INTO meta VALUES ('next_friendship_id', ?)",
                       (json.dumps(str(friendships + 1)).encode(),))
    db.close()
    size = f"{os.path.getsize(os.path.join(target, 'relay.sqlite3')) >> 20} MiB"
print(f"{users} accounts ({'with' if has_index else 'without'} index rows), {tombstones} tombstones, {messages} queued messages in {convs} "
      f"conversations, {friendships} friendships ({'with' if has_contacts else 'without'} contacts rows) written in {time.perf_counter() - t0:.1f} s (store {size})", flush=True)
timed_starts(relay, store, port)
