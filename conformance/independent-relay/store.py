"""The relay's durable state: one SQLite file (WAL, synchronous=FULL).

Every write that is acknowledged to a client is committed first (`Store.durable`). With the
planted bug `ack-before-durable` messages and their seq counters live in a second file whose
commit is skipped there and done by a background task every COMMIT_EVERY_S seconds instead,
so a kill -9 loses the messages acked meanwhile and the restarted relay gives their seqs again.
"""

import sqlite3

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS accounts (
  uuid TEXT PRIMARY KEY, alias TEXT UNIQUE NOT NULL, ed_key TEXT UNIQUE NOT NULL,
  x_key TEXT NOT NULL, nickname TEXT NOT NULL, created_ms INTEGER NOT NULL,
  extra_seats INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS tokens (
  token TEXT PRIMARY KEY, uuid TEXT NOT NULL, expires_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS friendships (
  id INTEGER PRIMARY KEY, requester TEXT NOT NULL, recipient TEXT NOT NULL,
  status TEXT NOT NULL, conv_id TEXT, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS counters (conv_id TEXT PRIMARY KEY, last_seq INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
  conv_id TEXT NOT NULL, seq INTEGER NOT NULL, id TEXT NOT NULL, sender TEXT NOT NULL,
  recipient TEXT NOT NULL, payload TEXT NOT NULL, crypto_v INTEGER, at_ms INTEGER NOT NULL,
  pending INTEGER NOT NULL, PRIMARY KEY (conv_id, seq));
CREATE INDEX IF NOT EXISTS messages_by_id ON messages (conv_id, id);
CREATE INDEX IF NOT EXISTS messages_pending ON messages (recipient, pending);
CREATE TABLE IF NOT EXISTS outbox (
  n INTEGER PRIMARY KEY AUTOINCREMENT, uuid TEXT NOT NULL, frame TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS channels (
  id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, description TEXT NOT NULL,
  is_public INTEGER NOT NULL, sale_price INTEGER, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS subscriptions (channel_id TEXT NOT NULL, uuid TEXT NOT NULL,
  PRIMARY KEY (channel_id, uuid));
CREATE TABLE IF NOT EXISTS posts (
  id TEXT PRIMARY KEY, channel_id TEXT NOT NULL, type TEXT NOT NULL, content TEXT NOT NULL,
  author TEXT NOT NULL, created_ms INTEGER NOT NULL, n INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS orders (
  id TEXT PRIMARY KEY, kind TEXT NOT NULL, buyer TEXT, ref_id TEXT NOT NULL,
  price INTEGER NOT NULL, status TEXT NOT NULL, expires_ms INTEGER NOT NULL,
  bound INTEGER NOT NULL DEFAULT 0, created_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS payments (payment_id TEXT PRIMARY KEY, order_id TEXT NOT NULL);
"""


class Store:
    def __init__(self, path, background_commit):
        self.conn = sqlite3.connect(path or ":memory:", isolation_level="DEFERRED")
        self.conn.row_factory = sqlite3.Row
        if path:
            self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.executescript(SCHEMA)
        self.conn.commit()
        self.background_commit = background_commit

    def q(self, sql, *args):
        return self.conn.execute(sql, args).fetchall()

    def one(self, sql, *args):
        return self.conn.execute(sql, args).fetchone()

    def x(self, sql, *args):
        return self.conn.execute(sql, args)

    def durable(self):
        """Commits what was written, before the client is told it happened."""
        if not self.background_commit:
            self.conn.commit()

    def flush(self):
        """The background commit of the planted `ack-before-durable` bug."""
        self.conn.commit()

    def meta(self, key, make):
        row = self.one("SELECT v FROM meta WHERE k = ?", key)
        if row:
            return row["v"]
        value = make()
        self.x("INSERT INTO meta (k, v) VALUES (?, ?)", key, value)
        self.conn.commit()
        return value
