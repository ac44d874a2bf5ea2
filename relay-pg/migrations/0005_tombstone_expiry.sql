-- Version 5: rows with an expiry (relay_core::store::Table::has_expiry: the tombstones). Each
-- row's expiry (epoch milliseconds) lives in its own indexed column, so that expiring every due
-- row is one range delete (`DELETE … WHERE expires_at <= $1`) and the latest and next expiries
-- are index reads. NULL: a row written without an expiry, which never expires.
--
-- Existing rows take the expiry from their own serialized record's `expires_at` field (one
-- rewrite of the table, inside the new leader's migrating transaction).

ALTER TABLE tombstones ADD COLUMN expires_at BIGINT;
UPDATE tombstones SET expires_at = (convert_from(v, 'UTF8')::jsonb->>'expires_at')::bigint;
-- The index holds the key too, so the latest expiries (keys and expiries, read at every start)
-- come from the index alone.
CREATE INDEX tombstones_expires_at ON tombstones (expires_at, k);
