-- Version 8: queued messages expire by an indexed scan instead of one timer per queue in the
-- relay's memory. `queue_index` (relay_core::store::Table::QueueIndex, one row per non-empty
-- queue) becomes an expiring table: each row's expiry (epoch milliseconds: when the queue's
-- oldest message's offline TTL ends) lives in its own indexed column, and the relay reads the
-- due queues in pages from the index (`WHERE expires_at <= $1 ORDER BY expires_at, k`).
--
-- Existing rows are left NULL (never due): a relay of this version fills the column at its first
-- start from each row's `oldest` and its own TTL (meta row `queue_expiry_ttl`), since the TTL is
-- the relay's configuration, not the database's.
ALTER TABLE queue_index ADD COLUMN IF NOT EXISTS expires_at BIGINT;
-- The index holds the key too, so a page of due queues comes from the index alone.
CREATE INDEX IF NOT EXISTS queue_index_expires_at ON queue_index (expires_at, k);
