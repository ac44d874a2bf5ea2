-- Version 4: used single-use credentials (auth challenges, WebSocket tickets), one row per
-- credential's nonce until the credential expires (relay_core::store::Table::Spent).
CREATE TABLE IF NOT EXISTS spent (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
