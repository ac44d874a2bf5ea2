-- Version 6: the accounts' lookup keys (relay_core::store::Table::AccountIndex), one row per
-- alias and per public key of every account, each to the account's uuid, written in the same
-- transaction as the account row. The relay reads accounts on first use instead of loading
-- them all at start, and finds one by alias or by key through these rows. A relay of this
-- version fills the table from the accounts at its first start (meta row `account_index`).
CREATE TABLE IF NOT EXISTS account_index (k TEXT COLLATE "C" PRIMARY KEY, v BYTEA NOT NULL);
