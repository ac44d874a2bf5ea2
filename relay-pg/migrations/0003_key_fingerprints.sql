-- Version 3: the fingerprints of the keys every relay of this schema must share.
--
-- The keys themselves (the JWT signing key, the Web Push VAPID key) are files of each relay,
-- never rows: no dump of the database holds a key. Each row holds a 32-byte fingerprint the
-- relay derives from its key (a keyed hash or a hash of the public key: nothing that helps
-- recover the key), written only by a new leader inside the transaction that takes its epoch.
-- A new leader whose fingerprint differs refuses to lead (unless it rotates that key), so a
-- standby with other keys cannot take over and log every user out or break every browser's push
-- subscription. `holder`, `epoch` and `recorded_at` tell operators which relay recorded it.

CREATE TABLE key_fingerprints (
    kind        TEXT PRIMARY KEY,
    fingerprint BYTEA NOT NULL CHECK (octet_length(fingerprint) = 32),
    holder      TEXT NOT NULL DEFAULT '',
    epoch       BIGINT NOT NULL CHECK (epoch >= 0),
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
