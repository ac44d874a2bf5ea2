-- Version 1: one key/value table per relay_core::store::Table (the SqliteStore layout).
-- Keys are relay-core's row keys (lexicographic order is the useful order, hence COLLATE "C":
-- byte order, independent of the database's locale); values are opaque serialized records.
-- Runs inside the relay's schema (search_path), in one transaction, by the leader only.

CREATE TABLE meta (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE accounts (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE friendships (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE conversations (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE messages (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE tombstones (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE receipt_marks (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE pending_receipts (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE pending_retracts (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE channels (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE channel_posts (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE channel_subs (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE channel_quota (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE orders (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE payments (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE aliases (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE pending_confirms (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE media (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE push_targets (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
