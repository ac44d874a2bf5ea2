-- Version 7: conversations and friendships are read on first use instead of loaded at start.
-- `contacts` (relay_core::store::Table::Contacts) holds every friendship once per member, keyed
-- `user/friendship id`, so a user's contacts are one prefix scan; `queue_index`
-- (Table::QueueIndex) holds what each non-empty queue counts (messages, bytes, oldest, sender),
-- keyed `recipient/conv`, loaded at start for the queue bounds and the expiry timers. Both are
-- written in the same transaction as the rows they describe; a relay of this version fills them
-- from the friendships and the messages at its first start (meta rows `contacts`,
-- `queue_index`).
CREATE TABLE IF NOT EXISTS contacts (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
CREATE TABLE IF NOT EXISTS queue_index (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
