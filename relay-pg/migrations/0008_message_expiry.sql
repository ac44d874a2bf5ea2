-- Version 8: queued messages expire by an indexed scan instead of one timer per queue in the
-- relay's memory. `messages` (relay_core::store::Table::Messages) becomes an expiring table: each
-- row's expiry (epoch milliseconds: the message's acceptance time plus the offline TTL in force
-- when it was accepted) lives in its own indexed column, and the relay reads the due keys in
-- pages from the index (`WHERE expires_at <= $1 ORDER BY expires_at, k`).
--
-- Existing rows are left NULL (never due): a relay of this version fills the column at its first
-- start from each row's `at` and its own TTL (meta row `message_expiry`), since the TTL is the
-- relay's configuration, not the database's.
ALTER TABLE messages ADD COLUMN IF NOT EXISTS expires_at BIGINT;
-- The index holds the key too, so a page of due keys comes from the index alone.
CREATE INDEX IF NOT EXISTS messages_expires_at ON messages (expires_at, k);
